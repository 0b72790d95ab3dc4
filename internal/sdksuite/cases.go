package sdksuite

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/holdfast-dev/holdfast/config"
	"github.com/holdfast-dev/holdfast/internal/testutil"
	"github.com/holdfast-dev/holdfast/internal/testutil/nstest"
	"github.com/holdfast-dev/holdfast/transport"
)

// cases are the suite's end-to-end tests, each against a server of its own.
var cases = []struct {
	name string
	run  func(*testing.T, StartFunc)
}{
	{"OpenGetTypedGettersAndDefaults", testOpenGetTypedGettersAndDefaults},
	{"ServerDownAtOpenReturnsContextError", testServerDownAtOpenReturnsContextError},
	{"UnknownNamespaceReportsNotFound", testUnknownNamespaceReportsNotFound},
	{"OnChangeAndOnAnyChange", testOnChangeAndOnAnyChange},
	{"NoTornReads", testNoTornReads},
	{"CallbacksOrderedAfterSwap", testCallbacksOrderedAfterSwap},
	{"DropStreamsResumesFromCursor", testDropStreamsResumesFromCursor},
	{"CompactionDuringOutageResnapshots", testCompactionDuringOutageResnapshots},
	{"BlackholeDetectedAndRecovers", testBlackholeDetectedAndRecovers},
	{"StoreResetResnapshots", testStoreResetResnapshots},
	{"RetryAfterAndFailures", testRetryAfterAndFailures},
	{"UnauthorizedSurfaces", testUnauthorizedSurfaces},
	{"LongPollMode", testLongPollMode},
	{"CloseIsIdempotentAndStopsEverything", testCloseIsIdempotentAndStopsEverything},
}

func testOpenGetTypedGettersAndDefaults(t *testing.T, start StartFunc) {
	srv := start(t, Options{})
	Publish(t, srv, "payments.prod", map[string]any{
		"retry-timeout-ms": 50, "name": "checkout", "ratio": 0.25, "enabled": true,
		"poll": "250ms", "hosts": []string{"a", "b"},
	})
	c := NewClient(t, srv.Target())
	ns := Open(t, c, "payments.prod")

	if v, ok := ns.Get("retry-timeout-ms"); !ok || v.Kind() != config.KindNumber || v.String() != "50" {
		t.Errorf("Get = %v, %v", v, ok)
	}
	if got := ns.Int("retry-timeout-ms", 200); got != 50 {
		t.Errorf("Int = %d", got)
	}
	if got := ns.String("name", ""); got != "checkout" {
		t.Errorf("String = %q", got)
	}
	if got := ns.Float("ratio", 0); got != 0.25 {
		t.Errorf("Float = %v", got)
	}
	if got := ns.Bool("enabled", false); !got {
		t.Errorf("Bool = %v", got)
	}
	if got := ns.Duration("poll", 0); got != 250*time.Millisecond {
		t.Errorf("Duration = %v", got)
	}
	var hosts []string
	if v, _ := ns.Get("hosts"); v.Decode(&hosts) != nil || len(hosts) != 2 {
		t.Errorf("Decode = %v", hosts)
	}
	// Absent keys and type mismatches return the default; mismatches count.
	if got := ns.Int("absent", 7); got != 7 {
		t.Errorf("Int(absent) = %d", got)
	}
	before := ns.TypeMismatches()
	if got := ns.Int("name", 9); got != 9 {
		t.Errorf("Int(string) = %d", got)
	}
	if got := ns.Bool("ratio", true); !got {
		t.Errorf("Bool(number) = %v", got)
	}
	if d := ns.TypeMismatches() - before; d != 2 {
		t.Errorf("type mismatches counted %d; want 2", d)
	}
	snap := ns.Snapshot()
	if snap.Len() != 6 || snap.Revision() != ns.Revision() || len(snap.Keys()) != 6 {
		t.Errorf("Snapshot: len %d rev %d keys %v", snap.Len(), snap.Revision(), snap.Keys())
	}
	if st := ns.Status(); st.State != config.StateFresh || st.Origin != config.OriginNetwork || st.Revision != ns.Revision() {
		t.Errorf("Status = %+v", st)
	}
	// Opening again returns the same handle.
	if again := Open(t, c, "payments.prod"); again != ns {
		t.Error("second open returned another Namespace")
	}
}

