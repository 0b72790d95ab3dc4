package tokentable

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/holdfast-dev/holdfast/access"
	"github.com/holdfast-dev/holdfast/internal/testutil"
)

// fakeSync is a server's POST /control/tokens/sync.
type fakeSync struct {
	secret string
	mu     sync.Mutex
	recs   []access.Record
	rev    int64
	used   []string
	afters []int64
	down   atomic.Bool
}

func (f *fakeSync) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if f.down.Load() {
		http.Error(w, "down", http.StatusServiceUnavailable)
		return
	}
	if r.URL.Path != "/control/tokens/sync" || r.Method != http.MethodPost || r.Header.Get("Authorization") != "Bearer "+f.secret {
		http.Error(w, "no", http.StatusForbidden)
		return
	}
	var body struct {
		After int64    `json:"after"`
		Used  []string `json:"used"`
	}
	if err := json.NewDecoder(r.Body).Decode(&body); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	f.mu.Lock()
	f.used = append(f.used, body.Used...)
	f.afters = append(f.afters, body.After)
	reply := syncReply{Revision: f.rev, Required: true, Records: slices.Clone(f.recs)}
	f.mu.Unlock()
	if body.After == reply.Revision {
		time.Sleep(20 * time.Millisecond) // the server's wait, short
	}
	_ = json.NewEncoder(w).Encode(reply)
}

func (f *fakeSync) set(rev int64, recs ...access.Record) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.rev, f.recs = rev, recs
}

func TestRemoteFollowsTheServersRecords(t *testing.T) {
	relaySecret, clientSecret := access.NewSecret(), access.NewSecret()
	f := &fakeSync{secret: relaySecret}
	f.set(5, access.Record{Name: "svc", Hash: access.HashSecret(clientSecret), Scopes: access.Scopes{Data: []string{"a.*"}}})
	dead := httptest.NewServer(http.NotFoundHandler()) // the first URL fails: the Remote moves on
	defer dead.Close()
	hs := httptest.NewServer(f)
	defer hs.Close()

	r, err := NewRemote(RemoteConfig{URLs: []string{dead.URL, hs.URL}, Secret: relaySecret})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	testutil.Eventually(t, 5*time.Second, func() bool {
		id, ok := r.Tokens().AuthenticateHeader("Bearer " + clientSecret)
		return ok && id.MayRead("a.b") && !id.MayRead("b")
	}, "the token of the server's records authenticates")

	// Its use is reported in a later request.
	testutil.Eventually(t, 5*time.Second, func() bool {
		f.mu.Lock()
		defer f.mu.Unlock()
		return slices.Contains(f.used, "svc")
	}, "the relay reports the use")

	// Revoked at the server: refused.
	f.set(6)
	testutil.Eventually(t, 5*time.Second, func() bool { _, ok := r.Tokens().AuthenticateHeader("Bearer " + clientSecret); return !ok },
		"a record gone from the server's reply is refused")
	f.mu.Lock()
	afters := slices.Clone(f.afters)
	f.mu.Unlock()
	if !slices.Contains(afters, 5) {
		t.Fatalf("the relay never asked for changes after revision 5: %v", afters)
	}
}

func TestRemoteMaxStale(t *testing.T) {
	relaySecret, clientSecret := access.NewSecret(), access.NewSecret()
	f := &fakeSync{secret: relaySecret}
	f.set(1, access.Record{Name: "svc", Hash: access.HashSecret(clientSecret), Scopes: access.Scopes{Data: []string{"*"}}})
	hs := httptest.NewServer(f)
	defer hs.Close()
	for _, tc := range []struct {
		maxStale time.Duration
		wantOK   bool
	}{{0, true}, {300 * time.Millisecond, false}} {
		f.down.Store(false)
		r, err := NewRemote(RemoteConfig{URLs: []string{hs.URL}, Secret: relaySecret, MaxStale: tc.maxStale})
		if err != nil {
			t.Fatal(err)
		}
		<-r.Ready()
		if _, ok := r.Authenticate(clientSecret); !ok {
			t.Fatal("not authenticated after the first reply")
		}
		f.down.Store(true)
		testutil.Eventually(t, 5*time.Second, func() bool { return time.Since(r.LastSync()) > 500*time.Millisecond }, "the server silent")
		if _, ok := r.Authenticate(clientSecret); ok != tc.wantOK {
			t.Errorf("MaxStale %v: authenticated %v with the server silent, want %v", tc.maxStale, ok, tc.wantOK)
		}
		r.Close()
		r.Close() // idempotent
	}
}

func TestNewRemoteRefusesABadConfig(t *testing.T) {
	if _, err := NewRemote(RemoteConfig{Secret: access.NewSecret()}); err == nil {
		t.Error("no URL accepted")
	}
	if _, err := NewRemote(RemoteConfig{URLs: []string{"http://127.0.0.1:1"}, Secret: "short"}); err == nil {
		t.Error("a short secret accepted")
	}
}

