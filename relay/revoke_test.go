package relay_test

import (
	"context"
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/holdfast-dev/holdfast/access"
	"github.com/holdfast-dev/holdfast/config"
	"github.com/holdfast-dev/holdfast/holdfasttest"
	"github.com/holdfast-dev/holdfast/internal/testutil"
	"github.com/holdfast-dev/holdfast/internal/tokentable"
	"github.com/holdfast-dev/holdfast/relay"
	"github.com/holdfast-dev/holdfast/transport"
)

// tokenStore is an origin's token records, which it checks its clients
// against and serves to relays (POST /control/tokens/sync, as holdfast
// server does: at once when they change, else after a short wait).
type tokenStore struct {
	table *tokentable.Table
	mu    sync.Mutex
	rev   int64
	recs  []access.Record
	moved chan struct{}
}

func newTokenStore(t *testing.T, recs ...access.Record) *tokenStore {
	t.Helper()
	s := &tokenStore{table: tokentable.NewTable(), moved: make(chan struct{})}
	s.set(t, recs...)
	return s
}

// set replaces the records (a revocation leaves one out).
func (s *tokenStore) set(t *testing.T, recs ...access.Record) {
	t.Helper()
	if err := s.table.SetRecords(recs, true); err != nil {
		t.Fatal(err)
	}
	s.mu.Lock()
	s.rev++
	s.recs = recs
	close(s.moved)
	s.moved = make(chan struct{})
	s.mu.Unlock()
}

func (s *tokenStore) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	id, ok := s.table.Authenticate(bearer(r))
	if !ok || !id.IsRelay() {
		http.Error(w, `{"error":"unauthorized"}`, http.StatusUnauthorized)
		return
	}
	var body struct {
		After int64 `json:"after"`
	}
	_ = json.NewDecoder(r.Body).Decode(&body)
	s.mu.Lock()
	rev, recs, moved := s.rev, s.recs, s.moved
	s.mu.Unlock()
	if rev <= body.After {
		select {
		case <-moved:
		case <-time.After(2 * time.Second):
		case <-r.Context().Done():
		}
		s.mu.Lock()
		rev, recs = s.rev, s.recs
		s.mu.Unlock()
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(map[string]any{"revision": rev, "required": true, "records": recs})
}

func bearer(r *http.Request) string {
	h := r.Header.Get("Authorization")
	if len(h) > 7 && h[:7] == "Bearer " {
		return h[7:]
	}
	return ""
}

func dataRecord(name, secret string, relayScope bool, data ...string) access.Record {
	return access.Record{Name: name, Hash: access.HashSecret(secret), Scopes: access.Scopes{Data: data, Relay: relayScope}, Created: time.Now()}
}

// startTokenRelay starts a relay of upstream with its own token secret,
// checking its clients against the store's records as its token sync
// (from syncURL) brings them, and serving that sync to relays behind it.
func startTokenRelay(t *testing.T, upstreamURL, syncURL, secret string) string {
	t.Helper()
	remote, err := tokentable.NewRemote(tokentable.RemoteConfig{URLs: []string{syncURL}, Secret: secret})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(remote.Close)
	select {
	case <-remote.Ready():
	case <-time.After(waitLimit):
		t.Fatal("the relay's token sync got no reply")
	}
	r, err := relay.New(upstream(t, upstreamURL, secret), relay.WithHeartbeat(200*time.Millisecond), relay.WithTokens(remote.Tokens()))
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle("POST /control/tokens/sync", remote)
	mux.Handle("/", r.Handler())
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	hs := &httptest.Server{Listener: l, Config: &http.Server{Handler: mux}}
	hs.Start()
	t.Cleanup(func() {
		hs.CloseClientConnections()
		_ = r.Close()
		hs.Close()
	})
	return hs.URL
}