func testServerDownAtOpenReturnsContextError(t *testing.T, start StartFunc) {
	srv := start(t, Options{})
	target := srv.Target()
	if err := srv.Stop(); err != nil {
		t.Fatal(err)
	}
	c := NewClient(t, target)
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	_, err := c.Namespace(ctx, "payments.prod")
	var oe *config.OpenError
	if !errors.Is(err, context.DeadlineExceeded) || !errors.As(err, &oe) || oe.Last == nil {
		t.Fatalf("Namespace = %v; want an OpenError wrapping DeadlineExceeded and the last error", err)
	}
}

func testUnknownNamespaceReportsNotFound(t *testing.T, start StartFunc) {
	srv := start(t, Options{})
	c := NewClient(t, srv.Target())
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	_, err := c.Namespace(ctx, "nope")
	if !errors.Is(err, transport.ErrNotFound) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Namespace = %v; want NotFound and DeadlineExceeded", err)
	}
}

func testOnChangeAndOnAnyChange(t *testing.T, start StartFunc) {
	srv := start(t, Options{})
	Publish(t, srv, "app", map[string]any{"a": 1, "b": 2})
	c := NewClient(t, srv.Target())
	ns := Open(t, c, "app")

	changes := make(chan config.Change, 10)
	sets := make(chan config.ChangeSet, 10)
	stop := ns.OnChange("a", func(ch config.Change) { changes <- ch })
	ns.OnAnyChange(func(cs config.ChangeSet) { sets <- cs })

	rev := Publish(t, srv, "app", map[string]any{"a": 10, "c": "x"}, "b")
	select {
	case ch := <-changes:
		if ch.Key != "a" || ch.Old.String() != "1" || ch.New.String() != "10" || ch.Revision != rev {
			t.Errorf("Change = %+v", ch)
		}
	case <-time.After(WaitLimit):
		t.Fatal("no OnChange")
	}
	select {
	case cs := <-sets:
		if cs.Revision != rev || len(cs.Changes) != 3 {
			t.Errorf("ChangeSet = %+v", cs)
		}
		if cs.Changes[1].Key != "b" || cs.Changes[1].New.Kind() != config.KindInvalid {
			t.Errorf("delete of b = %+v", cs.Changes[1])
		}
	case <-time.After(WaitLimit):
		t.Fatal("no OnAnyChange")
	}
	if _, ok := ns.Get("b"); ok {
		t.Error("deleted key b still served")
	}
	// A publish of only deletes is a revision of its own.
	rev = Publish(t, srv, "app", nil, "c")
	nstest.WaitRevision(t, ns, rev, WaitLimit)
	if _, ok := ns.Get("c"); ok {
		t.Error("deleted key c still served")
	}
	<-sets
	stop()
	rev = Publish(t, srv, "app", map[string]any{"a": 11})
	nstest.WaitRevision(t, ns, rev, WaitLimit)
	<-sets // the dispatcher has passed this revision
	select {
	case ch := <-changes:
		t.Errorf("stopped OnChange got %+v", ch)
	default:
	}
}