// TestRemoteServesARelayBehindIt: a relay behind a relay syncs from the
// first one's copy: the store's records reach it, a revocation too, the
// uses it reports reach the server; its token needs the relay scope
// there (401 without a token, 403 without the scope); a Remote that has
// not synced yet refuses every caller.
func TestRemoteServesARelayBehindIt(t *testing.T) {
	edge1, edge2, app, other := access.NewSecret(), access.NewSecret(), access.NewSecret(), access.NewSecret()
	f := &fakeSync{secret: edge1}
	f.set(7,
		access.Record{Name: "edge-2", Hash: access.HashSecret(edge2), Scopes: access.Scopes{Relay: true, Data: []string{"*"}}},
		access.Record{Name: "payments-svc", Hash: access.HashSecret(app), Scopes: access.Scopes{Data: []string{"payments.*"}}},
		access.Record{Name: "other-svc", Hash: access.HashSecret(other), Scopes: access.Scopes{Data: []string{"*"}}})
	origin := httptest.NewServer(f)
	defer origin.Close()
	first, err := NewRemote(RemoteConfig{URLs: []string{origin.URL}, Secret: edge1})
	if err != nil {
		t.Fatal(err)
	}
	defer first.Close()
	mux := http.NewServeMux()
	mux.Handle("POST /control/tokens/sync", first)
	hop := httptest.NewServer(mux)
	defer hop.Close()
	second, err := NewRemote(RemoteConfig{URLs: []string{hop.URL}, Secret: edge2})
	if err != nil {
		t.Fatal(err)
	}
	defer second.Close()

	testutil.Eventually(t, 5*time.Second, func() bool {
		id, ok := second.Tokens().AuthenticateHeader("Bearer " + app)
		return ok && id.MayRead("payments.prod") && !id.MayRead("fraud.prod")
	}, "the store's token authenticates at the second relay")
	testutil.Eventually(t, 5*time.Second, func() bool {
		f.mu.Lock()
		defer f.mu.Unlock()
		return slices.Contains(f.used, "payments-svc")
	}, "the second relay's use reaches the server through the first")

	f.set(8, access.Record{Name: "edge-2", Hash: access.HashSecret(edge2), Scopes: access.Scopes{Relay: true, Data: []string{"*"}}})
	testutil.Eventually(t, 5*time.Second, func() bool { _, ok := second.Tokens().AuthenticateHeader("Bearer " + app); return !ok },
		"a token revoked at the server is refused at the second relay")

	// syncAs is a downstream relay's sync at the first relay, with secret
	// ("": none).
	syncAs := func(secret string) (int, string) {
		t.Helper()
		req, _ := http.NewRequest(http.MethodPost, hop.URL+"/control/tokens/sync", strings.NewReader(`{"after":0}`))
		if secret != "" {
			req.Header.Set("Authorization", "Bearer "+secret)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(body)
	}
	for _, secret := range []string{"", other, access.NewSecret()} {
		if code, body := syncAs(secret); code != http.StatusUnauthorized || strings.Contains(body, "sha256") {
			t.Errorf("a sync with %q: %d %s, want 401", secret, code, body)
		}
	}

	// A token of the copy without the relay scope: 403.
	f.set(9,
		access.Record{Name: "edge-2", Hash: access.HashSecret(edge2), Scopes: access.Scopes{Relay: true, Data: []string{"*"}}},
		access.Record{Name: "other-svc", Hash: access.HashSecret(other), Scopes: access.Scopes{Data: []string{"*"}}})
	testutil.Eventually(t, 5*time.Second, func() bool { _, ok := first.Tokens().AuthenticateHeader("Bearer " + other); return ok }, "other-svc back")
	if code, body := syncAs(other); code != http.StatusForbidden || !strings.Contains(body, `token \"other-svc\" has no relay scope`) {
		t.Errorf("a sync without the relay scope: %d %s", code, body)
	}

	// Not synced yet: nobody authenticates, not even a relay.
	dead := httptest.NewServer(http.NotFoundHandler())
	defer dead.Close()
	unsynced, err := NewRemote(RemoteConfig{URLs: []string{dead.URL}, Secret: edge1})
	if err != nil {
		t.Fatal(err)
	}
	defer unsynced.Close()
	rec := httptest.NewRecorder()
	req := httptest.NewRequest(http.MethodPost, "/control/tokens/sync", strings.NewReader(`{"after":0}`))
	req.Header.Set("Authorization", "Bearer "+edge2)
	unsynced.ServeHTTP(rec, req)
	if rec.Code != http.StatusUnauthorized {
		t.Errorf("an unsynced Remote: %d, want 401", rec.Code)
	}
}