// TestRevocationCutsStreamsAtEveryTier: a client streaming with a token
// from the origin, from a relay and from a relay behind that one is told
// unauthorized (not Fresh) within 5 s of the token's revocation at the
// origin, and gets no change after it; a token that expires does the
// same; another token's clients go on; and a client whose token comes
// back is served again (it kept retrying).
func TestRevocationCutsStreamsAtEveryTier(t *testing.T) {
	svc, brief, keep := access.NewSecret(), access.NewSecret(), access.NewSecret()
	edge1, edge2 := access.NewSecret(), access.NewSecret()
	briefRec := dataRecord("brief", brief, false, "payments.*")
	base := []access.Record{
		dataRecord("keep", keep, false, "payments.*"),
		dataRecord("edge1", edge1, true, "*"),
		dataRecord("edge2", edge2, true, "*"),
	}
	store := newTokenStore(t, append([]access.Record{dataRecord("svc", svc, false, "payments.*")}, base...)...)
	origin := holdfasttest.NewServer(t, holdfasttest.WithHeartbeat(200*time.Millisecond),
		holdfasttest.WithTokens(access.FromAuthenticator(store.table)))
	if _, err := origin.Publish("payments.prod", map[string]any{"v": 1}); err != nil {
		t.Fatal(err)
	}
	sync := httptest.NewServer(store)
	t.Cleanup(sync.Close)
	hop1 := startTokenRelay(t, origin.URL(), sync.URL, edge1)
	hop2 := startTokenRelay(t, hop1, hop1, edge2)

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	type client struct {
		name string
		ns   *config.Namespace
	}
	open := func(name, url, secret string, opts ...config.Option) client {
		c := newClient(t, url, append([]config.Option{config.WithBearerToken(secret), config.WithUnauthorizedBackoff(time.Second)}, opts...)...)
		ns, err := c.Namespace(ctx, "payments.prod")
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		return client{name, ns}
	}
	// A server that predates the multi-namespace stream: its clients
	// watch one namespace over /sdk/watch.
	plain := holdfasttest.NewServer(t, holdfasttest.WithHeartbeat(200*time.Millisecond),
		holdfasttest.WithTokens(access.FromAuthenticator(store.table)), holdfasttest.WithoutCapability(transport.CapabilityStream))
	if _, err := plain.Publish("payments.prod", map[string]any{"v": 1}); err != nil {
		t.Fatal(err)
	}
	longPoll := config.WithHTTPOptions(transport.WithWatchMode(transport.WatchLongPoll))
	revoked := []client{open("direct", origin.URL(), svc), open("one relay", hop1, svc), open("two relays", hop2, svc),
		open("direct long-poll", origin.URL(), svc, longPoll), open("two relays long-poll", hop2, svc, longPoll),
		open("direct single watch", plain.URL(), svc)}
	kept := []client{open("kept direct", origin.URL(), keep), open("kept two relays", hop2, keep)}
	rev, _ := origin.Publish("payments.prod", map[string]any{"v": 2})
	for _, c := range append(revoked[:5:5], kept...) {
		if err := c.ns.WaitForRevision(ctx, rev); err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
	}

	unauthorized := func(c client) bool {
		st := c.ns.Status()
		return st.State != config.StateFresh && errors.Is(st.LastError.Err, transport.ErrUnauthorized) && !st.LastError.Recovered
	}
	cutWithin := func(cs []client, from time.Time) {
		t.Helper()
		pending := append([]client(nil), cs...)
		for len(pending) > 0 {
			if time.Since(from) > 5*time.Second {
				for _, c := range pending {
					t.Errorf("%s: still %v 5 s later (last error %v)", c.name, c.ns.Status().State, c.ns.Status().LastError)
				}
				return
			}
			var left []client
			for _, c := range pending {
				if unauthorized(c) {
					t.Logf("%s: unauthorized %v after", c.name, time.Since(from).Round(time.Millisecond))
				} else {
					left = append(left, c)
				}
			}
			pending = left
			time.Sleep(20 * time.Millisecond)
		}
	}

	at := time.Now()
	store.set(t, append(base, briefRec)...) // svc revoked; brief, expiring soon, created
	cutWithin(revoked, at)
	after, _ := origin.Publish("payments.prod", map[string]any{"v": 3})
	_, _ = plain.Publish("payments.prod", map[string]any{"v": 3})
	for _, c := range kept {
		if err := c.ns.WaitForRevision(ctx, after); err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
	}
	for _, c := range revoked {
		if got := c.ns.Status().Revision; got >= after {
			t.Errorf("%s: got revision %d, published after the revocation", c.name, got)
		}
		if !unauthorized(c) {
			t.Errorf("%s: %v, last error %v: want unauthorized", c.name, c.ns.Status().State, c.ns.Status().LastError)
		}
	}

	// An expiring token: the record changes to expire in a moment.
	expiring := []client{open("expiring direct", origin.URL(), brief), open("expiring two relays", hop2, brief)}
	briefRec.Expires = time.Now().Add(1500 * time.Millisecond)
	store.set(t, append(base, briefRec)...)
	for _, c := range expiring {
		if unauthorized(c) {
			t.Fatalf("%s: unauthorized before its expiry", c.name)
		}
	}
	time.Sleep(time.Until(briefRec.Expires))
	cutWithin(expiring, briefRec.Expires)

	// The client kept retrying (slowly): the token back, it is Fresh
	// again and current.
	store.set(t, append(base, dataRecord("svc", svc, false, "payments.*"))...)
	back, _ := origin.Publish("payments.prod", map[string]any{"v": 4})
	for _, c := range revoked[:5] {
		if err := c.ns.WaitForRevision(ctx, back); err != nil {
			t.Fatalf("%s after the token came back: %v", c.name, err)
		}
		testutil.Eventually(t, waitLimit, func() bool { return c.ns.Status().State == config.StateFresh }, c.name+" Fresh again")
	}
}