// testNoTornReads republishes a 30-key bundle, every key holding the
// revision's number, while readers check that each Snapshot holds 30 values
// of one revision.
func testNoTornReads(t *testing.T, start StartFunc) {
	srv := start(t, Options{})
	const keys, rounds, readers = 30, 1000, 8
	bundle := func(i int) map[string]any {
		m := make(map[string]any, keys)
		for k := range keys {
			m["k"+strconv.Itoa(k)] = i
		}
		return m
	}
	Publish(t, srv, "bundle", bundle(0))
	c := NewClient(t, srv.Target(), config.WithLogger(Logger(t)))
	ns := Open(t, c, "bundle")

	stop := make(chan struct{})
	var wg sync.WaitGroup
	var checked atomic.Int64
	errs := make(chan error, readers)
	for range readers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				snap := ns.Snapshot()
				if snap.Len() != keys {
					errs <- fmt.Errorf("snapshot of %d keys", snap.Len())
					return
				}
				first := snap.Int("k0", -1)
				for k := 1; k < keys; k++ {
					if v := snap.Int("k"+strconv.Itoa(k), -2); v != first {
						errs <- fmt.Errorf("torn read: k0=%d k%d=%d", first, k, v)
						return
					}
				}
				// A pause between reads, so that eight readers do not
				// starve the publishes of a server that writes to disk.
				if checked.Add(1)%16 == 0 {
					time.Sleep(time.Millisecond)
				}
			}
		}()
	}
	var last int64
	for i := 1; i <= rounds; i++ {
		last = Publish(t, srv, "bundle", bundle(i))
	}
	nstest.WaitRevision(t, ns, last, WaitLimit)
	close(stop)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if ns.Int("k29", 0) != rounds || checked.Load() == 0 {
		t.Errorf("final k29 = %d after %d checks", ns.Int("k29", 0), checked.Load())
	}
}

// testCallbacksOrderedAfterSwap publishes 1,000 changes quickly: callbacks
// arrive strictly in revision order, each after its revision is served; a
// panicking callback and a slow one stop nothing.
func testCallbacksOrderedAfterSwap(t *testing.T, start StartFunc) {
	srv := start(t, Options{})
	Publish(t, srv, "ordered", map[string]any{"n": 0})
	c := NewClient(t, srv.Target())
	ns := Open(t, c, "ordered")

	const n = 1000
	var mu sync.Mutex
	var revs []int64
	var violations []string
	ns.OnChange("n", func(config.Change) { panic("a bad callback") })
	ns.OnChange("n", func(ch config.Change) {
		if ch.Revision%100 == 0 {
			time.Sleep(5 * time.Millisecond) // a slow callback, now and then
		}
	})
	ns.OnChange("n", func(ch config.Change) {
		mu.Lock()
		defer mu.Unlock()
		if served := ns.Revision(); served < ch.Revision {
			violations = append(violations, fmt.Sprintf("callback for %d ran while %d was served", ch.Revision, served))
		}
		if len(revs) > 0 && ch.Revision <= revs[len(revs)-1] {
			violations = append(violations, fmt.Sprintf("revision %d after %d", ch.Revision, revs[len(revs)-1]))
		}
		revs = append(revs, ch.Revision)
	})
	var last int64
	for i := 1; i <= n; i++ {
		last = Publish(t, srv, "ordered", map[string]any{"n": i})
	}
	// The last revision's callback may run before its publish returns here.
	if !testutil.Wait(WaitLimit, func() bool { mu.Lock(); defer mu.Unlock(); return len(revs) > 0 && revs[len(revs)-1] >= last }) {
		t.Fatal("the last revision's callback never ran")
	}
	mu.Lock()
	defer mu.Unlock()
	for _, v := range violations {
		t.Error(v)
	}
	if len(revs) != n {
		t.Errorf("%d callbacks for %d changes (no overflow expected at this queue size)", len(revs), n)
	}
	if p := ns.CallbackPanics(); p != int64(len(revs)) {
		t.Errorf("CallbackPanics = %d; want %d", p, len(revs))
	}
}

func testDropStreamsResumesFromCursor(t *testing.T, start StartFunc) {
	srv := start(t, Options{})
	Publish(t, srv, "resume", map[string]any{"v": 0})
	c := NewClient(t, srv.Target())
	ns := Open(t, c, "resume")

	var mu sync.Mutex
	var seen []int64
	ns.OnAnyChange(func(cs config.ChangeSet) {
		mu.Lock()
		seen = append(seen, cs.Revision)
		mu.Unlock()
	})
	snapshots := srv.Stats().Snapshots
	var want []int64
	for i := 1; i <= 30; i++ {
		want = append(want, Publish(t, srv, "resume", map[string]any{"v": i}))
		if i%10 == 0 {
			srv.DropStreams()
		}
	}
	nstest.WaitRevision(t, ns, want[len(want)-1], WaitLimit)
	testutil.Eventually(t, WaitLimit, func() bool { mu.Lock(); defer mu.Unlock(); return len(seen) == len(want) }, "every callback")
	if got := srv.Stats().Snapshots; got != snapshots {
		t.Errorf("resume made %d new snapshot requests; want 0", got-snapshots)
	}
	mu.Lock()
	defer mu.Unlock()
	for i := range want {
		if seen[i] != want[i] {
			t.Fatalf("revisions seen %v; want %v", seen, want)
		}
	}
}

