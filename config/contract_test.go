package config_test

// Tests of the client against its contract. The first group reproduced
// bugs (each names the one it shows, now fixed); the second
// guards contract points. All wait on conditions with deadlines, never on
// sleeps.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/holdfast-dev/holdfast/config"
	"github.com/holdfast-dev/holdfast/internal/cachedir"
	"github.com/holdfast-dev/holdfast/internal/sdksuite"
	"github.com/holdfast-dev/holdfast/internal/testutil"
	"github.com/holdfast-dev/holdfast/internal/testutil/nstest"
	"github.com/holdfast-dev/holdfast/transport"
)

// ---------------------------------------------------------------------------
// Bugs: these fail now.
// ---------------------------------------------------------------------------

// TestFailOpenDefaultsToFirstGoodDataFiresOnChange: a fail-open
// namespace whose first snapshot was rejected opens on its Defaults; when a
// later revision passes, what Get returns changes (8080 -> 9090), so OnChange
// must fire. swap() suppresses callbacks whenever there was no previous
// applied data (prev == nil), even though Defaults were being served.
func TestFailOpenDefaultsToFirstGoodDataFiresOnChange(t *testing.T) {
	portSchema := []byte(`{"type":"object","properties":{"port":{"type":"integer"}}}`)
	srv := sdksuite.StartReference(t)
	sdksuite.Publish(t, srv, "svc", map[string]any{"port": "not-a-number"})
	c := sdksuite.NewClient(t, sdksuite.Endpoint(srv.URL()))
	ns := sdksuite.Open(t, c, "svc", config.Schema(portSchema), config.Defaults(map[string]any{"port": 8080}))
	if got := ns.Int("port", 0); got != 8080 {
		t.Fatalf("port = %d; want the default 8080", got)
	}
	changes := make(chan config.Change, 16)
	ns.OnChange("port", func(ch config.Change) { changes <- ch })

	fixed := sdksuite.Publish(t, srv, "svc", map[string]any{"port": 9090})
	nstest.WaitRevision(t, ns, fixed, waitLimit)
	if got := ns.Int("port", 0); got != 9090 {
		t.Fatalf("port = %d after the fix", got)
	}
	// A sentinel change: callbacks run in order, so once its callback has
	// run, any callback for the Defaults -> 9090 switch has run too.
	sentinel := sdksuite.Publish(t, srv, "svc", map[string]any{"port": 9091})
	var got []string
	deadline := time.After(waitLimit)
	for done := false; !done; {
		select {
		case ch := <-changes:
			got = append(got, ch.Old.String()+"->"+ch.New.String())
			done = ch.Revision == sentinel
		case <-deadline:
			t.Fatalf("sentinel callback never ran; got %v", got)
		}
	}
	if len(got) != 2 || got[0] != "8080->9090" {
		t.Errorf("OnChange saw %v; want [8080->9090 9090->9091]: the switch from Defaults to data is a change of what Get returns", got)
	}
}

// TestCloseFlushesLatestConfirmation: Close must leave the newest
// confirmation time in the last-good file. persist() throttles
// confirmation-only writes (to a minute without MaxStaleness, MaxStaleness/4
// otherwise, at least 1s), and Close only flushes what was submitted, so a
// clean restart sees the data as older than it was: up to a minute more
// stale, and a fail-closed namespace with a short MaxStaleness refuses to
// open after a clean restart.
func TestCloseFlushesLatestConfirmation(t *testing.T) {
	srv := sdksuite.StartReference(t)
	sdksuite.Publish(t, srv, "pc", map[string]any{"v": 1})
	dir := t.TempDir()
	a := sdksuite.NewClient(t, sdksuite.Endpoint(srv.URL()), config.WithCacheDir(dir))
	ns := sdksuite.Open(t, a, "pc")
	first := ns.Status().LastConfirmed
	// Progress events (every testHeartbeat) keep confirming.
	testutil.Eventually(t, waitLimit, func() bool {
		return ns.Status().LastConfirmed.Sub(first) > 300*time.Millisecond
	}, "later confirmations")
	last := ns.Status().LastConfirmed
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}

	d, err := cachedir.OpenDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	rec, err := d.Load("pc")
	if err != nil {
		t.Fatal(err)
	}
	if lag := last.Round(0).Sub(rec.ConfirmedAt); lag > 20*time.Millisecond {
		t.Errorf("file ConfirmedAt is %v older than the last confirmation before Close (first confirmation %v); Close did not flush it",
			lag, first.Round(0).Sub(rec.ConfirmedAt))
	}
}

