package config_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/holdfast-dev/holdfast/config"
	"github.com/holdfast-dev/holdfast/internal/sdksuite"
	"github.com/holdfast-dev/holdfast/internal/testutil"
	"github.com/holdfast-dev/holdfast/internal/testutil/nstest"
	"github.com/holdfast-dev/holdfast/transport"
)

// fakeStream is an in-memory transport.StreamSource (and BatchAcker): one
// store with a global revision, every change kept. Streams and watches run
// on their caller's goroutine, deterministically: they send what the store
// holds, then wait for the next publish or hook. Hooks inject a
// namespace's Ended, a stream failure, and progress.
type fakeStream struct {
	mu          sync.Mutex
	storeID     string
	head        int64
	compact     int64 // a since below it is compacted away
	revs        map[string]int64
	values      map[string]map[string]json.RawMessage
	log         []transport.ChangeSet
	signal      chan struct{} // closed and replaced on each publish and hook
	progressGen int           // a stream sends progress at the head when it moves
	// progressAge and progressUnconfirmed are the age of relayed data the
	// progress events carry (see progressAged).
	progressAge         int64
	progressUnconfirmed bool
	failGen             int
	failErr             error
	endNext             map[string]error // the next stream carrying the name ends it so
	unsupported         bool

	snapshots map[string]int
	watches   map[string]int
	requests  []transport.StreamRequest
	ackCalls  int
	acks      []transport.Ack
}

var (
	_ transport.StreamSource = (*fakeStream)(nil)
	_ transport.BatchAcker   = (*fakeStream)(nil)
	_ transport.Acker        = (*fakeStream)(nil)
)

func newFakeStream() *fakeStream {
	return &fakeStream{storeID: "store-1", revs: map[string]int64{}, values: map[string]map[string]json.RawMessage{},
		signal: make(chan struct{}), endNext: map[string]error{}, snapshots: map[string]int{}, watches: map[string]int{}}
}

func (f *fakeStream) wakeLocked() {
	close(f.signal)
	f.signal = make(chan struct{})
}

// publish writes puts to ns at the next store revision.
func (f *fakeStream) publish(ns string, puts map[string]any) int64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.head++
	raw := map[string]json.RawMessage{}
	if f.values[ns] == nil {
		f.values[ns] = map[string]json.RawMessage{}
	}
	for k, v := range puts {
		b, _ := json.Marshal(v)
		raw[k], f.values[ns][k] = b, b
	}
	f.log = append(f.log, transport.ChangeSet{Namespace: ns, Revision: f.head, PrevRevision: f.revs[ns], StoreID: f.storeID,
		CommittedAt: time.Now(), Puts: raw})
	f.revs[ns] = f.head
	f.wakeLocked()
	return f.head
}

// progress makes every stream and watch tell of the head.
func (f *fakeStream) progress() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.progressGen++
	f.wakeLocked()
}

// progressAged is progress with the age of relayed data: as a relay would
// send it, ageMillis after its upstream last confirmed the data.
func (f *fakeStream) progressAged(ageMillis int64, unconfirmed bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.progressAge, f.progressUnconfirmed = ageMillis, unconfirmed
	f.progressGen++
	f.wakeLocked()
}

// fail ends every running stream (not the per-namespace watches) with err.
func (f *fakeStream) fail(err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.failGen++
	f.failErr = err
	f.wakeLocked()
}

// end makes the next stream that carries ns end it with err.
func (f *fakeStream) end(ns string, err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.endNext[ns] = err
	f.wakeLocked()
}

func (f *fakeStream) count(m map[string]int, ns string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return m[ns]
}

func (f *fakeStream) streamRequests() []transport.StreamRequest {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.requests)
}

