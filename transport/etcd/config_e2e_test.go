package etcd_test

// The config client's own guarantees over the etcd source, end to end (the
// source-level cases are in the conformance suite, conformance_test.go):
// torn reads, callback order, resume, compaction while cut off, deletes.

import (
	"context"
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

func TestOnChangeAndDeletes(t *testing.T) {
	cl := sharedCluster(t)
	src := newSource(t, cl.endpoints())
	publish(t, src, "app", map[string]any{"a": 1, "b": 2})
	c := newClient(t, src)
	ns := open(t, c, "app")

	changes := make(chan config.Change, 10)
	sets := make(chan config.ChangeSet, 10)
	stop := ns.OnChange("a", func(ch config.Change) { changes <- ch })
	ns.OnAnyChange(func(cs config.ChangeSet) { sets <- cs })

	rev := publish(t, src, "app", map[string]any{"a": 10, "c": "x"}, "b")
	select {
	case ch := <-changes:
		if ch.Key != "a" || ch.Old.String() != "1" || ch.New.String() != "10" || ch.Revision != rev {
			t.Errorf("Change = %+v", ch)
		}
	case <-time.After(waitLimit):
		t.Fatal("no OnChange")
	}
	select {
	case cs := <-sets:
		if cs.Revision != rev || len(cs.Changes) != 3 {
			t.Errorf("ChangeSet = %+v", cs)
		}
	case <-time.After(waitLimit):
		t.Fatal("no OnAnyChange")
	}
	if _, ok := ns.Get("b"); ok {
		t.Error("deleted key b still served")
	}
	// A publish of only deletes is a revision of its own.
	rev = publish(t, src, "app", nil, "c")
	nstest.WaitRevision(t, ns, rev, waitLimit)
	if _, ok := ns.Get("c"); ok {
		t.Error("deleted key c still served")
	}
	<-sets
	stop()
	rev = publish(t, src, "app", map[string]any{"a": 11})
	nstest.WaitRevision(t, ns, rev, waitLimit)
	<-sets
	select {
	case ch := <-changes:
		t.Errorf("stopped OnChange got %+v", ch)
	default:
	}
}

// TestNoTornReads republishes a 30-key bundle, every key holding the
// round's number, while readers check that each Snapshot holds 30 values of
// one revision.
func TestNoTornReads(t *testing.T) {
	cl := sharedCluster(t)
	src := newSource(t, cl.endpoints())
	const keys, rounds, readers = 30, 100, 2
	bundle := func(i int) map[string]any {
		m := make(map[string]any, keys)
		for k := range keys {
			m["k"+strconv.Itoa(k)] = i
		}
		return m
	}
	publish(t, src, "bundle", bundle(0))
	c := newClient(t, src)
	ns := open(t, c, "bundle")

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
						errs <- fmt.Errorf("torn read at revision %d: k0=%d k%d=%d", snap.Revision(), first, k, v)
						return
					}
				}
				checked.Add(1)
			}
		}()
	}
	var last int64
	for i := 1; i <= rounds; i++ {
		last = publish(t, src, "bundle", bundle(i))
	}
	nstest.WaitRevision(t, ns, last, waitLimit)
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

// TestCallbacksOrderedExactlyOnce publishes quickly: callbacks arrive in
// revision order, one per revision, each after its revision is served.
func TestCallbacksOrderedExactlyOnce(t *testing.T) {
	cl := sharedCluster(t)
	src := newSource(t, cl.endpoints())
	publish(t, src, "ordered", map[string]any{"n": 0})
	c := newClient(t, src)
	ns := open(t, c, "ordered")

	const n = 300
	var mu sync.Mutex
	var revs []int64
	var violations []string
	ns.OnChange("n", func(config.Change) { panic("a bad callback") })
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
	var want []int64
	for i := 1; i <= n; i++ {
		want = append(want, publish(t, src, "ordered", map[string]any{"n": i}))
	}
	testutil.Eventually(t, waitLimit, func() bool { mu.Lock(); defer mu.Unlock(); return len(revs) >= n }, "every callback")
	mu.Lock()
	defer mu.Unlock()
	for _, v := range violations {
		t.Error(v)
	}
	if fmt.Sprint(revs) != fmt.Sprint(want) {
		t.Errorf("callbacks for revisions %v; want %v", revs, want)
	}
	if p := ns.CallbackPanics(); p != n {
		t.Errorf("CallbackPanics = %d; want %d", p, n)
	}
}