// TestGapOnFirstEventBacksOff: a watch whose first event is refused
// (here a change that does not chain) is not a healthy stream. run() marks
// the stream delivered - resetting the backoff and skipping the wait - before
// handle has accepted anything, so a server that answers every watch with a
// gap is hammered with snapshot requests in a hot loop (contract 7: reconnects
// back off).
func TestGapOnFirstEventBacksOff(t *testing.T) {
	var mu sync.Mutex
	var snaps []time.Time
	mux := http.NewServeMux()
	mux.HandleFunc(transport.PathSnapshot, func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		snaps = append(snaps, time.Now())
		mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(transport.Snapshot{Namespace: "hm", StoreID: "s1", Revision: 5, Cursor: 5,
			Values: json.RawMessage(`{"v":5}`)})
	})
	mux.HandleFunc(transport.PathWatch, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		w.WriteHeader(http.StatusOK)
		_, _ = fmt.Fprint(w, frame("change", 7, change(7, 6, map[string]any{"v": 7}))) // 6 never comes
		w.(http.Flusher).Flush()
		<-r.Context().Done()
	})
	hs := httptest.NewServer(mux)
	t.Cleanup(hs.Close)

	c := sdksuite.NewClient(t, sdksuite.Endpoint(hs.URL), config.WithReconnectBackoff(100*time.Millisecond, 2*time.Second))
	sdksuite.Open(t, c, "hm")
	const want = 6
	testutil.Eventually(t, waitLimit, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(snaps) >= want
	}, "resnapshots after gaps")
	_ = c.Close()
	mu.Lock()
	defer mu.Unlock()
	// Four waits of a 100ms..2s backoff with 0.5 jitter take at least
	// 50+100+200+400ms.
	if elapsed := snaps[want-1].Sub(snaps[1]); elapsed < 200*time.Millisecond {
		t.Errorf("%d snapshot requests within %v after the first gap: no backoff between resnapshots", want-1, elapsed)
	}
}

// ---------------------------------------------------------------------------
// Guards: contract points that held at review time.
// ---------------------------------------------------------------------------

// TestReview500KeyChangeSetLandsInOneSwap: a 500-key change set is applied
// whole: readers never see part of it, and OnAnyChange gets one ChangeSet of
// 500 changes per publish.
func Test500KeyChangeSetLandsInOneSwap(t *testing.T) {
	const keys, rounds = 500, 20
	bundle := func(v int) map[string]any {
		m := make(map[string]any, keys)
		for i := range keys {
			m["k"+strconv.Itoa(i)] = v
		}
		return m
	}
	srv := sdksuite.StartReference(t)
	sdksuite.Publish(t, srv, "big", bundle(0))
	c := sdksuite.NewClient(t, sdksuite.Endpoint(srv.URL()))
	ns := sdksuite.Open(t, c, "big")

	sets := make(chan config.ChangeSet, rounds)
	ns.OnAnyChange(func(cs config.ChangeSet) { sets <- cs })

	var stop atomic.Bool
	var torn atomic.Value
	var wg sync.WaitGroup
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for !stop.Load() {
				s := ns.Snapshot()
				want := s.Int("k0", -1)
				for i := range keys {
					if got := s.Int("k"+strconv.Itoa(i), -1); got != want {
						torn.Store(fmt.Sprintf("revision %d: k%d = %d, k0 = %d", s.Revision(), i, got, want))
						return
					}
				}
				if s.Len() != keys {
					torn.Store(fmt.Sprintf("revision %d has %d keys", s.Revision(), s.Len()))
					return
				}
			}
		}()
	}
	var last int64
	for r := 1; r <= rounds; r++ {
		last = sdksuite.Publish(t, srv, "big", bundle(r))
	}
	nstest.WaitRevision(t, ns, last, waitLimit)
	stop.Store(true)
	wg.Wait()
	if v := torn.Load(); v != nil {
		t.Fatal("torn read:", v)
	}
	deadline := time.After(waitLimit)
	for r := 1; r <= rounds; r++ {
		select {
		case cs := <-sets:
			if len(cs.Changes) != keys || cs.Coalesced {
				t.Fatalf("change set %d of revision %d has %d changes (coalesced %v); want %d", r, cs.Revision, len(cs.Changes), cs.Coalesced, keys)
			}
			for _, ch := range cs.Changes {
				if ch.Revision != cs.Revision || ch.New.String() != strconv.Itoa(r) {
					t.Fatalf("change set %d: %s at %d = %s", r, ch.Key, ch.Revision, ch.New)
				}
			}
		case <-deadline:
			t.Fatalf("only %d change sets delivered", r-1)
		}
	}
}

