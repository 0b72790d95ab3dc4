package access

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/holdfast-dev/holdfast/internal/testutil"
)

// fakeSync is a server's POST /control/tokens/sync.
type fakeSync struct {
	secret string
	mu     sync.Mutex
	recs   []Record
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

func (f *fakeSync) set(rev int64, recs ...Record) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.rev, f.recs = rev, recs
}

func TestRemoteFollowsTheServersRecords(t *testing.T) {
	relaySecret, clientSecret := NewSecret(), NewSecret()
	f := &fakeSync{secret: relaySecret}
	f.set(5, Record{Name: "svc", Hash: HashSecret(clientSecret), Scopes: Scopes{Data: []string{"a.*"}}})
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
	relaySecret, clientSecret := NewSecret(), NewSecret()
	f := &fakeSync{secret: relaySecret}
	f.set(1, Record{Name: "svc", Hash: HashSecret(clientSecret), Scopes: Scopes{Data: []string{"*"}}})
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
	if _, err := NewRemote(RemoteConfig{Secret: NewSecret()}); err == nil {
		t.Error("no URL accepted")
	}
	if _, err := NewRemote(RemoteConfig{URLs: []string{"http://127.0.0.1:1"}, Secret: "short"}); err == nil {
		t.Error("a short secret accepted")
	}
}