func testCompactionDuringOutageResnapshots(t *testing.T, start StartFunc) {
	srv := start(t, Options{})
	Publish(t, srv, "compact", map[string]any{"v": 0, "gone": true})
	c := NewClient(t, srv.Target())
	ns := Open(t, c, "compact")
	if err := srv.Stop(); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, WaitLimit, func() bool { return ns.Status().State == config.StateStale }, "stale while the server is down")
	var last int64
	for i := 1; i <= 20; i++ {
		last = Publish(t, srv, "compact", map[string]any{"v": i}, "gone")
	}
	if _, err := srv.Compact(0); err != nil {
		t.Fatal(err)
	}
	snapshots := srv.Stats().Snapshots
	if err := srv.Restart(); err != nil {
		t.Fatal(err)
	}
	nstest.WaitRevision(t, ns, last, WaitLimit)
	if ns.Int("v", -1) != 20 {
		t.Errorf("v = %d after converging", ns.Int("v", -1))
	}
	if _, ok := ns.Get("gone"); ok {
		t.Error("a key deleted during the outage is still served")
	}
	if srv.Stats().Snapshots == snapshots {
		t.Error("converged past compaction without a new snapshot")
	}
	if srv.Target().Source != nil && srv.Stats().Compacted == 0 {
		t.Error("no watch of the source ended with ErrCompacted")
	}
	testutil.Eventually(t, WaitLimit, func() bool { return ns.Status().State == config.StateFresh }, "fresh again")
	// And it follows on from there.
	last = Publish(t, srv, "compact", map[string]any{"v": 21})
	nstest.WaitRevision(t, ns, last, WaitLimit)
}

func testBlackholeDetectedAndRecovers(t *testing.T, start StartFunc) {
	srv := start(t, Options{})
	Publish(t, srv, "bh", map[string]any{"v": 0})
	c := NewClient(t, srv.Target(), config.WithStreamIdleTimeout(testIdle))
	ns := Open(t, c, "bh")

	statuses := make(chan config.Status, 64)
	ns.OnStatusChange(func(st config.Status) { statuses <- st })
	srv.SetBlackhole(true)
	holed := time.Now()
	for st := range statuses {
		if st.State == config.StateStale {
			break
		}
	}
	// Detection within three heartbeats of the last byte, with slack for a
	// loaded machine.
	if took := time.Since(holed); took > testIdle+time.Second {
		t.Errorf("black hole detected after %v; idle timeout %v", took, testIdle)
	}
	rev := Publish(t, srv, "bh", map[string]any{"v": 1})
	srv.SetBlackhole(false)
	nstest.WaitRevision(t, ns, rev, WaitLimit)
	testutil.Eventually(t, WaitLimit, func() bool { return ns.Status().State == config.StateFresh }, "fresh after heal")
}

func testStoreResetResnapshots(t *testing.T, start StartFunc) {
	srv := start(t, Options{})
	for i := range 5 {
		Publish(t, srv, "reset", map[string]any{"v": i, "old": true})
	}
	c := NewClient(t, srv.Target())
	ns := Open(t, c, "reset")
	oldStore := ns.Status().StoreID

	srv.ResetStore()
	rev := Publish(t, srv, "reset", map[string]any{"v": 100})
	if rev >= ns.Revision() {
		t.Fatalf("test setup: the new store's revision %d is not below the old %d", rev, ns.Revision())
	}
	testutil.Eventually(t, WaitLimit, func() bool { return ns.Int("v", -1) == 100 }, "the new store's data")
	st := ns.Status()
	if st.StoreID == oldStore || st.Revision != rev {
		t.Errorf("status after reset = %+v", st)
	}
	if _, ok := ns.Get("old"); ok {
		t.Error("a key of the old store is still served")
	}
	// Later changes of the new store apply normally.
	rev = Publish(t, srv, "reset", map[string]any{"v": 101})
	nstest.WaitRevision(t, ns, rev, WaitLimit)
}