// TestSlowCallbackDelaysOnlyLaterCallbacks: while a callback blocks,
// its namespace keeps applying (Revision advances, Get serves the new
// value), other namespaces' callbacks run, and the blocked namespace's later
// callbacks follow in order once it returns.
func TestSlowCallbackDelaysOnlyLaterCallbacks(t *testing.T) {
	srv := sdksuite.StartReference(t)
	sdksuite.Publish(t, srv, "slow", map[string]any{"k": 0})
	sdksuite.Publish(t, srv, "other", map[string]any{"k": 0})
	c := sdksuite.NewClient(t, sdksuite.Endpoint(srv.URL()))
	slow, other := sdksuite.Open(t, c, "slow"), sdksuite.Open(t, c, "other")

	entered := make(chan struct{}, 8)
	release := make(chan struct{})
	var mu sync.Mutex
	var seen []string
	slow.OnChange("k", func(ch config.Change) {
		mu.Lock()
		seen = append(seen, ch.New.String())
		mu.Unlock()
		entered <- struct{}{}
		<-release
	})
	otherSeen := make(chan config.Change, 8)
	other.OnChange("k", func(ch config.Change) { otherSeen <- ch })

	sdksuite.Publish(t, srv, "slow", map[string]any{"k": 1})
	select {
	case <-entered:
	case <-time.After(waitLimit):
		t.Fatal("first callback never ran")
	}
	// The callback blocks. Applying goes on.
	rev2 := sdksuite.Publish(t, srv, "slow", map[string]any{"k": 2})
	nstest.WaitRevision(t, slow, rev2, waitLimit)
	if got := slow.Int("k", -1); got != 2 {
		t.Errorf("slow namespace serves k = %d while its callback blocks; want 2", got)
	}
	// Another namespace's callbacks are not held up.
	orev := sdksuite.Publish(t, srv, "other", map[string]any{"k": 7})
	select {
	case ch := <-otherSeen:
		if ch.Revision != orev {
			t.Errorf("other namespace's callback at %d; want %d", ch.Revision, orev)
		}
	case <-time.After(waitLimit):
		t.Fatal("a blocked callback of one namespace held up another namespace's callbacks")
	}
	close(release)
	select {
	case <-entered:
	case <-time.After(waitLimit):
		t.Fatal("the later callback never ran")
	}
	mu.Lock()
	defer mu.Unlock()
	if len(seen) != 2 || seen[0] != "1" || seen[1] != "2" {
		t.Errorf("slow callbacks saw %v; want [1 2]", seen)
	}
}

// TestCloseWaitsForRunningCallback: Close returns only after a
// callback that is running has returned.
func TestCloseWaitsForRunningCallback(t *testing.T) {
	srv := sdksuite.StartReference(t)
	sdksuite.Publish(t, srv, "cw", map[string]any{"k": 0})
	c := sdksuite.NewClient(t, sdksuite.Endpoint(srv.URL()))
	ns := sdksuite.Open(t, c, "cw")
	entered, release := make(chan struct{}), make(chan struct{})
	var finished atomic.Bool
	ns.OnChange("k", func(config.Change) {
		close(entered)
		<-release
		finished.Store(true)
	})
	sdksuite.Publish(t, srv, "cw", map[string]any{"k": 1})
	<-entered

	closed := make(chan struct{})
	go func() { _ = c.Close(); close(closed) }()
	// Close has cancelled the namespace: its stream is gone.
	testutil.Eventually(t, waitLimit, func() bool { return srv.OpenStreams() == 0 }, "the stream to close")
	select {
	case <-closed:
		t.Fatal("Close returned while a callback was running")
	default:
	}
	close(release)
	select {
	case <-closed:
	case <-time.After(waitLimit):
		t.Fatal("Close did not return after the callback did")
	}
	if !finished.Load() {
		t.Error("Close returned before the callback finished")
	}
	if st := ns.Status().State; st != config.StateClosed {
		t.Errorf("state after Close = %v", st)
	}
}