func (f *fakeStream) Snapshot(_ context.Context, req transport.SnapshotRequest) (*transport.Snapshot, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.snapshots[req.Namespace]++
	vals, ok := f.values[req.Namespace]
	if !ok {
		return nil, fmt.Errorf("%s: %w", req.Namespace, transport.ErrNotFound)
	}
	snap := &transport.Snapshot{Namespace: req.Namespace, StoreID: f.storeID, Revision: f.revs[req.Namespace], Cursor: f.head}
	if req.KnownStoreID == f.storeID && req.KnownRevision == snap.Revision {
		return snap, transport.ErrNotModified
	}
	snap.Values, _ = json.Marshal(vals)
	return snap, nil
}

func (f *fakeStream) Watch(ctx context.Context, req transport.WatchRequest, handle func(transport.Event) error) error {
	f.mu.Lock()
	f.watches[req.Namespace]++
	since, prog := req.Since, f.progressGen
	f.mu.Unlock()
	for {
		var evs []transport.Event
		f.mu.Lock()
		for i := range f.log {
			if cs := f.log[i]; cs.Namespace == req.Namespace && cs.Revision > since {
				evs = append(evs, transport.Event{Change: &cs})
				since = cs.Revision
			}
		}
		if prog != f.progressGen {
			prog = f.progressGen
			evs = append(evs, transport.Event{Progress: &transport.Progress{Namespace: req.Namespace, StoreID: f.storeID, Revision: f.revs[req.Namespace], Cursor: f.head,
				AgeMillis: f.progressAge, Unconfirmed: f.progressUnconfirmed}})
			since = f.head
		}
		sig := f.signal
		f.mu.Unlock()
		for _, ev := range evs {
			if err := handle(ev); err != nil {
				return err
			}
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-sig:
		}
	}
}

func (f *fakeStream) WatchStream(ctx context.Context, req transport.StreamRequest, handle func(transport.StreamEvent) error) error {
	f.mu.Lock()
	if f.unsupported {
		f.mu.Unlock()
		return transport.ErrStreamUnsupported
	}
	f.requests = append(f.requests, req)
	sinces := map[string]int64{}
	for _, w := range req.Namespaces {
		if _, dup := sinces[w.Namespace]; dup {
			f.mu.Unlock()
			return fmt.Errorf("%w: %q twice", transport.ErrBadRequest, w.Namespace)
		}
		sinces[w.Namespace] = w.Since
	}
	failGen, prog := f.failGen, f.progressGen
	f.mu.Unlock()
	for {
		var evs []transport.StreamEvent
		f.mu.Lock()
		if f.failGen != failGen {
			err := f.failErr
			f.mu.Unlock()
			return err
		}
		for ns, since := range sinces {
			err := f.endNext[ns]
			if err == nil && since < f.compact {
				err = &transport.CompactedError{CompactRevision: f.compact}
			}
			if err != nil {
				delete(f.endNext, ns)
				delete(sinces, ns)
				evs = append(evs, transport.StreamEvent{Ended: &transport.NamespaceEnded{Namespace: ns, Err: err}})
			}
		}
		for i := range f.log {
			cs := f.log[i]
			if since, ok := sinces[cs.Namespace]; ok && cs.Revision > since {
				evs = append(evs, transport.StreamEvent{Change: &cs})
				sinces[cs.Namespace] = cs.Revision
			}
		}
		if prog != f.progressGen {
			prog = f.progressGen
			evs = append(evs, transport.StreamEvent{Progress: &transport.StreamProgress{StoreID: f.storeID, Cursor: f.head,
				AgeMillis: f.progressAge, Unconfirmed: f.progressUnconfirmed}})
			for ns := range sinces {
				sinces[ns] = max(sinces[ns], f.head)
			}
		}
		sig := f.signal
		f.mu.Unlock()
		for _, ev := range evs {
			if err := handle(ev); err != nil {
				return err
			}
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-sig:
		}
	}
}

func (f *fakeStream) Ack(_ context.Context, ack transport.Ack) error {
	return f.AckBatch(context.Background(), []transport.Ack{ack})
}