// TestResumeAfterDroppedConnection drops the client's connections while
// publishing: it resumes from its cursor, sees every revision once, and
// takes no new snapshot.
func TestResumeAfterDroppedConnection(t *testing.T) {
	cl := sharedCluster(t)
	ps := startProxies(t, cl)
	pub := newSource(t, cl.endpoints())
	publish(t, pub, "resume", map[string]any{"v": 0})
	src := &countingSource{Source: newSource(t, ps.urls())}
	c := newClient(t, src)
	ns := open(t, c, "resume")

	var mu sync.Mutex
	var seen []int64
	ns.OnAnyChange(func(cs config.ChangeSet) {
		mu.Lock()
		seen = append(seen, cs.Revision)
		mu.Unlock()
	})
	snapshots := src.snapshots.Load()
	var want []int64
	for i := 1; i <= 30; i++ {
		want = append(want, publish(t, pub, "resume", map[string]any{"v": i}))
		if i%10 == 0 {
			ps.drop()
		}
	}
	nstest.WaitRevision(t, ns, want[len(want)-1], waitLimit)
	testutil.Eventually(t, waitLimit, func() bool { mu.Lock(); defer mu.Unlock(); return len(seen) == len(want) }, "every callback")
	if got := src.snapshots.Load(); got != snapshots {
		t.Errorf("resume made %d new snapshots; want 0", got-snapshots)
	}
	mu.Lock()
	defer mu.Unlock()
	if fmt.Sprint(seen) != fmt.Sprint(want) {
		t.Fatalf("revisions seen %v; want %v", seen, want)
	}
}

// TestCompactionWhileCutOffResnapshots cuts the client off, publishes and
// compacts to the head: the client's watch is refused as compacted, it
// resnapshots and converges, deleted keys included.
func TestCompactionWhileCutOffResnapshots(t *testing.T) {
	cl := sharedCluster(t)
	ps := startProxies(t, cl)
	pub := newSource(t, cl.endpoints())
	publish(t, pub, "compact", map[string]any{"v": 0, "gone": true})
	src := &countingSource{Source: newSource(t, ps.urls())}
	c := newClient(t, src)
	ns := open(t, c, "compact")

	ps.setDown(true)
	testutil.Eventually(t, waitLimit, func() bool { return ns.Status().State == config.StateStale }, "stale while cut off")
	var last int64
	for i := 1; i <= 20; i++ {
		last = publish(t, pub, "compact", map[string]any{"v": i}, "gone")
	}
	if _, err := cl.client(t).Compact(context.Background(), last); err != nil {
		t.Fatal(err)
	}
	snapshots := src.snapshots.Load()
	ps.setDown(false)
	nstest.WaitRevision(t, ns, last, waitLimit)
	if ns.Int("v", -1) != 20 {
		t.Errorf("v = %d after converging", ns.Int("v", -1))
	}
	if _, ok := ns.Get("gone"); ok {
		t.Error("a key deleted during the outage is still served")
	}
	if src.snapshots.Load() == snapshots {
		t.Error("converged past compaction without a new snapshot")
	}
	if !src.sawError(transport.ErrCompacted) {
		t.Error("no watch ended with ErrCompacted")
	}
	testutil.Eventually(t, waitLimit, func() bool { return ns.Status().State == config.StateFresh }, "fresh again")
	// And it follows on from there.
	rev := publish(t, pub, "compact", map[string]any{"v": 21})
	nstest.WaitRevision(t, ns, rev, waitLimit)
}