// TestOnStatusChangeInOrder: transitions arrive in order, each a real
// change of state, with non-decreasing Since.
func TestOnStatusChangeInOrder(t *testing.T) {
	srv := sdksuite.StartReference(t)
	sdksuite.Publish(t, srv, "st", map[string]any{"k": 0})
	c := sdksuite.NewClient(t, sdksuite.Endpoint(srv.URL()))
	ns := sdksuite.Open(t, c, "st")
	statuses := make(chan config.Status, 64)
	ns.OnStatusChange(func(st config.Status) { statuses <- st })

	var got []config.Status
	waitFor := func(want config.State) {
		t.Helper()
		deadline := time.After(waitLimit)
		for {
			select {
			case st := <-statuses:
				got = append(got, st)
				if st.State == want {
					return
				}
			case <-deadline:
				t.Fatalf("state %v never reached; got %v", want, got)
			}
		}
	}
	for range 2 {
		if err := srv.Stop(); err != nil {
			t.Fatal(err)
		}
		waitFor(config.StateStale)
		if err := srv.Restart(); err != nil {
			t.Fatal(err)
		}
		waitFor(config.StateFresh)
	}
	for i := 1; i < len(got); i++ {
		if got[i].State == got[i-1].State {
			t.Errorf("transition %d repeats %v", i, got[i].State)
		}
		if got[i].Since.Before(got[i-1].Since) {
			t.Errorf("transition %d (%v) has Since before the previous one", i, got[i].State)
		}
	}
}

// TestCloseConcurrentlyAndDuringOpen: Close from many goroutines
// returns everywhere; a Namespace call waiting for data returns ErrClosed;
// WaitForRevision returns ErrClosed; Namespace after Close is refused.
func TestCloseConcurrentlyAndDuringOpen(t *testing.T) {
	srv := sdksuite.StartReference(t)
	sdksuite.Publish(t, srv, "open", map[string]any{"k": 0})
	c := sdksuite.NewClient(t, sdksuite.Endpoint(srv.URL()))
	ns := sdksuite.Open(t, c, "open")

	pending := make(chan error, 1)
	go func() {
		_, err := c.Namespace(context.Background(), "missing") // 404: retried until Close
		pending <- err
	}()
	testutil.Eventually(t, waitLimit, func() bool { return srv.Stats().Snapshots >= 2 }, "the missing namespace to be asked for")
	waitErr := make(chan error, 1)
	go func() { waitErr <- ns.WaitForRevision(context.Background(), 1<<40) }()

	var wg sync.WaitGroup
	for range 16 {
		wg.Add(1)
		go func() { defer wg.Done(); _ = c.Close() }()
	}
	wg.Wait()
	for what, ch := range map[string]chan error{"pending Namespace": pending, "WaitForRevision": waitErr} {
		select {
		case err := <-ch:
			if !errors.Is(err, config.ErrClosed) {
				t.Errorf("%s = %v; want ErrClosed", what, err)
			}
		case <-time.After(waitLimit):
			t.Fatalf("%s did not return after Close", what)
		}
	}
	if _, err := c.Namespace(context.Background(), "open"); !errors.Is(err, config.ErrClosed) {
		t.Errorf("Namespace after Close = %v", err)
	}
	if ns.Int("k", -1) != 0 {
		t.Error("a closed client's namespace stopped serving")
	}
}