func (f *fakeStream) AckBatch(_ context.Context, acks []transport.Ack) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.ackCalls++
	f.acks = append(f.acks, acks...)
	return nil
}

// seqRecorder keeps, per namespace, every value of "seq" its OnChange saw.
type seqRecorder struct {
	mu   sync.Mutex
	seen map[string][]int
}

func (r *seqRecorder) watch(ns *config.Namespace) {
	ns.OnChange("seq", func(ch config.Change) {
		r.mu.Lock()
		defer r.mu.Unlock()
		if r.seen == nil {
			r.seen = map[string][]int{}
		}
		r.seen[ns.Name()] = append(r.seen[ns.Name()], func() int { v, _ := ch.New.Int(); return v }())
	})
}

func (r *seqRecorder) get(ns string) []int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.seen[ns])
}

// waitCallbacks waits until ns's OnChange has seen seq last.
func (r *seqRecorder) waitCallbacks(t *testing.T, ns string, last int) []int {
	t.Helper()
	testutil.Eventually(t, waitLimit, func() bool {
		seen := r.get(ns)
		return len(seen) > 0 && seen[len(seen)-1] == last
	}, ns+"'s callbacks at seq "+fmt.Sprint(last))
	return r.get(ns)
}

// checkConsecutive: each change of seq seen once, in order, none missed.
func checkConsecutive(t *testing.T, ns string, seen []int, last int) {
	t.Helper()
	if len(seen) == 0 || seen[len(seen)-1] != last {
		t.Fatalf("%s: callbacks saw %v; call waitCallbacks first", ns, seen)
	}
	if len(seen) == 0 {
		t.Errorf("%s: no change seen", ns)
		return
	}
	for i := 1; i < len(seen); i++ {
		if seen[i] != seen[i-1]+1 {
			t.Errorf("%s: seq went %d -> %d (a change missed or applied twice): %v", ns, seen[i-1], seen[i], seen)
			return
		}
	}
	if seen[len(seen)-1] != last {
		t.Errorf("%s: last seq seen %d; want %d", ns, seen[len(seen)-1], last)
	}
}

// revisionMonitor samples c.Revision() until stopped and fails if it ever
// goes back.
func revisionMonitor(t *testing.T, c *config.Client) (stop func()) {
	done, stopped := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(stopped)
		var last int64
		for {
			r := c.Revision()
			if r < last {
				t.Errorf("Revision went back from %d to %d", last, r)
			}
			last = r
			select {
			case <-done:
				return
			case <-time.After(time.Millisecond):
			}
		}
	}()
	return func() { close(done); <-stopped }
}