func testRetryAfterAndFailures(t *testing.T, start StartFunc) {
	srv := start(t, Options{})
	Publish(t, srv, "retry", map[string]any{"v": 1})
	srv.FailNext(3, 503, 10*time.Millisecond)
	c := NewClient(t, srv.Target())
	ns := Open(t, c, "retry")
	if ns.Int("v", 0) != 1 {
		t.Fatalf("v = %d", ns.Int("v", 0))
	}
}

func testUnauthorizedSurfaces(t *testing.T, start StartFunc) {
	srv := start(t, Options{BearerToken: "suite-secret-0123456789"})
	Publish(t, srv, "auth", map[string]any{"v": 1})

	bad := NewClient(t, srv.Target(), config.WithBearerToken("wrong"), config.WithUnauthorizedBackoff(time.Hour))
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	if _, err := bad.Namespace(ctx, "auth"); !errors.Is(err, transport.ErrUnauthorized) {
		t.Fatalf("Namespace with a wrong token = %v; want ErrUnauthorized", err)
	}
	// The long unauthorized backoff means one attempt, not a hammering.
	if got := srv.Stats().Snapshots; got > 1 {
		t.Errorf("%d snapshot requests with a refused token; want 1", got)
	}

	good := NewClient(t, srv.Target(), config.WithBearerToken("suite-secret-0123456789"))
	if ns := Open(t, good, "auth"); ns.Int("v", 0) != 1 {
		t.Error("authorized client did not read")
	}
}

func testLongPollMode(t *testing.T, start StartFunc) {
	srv := start(t, Options{})
	if srv.Target().Source != nil {
		t.Skip("long-poll is a mode of the HTTP source")
	}
	Publish(t, srv, "lp", map[string]any{"v": 0})
	c := NewClient(t, srv.Target(), config.WithWatchMode(transport.WatchLongPoll))
	ns := Open(t, c, "lp")
	var last int64
	for i := 1; i <= 10; i++ {
		last = Publish(t, srv, "lp", map[string]any{"v": i})
	}
	nstest.WaitRevision(t, ns, last, WaitLimit)
	if st := srv.Stats(); st.Watches != 0 || st.Streams != 0 || st.Events+st.StreamPolls == 0 {
		t.Errorf("long-poll mode used SSE: %+v", st)
	}
	srv.DropStreams()
	last = Publish(t, srv, "lp", map[string]any{"v": 11})
	nstest.WaitRevision(t, ns, last, WaitLimit)
}

func testCloseIsIdempotentAndStopsEverything(t *testing.T, start StartFunc) {
	srv := start(t, Options{})
	Publish(t, srv, "close", map[string]any{"v": 1})
	c := NewClient(t, srv.Target())
	ns := Open(t, c, "close")
	ns.OnChange("v", func(config.Change) {})
	var wg sync.WaitGroup
	for range 3 {
		wg.Add(1)
		go func() { defer wg.Done(); _ = c.Close() }()
	}
	wg.Wait()
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if ns.Int("v", 0) != 1 {
		t.Error("reads after Close do not serve the last data")
	}
	if st := ns.Status(); st.State != config.StateClosed {
		t.Errorf("state after Close = %v", st.State)
	}
	if _, err := c.Namespace(context.Background(), "close"); !errors.Is(err, config.ErrClosed) {
		t.Errorf("Namespace after Close = %v", err)
	}
	if err := ns.WaitForRevision(context.Background(), 1<<40); !errors.Is(err, config.ErrClosed) {
		t.Errorf("WaitForRevision after Close = %v", err)
	}
	testutil.Eventually(t, WaitLimit, func() bool { return srv.OpenStreams() == 0 }, "streams closed")
}