// TestAbandonedNamespaceCanBeReopened: an open given up by its ctx
// stops the namespace; a later open starts afresh and works.
func TestAbandonedNamespaceCanBeReopened(t *testing.T) {
	srv := sdksuite.StartReference(t)
	c := sdksuite.NewClient(t, sdksuite.Endpoint(srv.URL()))
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	_, err := c.Namespace(ctx, "late")
	var oe *config.OpenError
	if !errors.As(err, &oe) || !errors.Is(err, context.DeadlineExceeded) || !errors.Is(err, transport.ErrNotFound) {
		t.Fatalf("first open = %v", err)
	}
	rev := sdksuite.Publish(t, srv, "late", map[string]any{"k": 1})
	ns := sdksuite.Open(t, c, "late")
	nstest.WaitRevision(t, ns, rev, waitLimit)
	if ns.Int("k", 0) != 1 {
		t.Errorf("k = %d", ns.Int("k", 0))
	}
}

// TestRejectedChangeThenProgressThenFix: a change that fails the
// client's schema is rejected whole; progress events still confirm (the
// namespace stays Fresh, serving the last good); a reconnect does not
// re-reject; the next good revision applies normally.
func TestRejectedChangeThenProgressThenFix(t *testing.T) {
	portSchema := []byte(`{"type":"object","properties":{"port":{"type":"integer"}}}`)
	srv := sdksuite.StartReference(t)
	good := sdksuite.Publish(t, srv, "rj", map[string]any{"port": 1})
	c := sdksuite.NewClient(t, sdksuite.Endpoint(srv.URL()))
	ns := sdksuite.Open(t, c, "rj", config.Schema(portSchema))

	sdksuite.Publish(t, srv, "rj", map[string]any{"port": "x"})
	testutil.Eventually(t, waitLimit, func() bool { return ns.Rejected() == 1 }, "the rejection")
	after := ns.Status().LastConfirmed
	testutil.Eventually(t, waitLimit, func() bool { return ns.Status().LastConfirmed.After(after) }, "a confirmation after the rejection")
	st := ns.Status()
	if st.State != config.StateFresh || ns.Revision() != good || ns.Int("port", 0) != 1 || st.LastError.Kind != config.ErrorInvalidData {
		t.Errorf("after rejection: %v at %d, port %d, last error %v", st.State, ns.Revision(), ns.Int("port", 0), st.LastError)
	}
	watches := srv.Stats().Watches + srv.Stats().Streams // one namespace's or the client's stream
	srv.DropStreams()
	testutil.Eventually(t, waitLimit, func() bool { return srv.Stats().Watches+srv.Stats().Streams > watches }, "a new watch")
	after = ns.Status().LastConfirmed
	testutil.Eventually(t, waitLimit, func() bool { return ns.Status().LastConfirmed.After(after) }, "a confirmation on the new watch")
	if ns.Rejected() != 1 || ns.Int("port", 0) != 1 {
		t.Errorf("after reconnect: rejected %d, port %d", ns.Rejected(), ns.Int("port", 0))
	}

	fixed := sdksuite.Publish(t, srv, "rj", map[string]any{"port": 2})
	nstest.WaitRevision(t, ns, fixed, waitLimit)
	if ns.Int("port", 0) != 2 {
		t.Errorf("port after the fix = %d", ns.Int("port", 0))
	}
}

// TestRejectedSnapshotOfNewStoreKeepsLastGood: after a store reset,
// a first snapshot of the new store that fails the schema keeps the old
// store's last good serving; the new store's next good revision applies.
func TestRejectedSnapshotOfNewStoreKeepsLastGood(t *testing.T) {
	vSchema := []byte(`{"type":"object","properties":{"v":{"type":"integer"}}}`)
	srv := sdksuite.StartReference(t)
	sdksuite.Publish(t, srv, "ns1", map[string]any{"v": 1})
	sdksuite.Publish(t, srv, "ns1", map[string]any{"v": 2})
	c := sdksuite.NewClient(t, sdksuite.Endpoint(srv.URL()))
	ns := sdksuite.Open(t, c, "ns1", config.Schema(vSchema), config.MaxStaleness(time.Minute), config.FailClosed())
	oldStore := ns.Status().StoreID

	newStore := srv.ResetStore()
	sdksuite.Publish(t, srv, "ns1", map[string]any{"v": "bad"})
	testutil.Eventually(t, waitLimit, func() bool { return ns.Rejected() == 1 }, "the rejection")
	if ns.Int("v", 0) != 2 || ns.Status().StoreID != oldStore {
		t.Errorf("after a rejected new-store snapshot: v %d, store %s", ns.Int("v", 0), ns.Status().StoreID)
	}
	sdksuite.Publish(t, srv, "ns1", map[string]any{"v": 3})
	testutil.Eventually(t, waitLimit, func() bool {
		return ns.Status().StoreID == newStore && ns.Int("v", 0) == 3
	}, "the new store's good revision")
	if st := ns.Status(); st.State != config.StateFresh || st.Origin != config.OriginNetwork {
		t.Errorf("status %v from %v", st.State, st.Origin)
	}
}