// TestStreamJoinAndLeaveWhileChangesFlow: namespaces join and leave the
// shared stream while changes flow to the others: nothing missed, nothing
// applied twice, no snapshot fetched again for the others, and a handful
// of stream restarts.
func TestStreamJoinAndLeaveWhileChangesFlow(t *testing.T) {
	f := newFakeStream()
	stay := []string{"a0", "a1", "a2"}
	leave := []string{"a3", "a4"}
	join := []string{"b0", "b1", "b2"}
	for _, ns := range slices.Concat(stay, leave, join) {
		f.publish(ns, map[string]any{"seq": 0})
	}
	c := sdksuite.NewClient(t, sdksuite.Source(f), config.WithStreamIdleTimeout(relaxedIdle))
	stopMon := revisionMonitor(t, c)
	defer stopMon()
	rec := &seqRecorder{}
	open1 := map[string]*config.Namespace{}
	for _, name := range slices.Concat(stay, leave) {
		open1[name] = sdksuite.Open(t, c, name)
		rec.watch(open1[name])
	}

	const rounds = 60
	for i := 1; i <= rounds; i++ {
		for _, ns := range slices.Concat(stay, leave, join) {
			f.publish(ns, map[string]any{"seq": i})
		}
		if i%5 == 0 { // let changes flow while others join and leave
			testutil.Eventually(t, waitLimit, func() bool { return open1["a0"].Int("seq", -1) == i }, "a0 at the seq")
		}
		switch i {
		case 20:
			for _, name := range join {
				open1[name] = sdksuite.Open(t, c, name)
				rec.watch(open1[name])
			}
		case 40:
			for _, name := range leave {
				testutil.Eventually(t, waitLimit, func() bool { return open1[name].Int("seq", -1) == 40 }, name+" at seq 40")
				if err := open1[name].Close(); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	for _, name := range slices.Concat(stay, join) {
		testutil.Eventually(t, waitLimit, func() bool { return open1[name].Int("seq", -1) == rounds }, name+" at the last seq")
	}
	for _, name := range stay {
		checkConsecutive(t, name, rec.waitCallbacks(t, name, rounds), rounds)
	}
	for _, name := range join {
		checkConsecutive(t, name, rec.waitCallbacks(t, name, rounds), rounds)
	}
	for _, name := range leave {
		if st := open1[name].Status().State; st != config.StateClosed {
			t.Errorf("%s after Close: %v", name, st)
		}
		if got := open1[name].Int("seq", -1); got != 40 {
			t.Errorf("%s serves seq %d after Close; want its last data (40)", name, got)
		}
	}
	for _, name := range slices.Concat(stay, leave, join) {
		if n := f.count(f.snapshots, name); n != 1 {
			t.Errorf("%s: %d snapshots; want 1", name, n)
		}
		if n := f.count(f.watches, name); n != 0 {
			t.Errorf("%s: %d per-namespace watches; want 0 (all on the stream)", name, n)
		}
	}
	// The leaves restart the stream once membership has been still for
	// the debounce: wait for that restart.
	want := slices.Concat(stay, join)
	lastNames := func() []string {
		reqs := f.streamRequests()
		var names []string
		for _, w := range reqs[len(reqs)-1].Namespaces {
			names = append(names, w.Namespace)
		}
		slices.Sort(names)
		return names
	}
	testutil.Eventually(t, waitLimit, func() bool { return slices.Equal(lastNames(), want) }, "the last stream without the namespaces closed")
	if reqs := f.streamRequests(); len(reqs) > 10 {
		t.Errorf("%d stream attempts for 2 batches of joins and 1 of leaves", len(reqs))
	}
}

// TestStreamEndedCompactedResnapshotsAlone: one namespace's Ended
// (compacted) resnapshots it alone; the others go on.
func TestStreamEndedCompactedResnapshotsAlone(t *testing.T) {
	f := newFakeStream()
	names := []string{"x0", "x1", "x2"}
	for _, ns := range names {
		f.publish(ns, map[string]any{"seq": 0})
	}
	c := sdksuite.NewClient(t, sdksuite.Source(f), config.WithStreamIdleTimeout(relaxedIdle))
	nss := map[string]*config.Namespace{}
	rec := &seqRecorder{}
	for _, name := range names {
		nss[name] = sdksuite.Open(t, c, name)
		rec.watch(nss[name])
	}
	f.end("x1", &transport.CompactedError{CompactRevision: 1})
	testutil.Eventually(t, waitLimit, func() bool { return f.count(f.snapshots, "x1") == 2 }, "x1 resnapshotted")
	for i := 1; i <= 10; i++ {
		for _, ns := range names {
			f.publish(ns, map[string]any{"seq": i})
		}
	}
	for _, name := range names {
		testutil.Eventually(t, waitLimit, func() bool { return nss[name].Int("seq", -1) == 10 }, name+" at seq 10")
	}
	for _, name := range []string{"x0", "x2"} {
		checkConsecutive(t, name, rec.waitCallbacks(t, name, 10), 10)
		if n := f.count(f.snapshots, name); n != 1 {
			t.Errorf("%s: %d snapshots; want 1", name, n)
		}
	}
	if n := f.count(f.snapshots, "x1"); n != 2 {
		t.Errorf("x1: %d snapshots; want 2", n)
	}
}

// TestStreamFailureResumesEveryNamespace: the shared stream fails; every
// namespace resumes from its cursor (no snapshot), and the stream is
// reopened with each one's cursor.
func TestStreamFailureResumesEveryNamespace(t *testing.T) {
	f := newFakeStream()
	names := []string{"y0", "y1", "y2", "y3"}
	for _, ns := range names {
		f.publish(ns, map[string]any{"seq": 0})
	}
	c := sdksuite.NewClient(t, sdksuite.Source(f), config.WithStreamIdleTimeout(relaxedIdle))
	stopMon := revisionMonitor(t, c)
	defer stopMon()
	nss := map[string]*config.Namespace{}
	rec := &seqRecorder{}
	for _, name := range names {
		nss[name] = sdksuite.Open(t, c, name)
		rec.watch(nss[name])
	}
	for round := 1; round <= 3; round++ {
		var last int64
		for i := 1; i <= 5; i++ {
			for _, ns := range names {
				last = f.publish(ns, map[string]any{"seq": (round-1)*5 + i})
			}
		}
		for _, name := range names {
			nstest.WaitRevision(t, nss[name], last-int64(len(names))+1, waitLimit)
		}
		before := len(f.streamRequests())
		f.fail(fmt.Errorf("connection reset: %w", errors.ErrUnsupported))
		testutil.Eventually(t, waitLimit, func() bool { return len(f.streamRequests()) > before }, "the stream reopened")
		re := f.streamRequests()[before]
		for _, w := range re.Namespaces {
			if w.Since < nss[w.Namespace].Revision() {
				t.Errorf("%s reopened from %d, below its revision %d", w.Namespace, w.Since, nss[w.Namespace].Revision())
			}
		}
	}
	f.publish("y0", map[string]any{"seq": 16})
	for _, name := range names {
		want := 15
		if name == "y0" {
			want = 16
		}
		testutil.Eventually(t, waitLimit, func() bool { return nss[name].Int("seq", -1) == want }, name+" at its last seq")
		checkConsecutive(t, name, rec.waitCallbacks(t, name, want), want)
		if n := f.count(f.snapshots, name); n != 1 {
			t.Errorf("%s: %d snapshots; want 1", name, n)
		}
	}
}

// TestWaitForRevisionOfAnUnwatchedNamespace: a revision published to a
// namespace the client does not watch is reached once a stream progress
// covers it.
func TestWaitForRevisionOfAnUnwatchedNamespace(t *testing.T) {
	f := newFakeStream()
	f.publish("mine", map[string]any{"v": 1})
	f.publish("mine2", map[string]any{"v": 1})
	c := sdksuite.NewClient(t, sdksuite.Source(f), config.WithStreamIdleTimeout(relaxedIdle))
	if got := c.Revision(); got != 0 {
		t.Errorf("Revision with no namespace open = %d; want 0", got)
	}
	sdksuite.Open(t, c, "mine")
	sdksuite.Open(t, c, "mine2")
	testutil.Eventually(t, waitLimit, func() bool { return c.Revision() == 2 }, "Revision at the head")
	rev := f.publish("theirs", map[string]any{"v": 1})

	short, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	err := c.WaitForRevision(short, rev)
	cancel()
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("WaitForRevision before any progress = %v; want the deadline", err)
	}
	done := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
		defer cancel()
		done <- c.WaitForRevision(ctx, rev)
	}()
	f.progress()
	if err := <-done; err != nil {
		t.Fatalf("WaitForRevision after a progress at %d: %v (Revision %d)", rev, err, c.Revision())
	}
	if got := c.Revision(); got < rev {
		t.Errorf("Revision = %d; want >= %d", got, rev)
	}
	// A revision beyond the head is never reached: only a deadline ends it.
	short, cancel = context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if err := c.WaitForRevision(short, rev+100); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("WaitForRevision beyond the head = %v; want the deadline", err)
	}
}

