package relay_test

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/holdfast-dev/holdfast/holdfasttest"
	"github.com/holdfast-dev/holdfast/internal/testutil"
	"github.com/holdfast-dev/holdfast/relay"
	"github.com/holdfast-dev/holdfast/transport"
)

// Requests through Handler end when the relay closes: one waiting for a
// namespace's first data ends at once, not after its 10 s; and once
// closed, Handler serves nothing (503), not the data it held, unconfirmed
// by nobody and never to change, nor a watch that never ends.
func TestRelayHandlerRequestsEndWithTheRelay(t *testing.T) {
	up := newSlowUpstream()
	up.snapshotGate = make(chan struct{}) // never opened: "waiting" has no data
	r, err := relay.New(up, relay.WithHeartbeat(50*time.Millisecond), relay.WithNamespaces("app"))
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(r.Handler())
	defer srv.Close()
	got := make(chan int, 1)
	go func() {
		resp, err := http.Get(srv.URL + transport.PathSnapshot + "?ns=app")
		if err != nil {
			got <- 0
			return
		}
		resp.Body.Close()
		got <- resp.StatusCode
	}()
	testutil.Eventually(t, waitLimit, func() bool { up.mu.Lock(); defer up.mu.Unlock(); return up.snapshots > 0 }, "the relay's upstream snapshot")
	testutil.Eventually(t, waitLimit, func() bool { return r.Stats().Snapshots == 1 }, "the request in")
	start := time.Now()
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-got:
		if d := time.Since(start); d > 2*time.Second {
			t.Errorf("a waiting request ended %v after Close", d)
		}
	case <-time.After(5 * time.Second):
		t.Error("a waiting request still waits 5s after Close")
	}

	// A relay that had data: closed, it serves none.
	origin := holdfasttest.NewServer(t)
	mustPublish(t, origin, "app", map[string]any{"k": 1})
	hs, err := transport.NewHTTPSource(origin.URL())
	if err != nil {
		t.Fatal(err)
	}
	defer hs.Close()
	r2, err := relay.New(hs, relay.WithHeartbeat(50*time.Millisecond), relay.WithNamespaces("app"))
	if err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, waitLimit, func() bool { return r2.Ready() == nil }, "the relay ready")
	srv2 := httptest.NewServer(r2.Handler())
	defer srv2.Close()
	if err := r2.Close(); err != nil {
		t.Fatal(err)
	}
	if err := r2.Close(); err != nil {
		t.Fatalf("Close again: %v", err)
	}
	if status, _, _ := getSnapshot(t, srv2.URL, "app"); status != http.StatusServiceUnavailable {
		t.Errorf("snapshot after Close: %d, want 503", status)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, srv2.URL+transport.PathWatch+"?ns=app", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("watch after Close: %v", err)
	}
	_, err = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable || err != nil {
		t.Errorf("watch after Close: %d (body read: %v), want 503", resp.StatusCode, err)
	}
	l, _ := net.Listen("tcp", "127.0.0.1:0")
	if err := r2.Serve(context.Background(), l); !errors.Is(err, relay.ErrClosed) {
		t.Errorf("Serve after Close: %v, want ErrClosed", err)
	}
}

// The origin's store is restored to an earlier revision: the namespace
// that changed after it goes back (a rewind, which the relay's Follower
// takes as a reset of every namespace), and the one that did not must be
// served again too, although its syncer, whose data is still good, has
// nothing new to apply.
func TestRelayServesEveryNamespaceAfterTheOriginRestoresItsStore(t *testing.T) {
	if testing.Short() {
		t.Skip("waits for the syncer's history-rewrite grace (10s)")
	}
	origin := holdfasttest.NewServer(t, holdfasttest.WithHeartbeat(200*time.Millisecond))
	mustPublish(t, origin, "a", map[string]any{"k": 1})
	rb := mustPublish(t, origin, "b", map[string]any{"k": 1})
	ra := mustPublish(t, origin, "a", map[string]any{"k": 2})
	r, url := startRelay(t, origin.URL(), relay.WithNamespaces("a", "b"))
	revision := func(ns string) int64 {
		for _, st := range r.Namespaces() {
			if st.Namespace == ns && st.Ready {
				return st.Revision
			}
		}
		return -1
	}
	testutil.Eventually(t, waitLimit, func() bool { return revision("a") == ra && revision("b") == rb }, "both followed")
	if err := origin.RestoreTo(rb); err != nil {
		t.Fatal(err)
	}
	// a's rewind waits out the grace.
	if !testutil.Wait(20*time.Second, func() bool { return revision("a") == 1 }) {
		t.Fatalf("a at %d, want 1 after the restore", revision("a"))
	}
	testutil.Eventually(t, waitLimit, func() bool {
		status, _, snap := getSnapshot(t, url, "b")
		return status == http.StatusOK && snap.Revision == rb
	}, "b served again")
}

// A namespace the upstream does not have is refused as the origin refuses
// it (404; on a stream, ended not_found) and at once: not after the
// relay's 10 s wait for first data, which held the whole stream, every
// other namespace of it included, at every open.
func TestRelayRefusesANamespaceItsUpstreamDoesNotHave(t *testing.T) {
	origin := holdfasttest.NewServer(t)
	mustPublish(t, origin, "app", map[string]any{"k": 1})
	_, url := startRelay(t, origin.URL())
	start := time.Now()
	if status, _, _ := getSnapshot(t, url, "nope"); status != http.StatusNotFound {
		t.Errorf("snapshot of a namespace the origin does not have: %d, want 404", status)
	}
	if d := time.Since(start); d > 3*time.Second {
		t.Errorf("the 404 took %v", d)
	}
	for i := 0; i < 2; i++ { // the first open, and one once the relay knows
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url+transport.PathStream+"?ns=app:0&ns=nope:0", nil)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			cancel()
			t.Fatalf("stream %d: %v (the relay held it)", i, err)
		}
		buf := make([]byte, 4096)
		n, _ := io.ReadAtLeast(resp.Body, buf, 1)
		resp.Body.Close()
		cancel()
		if resp.StatusCode != http.StatusOK || !strings.Contains(string(buf[:n]), `"error":"not_found"`) {
			t.Errorf("stream %d: %d %q, want nope ended not_found", i, resp.StatusCode, buf[:n])
		}
	}
	// Published at last: served.
	rev := mustPublish(t, origin, "nope", map[string]any{"k": 1})
	testutil.Eventually(t, waitLimit, func() bool {
		status, _, snap := getSnapshot(t, url, "nope")
		return status == http.StatusOK && snap.Revision == rev
	}, "nope served once the origin has it")
}