// TestStoreResetWithSameRevisionIsNotModified: after a store reset
// the namespace's revision number can recur with other content; the client
// must fetch it (the conditional snapshot names the store id), not take a
// 304.
func TestStoreResetWithSameRevisionIsNotModified(t *testing.T) {
	srv := sdksuite.StartReference(t)
	sdksuite.Publish(t, srv, "sr", map[string]any{"a": 1})
	rev := sdksuite.Publish(t, srv, "sr", map[string]any{"a": 2})
	c := sdksuite.NewClient(t, sdksuite.Endpoint(srv.URL()))
	ns := sdksuite.Open(t, c, "sr")
	nstest.WaitRevision(t, ns, rev, waitLimit)

	newStore := srv.ResetStore()
	sdksuite.Publish(t, srv, "sr", map[string]any{"a": 10})
	if r := sdksuite.Publish(t, srv, "sr", map[string]any{"a": 20}); r != rev {
		t.Fatalf("new store revision %d; the test wants it equal to the old %d", r, rev)
	}
	testutil.Eventually(t, waitLimit, func() bool {
		return ns.Status().StoreID == newStore && ns.Int("a", 0) == 20
	}, "the new store's data")
}

// TestWaitForRevisionAcrossStoreReset: a waiter for a revision not
// yet reached is woken when the new store reaches it, and then sees the new
// store's data.
func TestWaitForRevisionAcrossStoreReset(t *testing.T) {
	srv := sdksuite.StartReference(t)
	sdksuite.Publish(t, srv, "wr", map[string]any{"v": "old"})
	c := sdksuite.NewClient(t, sdksuite.Endpoint(srv.URL()))
	ns := sdksuite.Open(t, c, "wr")
	done := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
		defer cancel()
		done <- ns.WaitForRevision(ctx, 3)
	}()
	newStore := srv.ResetStore()
	for i := 1; i <= 3; i++ {
		sdksuite.Publish(t, srv, "wr", map[string]any{"v": "new" + strconv.Itoa(i)})
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if ns.Status().StoreID != newStore || ns.String("v", "") != "new3" {
		t.Errorf("after WaitForRevision: store %s, v %q", ns.Status().StoreID, ns.String("v", ""))
	}
}

// TestBackstopConfirmsWithNotModified: a healthy watch ends at each
// backstop for a conditional snapshot; an unchanged namespace costs 304s,
// stays Fresh at its revision, and changes keep arriving.
func TestBackstopConfirmsWithNotModified(t *testing.T) {
	srv := sdksuite.StartReference(t)
	rev := sdksuite.Publish(t, srv, "bs", map[string]any{"k": 1})
	c := sdksuite.NewClient(t, sdksuite.Endpoint(srv.URL()), config.WithBackstop(100*time.Millisecond))
	ns := sdksuite.Open(t, c, "bs")
	testutil.Eventually(t, waitLimit, func() bool { return srv.Stats().NotModified >= 3 }, "backstop snapshots")
	if st := ns.Status(); st.State != config.StateFresh || ns.Revision() != rev || ns.Rejected() != 0 || st.LastError.Kind != config.ErrorNone {
		t.Errorf("after backstops: %v at %d, error %v", st.State, ns.Revision(), st.LastError)
	}
	for i := 2; i <= 10; i++ {
		rev = sdksuite.Publish(t, srv, "bs", map[string]any{"k": i})
	}
	nstest.WaitRevision(t, ns, rev, waitLimit)
	if ns.Int("k", 0) != 10 {
		t.Errorf("k = %d", ns.Int("k", 0))
	}
}