// TestStreamUnsupportedFallsBackToWatch: a source whose WatchStream says
// ErrStreamUnsupported is watched one namespace at a time, as before.
func TestStreamUnsupportedFallsBackToWatch(t *testing.T) {
	f := newFakeStream()
	f.unsupported = true
	names := []string{"z0", "z1"}
	for _, ns := range names {
		f.publish(ns, map[string]any{"seq": 0})
	}
	c := sdksuite.NewClient(t, sdksuite.Source(f), config.WithStreamIdleTimeout(relaxedIdle))
	nss := map[string]*config.Namespace{}
	for _, name := range names {
		nss[name] = sdksuite.Open(t, c, name)
	}
	for i := 1; i <= 5; i++ {
		for _, ns := range names {
			f.publish(ns, map[string]any{"seq": i})
		}
	}
	for _, name := range names {
		testutil.Eventually(t, waitLimit, func() bool { return nss[name].Int("seq", -1) == 5 }, name+" at seq 5")
		if n := f.count(f.watches, name); n < 1 {
			t.Errorf("%s: no per-namespace watch", name)
		}
	}
	testutil.Eventually(t, waitLimit, func() bool { f.progress(); return c.Revision() == 12 }, "Revision at the head")
}

// TestAcksCoalescedAcrossNamespaces: the outcomes of several namespaces go
// in few batches, the newest of each namespace.
func TestAcksCoalescedAcrossNamespaces(t *testing.T) {
	f := newFakeStream()
	names := []string{"k0", "k1", "k2", "k3"}
	for _, ns := range names {
		f.publish(ns, map[string]any{"v": 0})
	}
	c := sdksuite.NewClient(t, sdksuite.Source(f), config.WithStreamIdleTimeout(relaxedIdle))
	for _, name := range names {
		sdksuite.Open(t, c, name)
	}
	var last int64
	for _, ns := range names {
		last = f.publish(ns, map[string]any{"v": 1})
	}
	testutil.Eventually(t, waitLimit, func() bool {
		f.mu.Lock()
		defer f.mu.Unlock()
		got := map[string]int64{}
		for _, a := range f.acks {
			got[a.Namespace] = max(got[a.Namespace], a.Revision)
		}
		for i, ns := range names {
			if got[ns] != last-int64(len(names)-1-i) {
				return false
			}
		}
		return true
	}, "every namespace's last outcome acked")
	f.mu.Lock()
	calls, acks := f.ackCalls, len(f.acks)
	f.mu.Unlock()
	if calls >= acks {
		t.Errorf("%d ack calls for %d acks: not batched", calls, acks)
	}
}

// TestGoroutinesPerNamespace: at most 3 goroutines per open namespace
// plus a fixed few per client.
func TestGoroutinesPerNamespace(t *testing.T) {
	const perClient = 4
	for _, n := range []int{1, 10, 100} {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			f := newFakeStream()
			for i := range n {
				f.publish(fmt.Sprintf("g%d", i), map[string]any{"v": i})
			}
			before := runtime.NumGoroutine()
			c := sdksuite.NewClient(t, sdksuite.Source(f), config.WithStreamIdleTimeout(relaxedIdle))
			var nss []*config.Namespace
			for i := range n {
				nss = append(nss, sdksuite.Open(t, c, fmt.Sprintf("g%d", i)))
			}
			f.publish("g0", map[string]any{"v": -1}) // an ack, so the acker runs
			testutil.Eventually(t, waitLimit, func() bool { return nss[0].Int("v", 0) == -1 }, "g0 applied")
			limit := 3*n + perClient
			var delta int
			testutil.Wait(waitLimit, func() bool { // transient timers' goroutines settle
				delta = runtime.NumGoroutine() - before
				return delta <= limit
			})
			t.Logf("%d namespaces: %d goroutines (limit %d)", n, delta, limit)
			if delta > limit {
				t.Errorf("%d namespaces: %d goroutines; want <= %d", n, delta, limit)
			}
		})
	}
}
