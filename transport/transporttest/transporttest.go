// Package transporttest is the conformance suite of transport.Source: the
// protocol's cases as seen through the interface, which any Source must
// pass (the HTTP source against the reference server, the etcd source
// against a real cluster, and a second implementation of the protocol).
//
//	func TestConformance(t *testing.T) {
//		transporttest.Run(t, func(t *testing.T) *transporttest.Store {
//			srv := startServer(t)
//			return &transporttest.Store{
//				Source:  newSource(t, srv.URL()),
//				Publish: func(t *testing.T, ns string, puts map[string]json.RawMessage, deletes []string) int64 { ... },
//				Compact: func(t *testing.T, rev int64) { ... },
//			}
//		})
//	}
//
// Each case gets a fresh Store from the harness, works in namespaces of its
// own, and checks every event a Watch delivers against the protocol's
// invariants (its namespace, a store id, revisions above the cursor and
// increasing, 0 <= prev_revision < revision, progress never behind what
// was delivered) as well as what the case expects. Cases whose fault the
// Store cannot inject (Disconnect, Restart, Reset left nil) are skipped.
//
// The cases of the multi-namespace watch (transport.StreamSource) run
// when the Store has one (Store.Stream, or a Source that is one), and
// check each stream's events likewise: a change only of a namespace in the
// stream and not ended, above its cursor, progress never going back, an
// end only once. The suite grows with the protocol: the relay adds its
// cases here.
package transporttest

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/holdfast-dev/holdfast/transport"
)

// Store is a Source under test and the store it reads. Source, Publish and
// Compact are required; the fault injectors are optional.
type Store struct {
	// Source reads the store. The suite does not close it.
	Source transport.Source
	// Publish commits puts and deletes to namespace ns as one revision and
	// returns it, failing t on error. Values are JSON text, to be kept as
	// written (white space aside).
	Publish func(t *testing.T, ns string, puts map[string]json.RawMessage, deletes []string) int64
	// Compact discards the store's history at and below revision rev.
	Compact func(t *testing.T, rev int64)
	// Disconnect cuts the Source's open connections, as a network failure
	// would; new ones succeed.
	Disconnect func(t *testing.T)
	// Restart takes the server down and up again, keeping the store and
	// its id.
	Restart func(t *testing.T)
	// Reset replaces the store by a new, empty one with a new store id.
	Reset func(t *testing.T)
	// Timeout bounds each wait of a case (default 30 s).
	Timeout time.Duration

	// Stream is the multi-namespace watch under test; nil means Source
	// itself when it is a transport.StreamSource. The stream cases skip
	// without one, and when it answers transport.ErrStreamUnsupported,
	// unless RequireStream.
	Stream transport.StreamSource
	// RequireStream makes ErrStreamUnsupported a failure of the stream
	// cases rather than a reason to skip them.
	RequireStream bool
	// PromptProgress: the stream promises a progress past a publish to a
	// namespace it does not carry within 1 s (the global revision).
	PromptProgress bool
}

// Run runs every case as a subtest of t, each on a Store from newStore
// (called with the subtest's t, so that the harness can clean up with
// t.Cleanup).
func Run(t *testing.T, newStore func(t *testing.T) *Store) {
	t.Helper()
	run(t, newStore, cases)
	run(t, newStore, streamCases)
}

// RunStream runs only the cases of the multi-namespace watch.
func RunStream(t *testing.T, newStore func(t *testing.T) *Store) {
	t.Helper()
	run(t, newStore, streamCases)
}

type testCase = struct {
	name string
	run  func(t *testing.T, e *env)
}

func run(t *testing.T, newStore func(t *testing.T) *Store, cases []testCase) {
	t.Helper()
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			st := newStore(t)
			if st == nil || st.Source == nil || st.Publish == nil || st.Compact == nil {
				t.Fatal("transporttest: the harness must give a Store with Source, Publish and Compact")
			}
			if st.Timeout <= 0 {
				st.Timeout = 30 * time.Second
			}
			c.run(t, &env{Store: st, ns: nsName(t)})
		})
	}
}

var cases = []testCase{
	{"Snapshot", testSnapshot},
	{"NotFound", testNotFound},
	{"WatchFromCursor", testWatchFromCursor},
	{"Progress", testProgress},
	{"Resume", testResume},
	{"Disconnect", testDisconnect},
	{"Restart", testRestart},
	{"Compacted", testCompacted},
	{"CursorAhead", testCursorAhead},
	{"StoreReset", testStoreReset},
	{"Values", testValues},
}

type env struct {
	*Store
	ns string // this case's namespace; others derive from it
}

// nsName makes a namespace name of the case, unique in the run, so that
// cases can share one store.
func nsName(t *testing.T) string {
	name := strings.ToLower(t.Name())
	var b strings.Builder
	b.WriteString("tt-")
	for _, r := range name {
		if r >= 'a' && r <= 'z' || r >= '0' && r <= '9' {
			b.WriteRune(r)
		} else {
			b.WriteByte('-')
		}
	}
	fmt.Fprintf(&b, "-%d", time.Now().UnixNano()%1e9)
	return b.String()
}

func raw(kv ...string) map[string]json.RawMessage {
	m := make(map[string]json.RawMessage, len(kv)/2)
	for i := 0; i+1 < len(kv); i += 2 {
		m[kv[i]] = json.RawMessage(kv[i+1])
	}
	return m
}

func (e *env) ctx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), e.Timeout)
	t.Cleanup(cancel)
	return ctx
}

func (e *env) snapshot(t *testing.T, ns string) *transport.Snapshot {
	t.Helper()
	snap, err := e.Source.Snapshot(e.ctx(t), transport.SnapshotRequest{Namespace: ns})
	if err != nil {
		t.Fatalf("Snapshot(%q) = %v", ns, err)
	}
	if snap.Namespace != ns || snap.StoreID == "" || snap.Revision < 0 || snap.Cursor < snap.Revision || snap.Values == nil {
		t.Fatalf("Snapshot(%q) = %+v; want its namespace, a store id, 0 <= revision <= cursor, values", ns, snap)
	}
	return snap
}

func values(t *testing.T, snap *transport.Snapshot) map[string]json.RawMessage {
	t.Helper()
	var m map[string]json.RawMessage
	if err := json.Unmarshal(snap.Values, &m); err != nil {
		t.Fatalf("snapshot values %.200s: %v", snap.Values, err)
	}
	return m
}

// compact is v's JSON text without insignificant white space.
func compact(t *testing.T, v json.RawMessage) string {
	t.Helper()
	var b bytes.Buffer
	if err := json.Compact(&b, v); err != nil {
		t.Fatalf("value %.100q: %v", v, err)
	}
	return b.String()
}

// sameValues fails t unless got holds exactly want's keys, each with the
// same JSON text (white space aside).
func sameValues(t *testing.T, what string, got, want map[string]json.RawMessage) {
	t.Helper()
	for k, w := range want {
		g, ok := got[k]
		if !ok {
			t.Errorf("%s: key %q missing", what, k)
			continue
		}
		if compact(t, g) != compact(t, w) {
			t.Errorf("%s: key %q = %s; want %s (as published)", what, k, g, w)
		}
	}
	for k := range got {
		if _, ok := want[k]; !ok {
			t.Errorf("%s: unexpected key %q = %s", what, k, got[k])
		}
	}
}

// errStop ends a watch whose case has seen what it waited for.
var errStop = errors.New("transporttest: seen enough")

// watcher checks every event of one Watch against the protocol's
// invariants and records them.
type watcher struct {
	t       *testing.T
	req     transport.WatchRequest
	floor   int64 // no change at or below it may come: the cursor so far
	lastRev int64 // the last change's revision
	changes []*transport.ChangeSet
	prog    []*transport.Progress
	bad     error
}

func (w *watcher) check(ev transport.Event) error {
	fail := func(format string, args ...any) error {
		w.bad = fmt.Errorf("watch %q since %d: "+format, append([]any{w.req.Namespace, w.req.Since}, args...)...)
		return w.bad
	}
	switch {
	case (ev.Change == nil) == (ev.Progress == nil):
		return fail("an event with %v change and %v progress; want exactly one", ev.Change != nil, ev.Progress != nil)
	case ev.Change != nil:
		c := ev.Change
		switch {
		case c.Namespace != w.req.Namespace || c.StoreID == "":
			return fail("change %+v: want namespace %q and a store id", c, w.req.Namespace)
		case c.Revision <= w.floor:
			return fail("change at revision %d, at or below the cursor %d (since, or an earlier event's)", c.Revision, w.floor)
		case c.PrevRevision < 0 || c.PrevRevision >= c.Revision:
			return fail("change at revision %d with prev_revision %d; want 0 <= prev < revision", c.Revision, c.PrevRevision)
		case w.lastRev > 0 && c.PrevRevision != w.lastRev:
			return fail("change at revision %d chains on %d; the previous change was %d (one is missing)", c.Revision, c.PrevRevision, w.lastRev)
		}
		w.floor, w.lastRev = c.Revision, c.Revision
		w.changes = append(w.changes, c)
	default:
		p := ev.Progress
		switch {
		case p.Namespace != w.req.Namespace || p.StoreID == "":
			return fail("progress %+v: want namespace %q and a store id", p, w.req.Namespace)
		case p.Revision < 0 || p.Revision > p.Cursor:
			return fail("progress %+v: want 0 <= revision <= cursor", p)
		case p.Cursor < w.floor:
			return fail("progress at cursor %d, behind the cursor %d already reached", p.Cursor, w.floor)
		case p.Revision < w.lastRev:
			return fail("progress says the namespace is at %d; a change at %d was delivered", p.Revision, w.lastRev)
		}
		w.floor = p.Cursor
		w.prog = append(w.prog, p)
	}
	return nil
}

// watch runs one Watch until until reports true (checked after each
// event) or the Watch ends; it returns the watcher and Watch's error
// (errStop when until was met).
func (e *env) watch(t *testing.T, ctx context.Context, req transport.WatchRequest, until func(w *watcher) bool) (*watcher, error) {
	t.Helper()
	w := &watcher{t: t, req: req, floor: req.Since}
	err := e.Source.Watch(ctx, req, func(ev transport.Event) error {
		if err := w.check(ev); err != nil {
			return err
		}
		if until(w) {
			return errStop
		}
		return nil
	})
	if w.bad != nil {
		t.Fatal(w.bad)
	}
	if err == nil {
		t.Fatalf("Watch(%q since %d) returned nil; a Watch always returns an error", req.Namespace, req.Since)
	}
	return w, err
}

// watchFor is watch that must meet until.
func (e *env) watchFor(t *testing.T, what string, req transport.WatchRequest, until func(w *watcher) bool) *watcher {
	t.Helper()
	w, err := e.watch(t, e.ctx(t), req, until)
	if !errors.Is(err, errStop) {
		t.Fatalf("Watch(%q since %d) ended with %v before %s (after %d changes, %d progress events)",
			req.Namespace, req.Since, err, what, len(w.changes), len(w.prog))
	}
	return w
}

func revisions(cs []*transport.ChangeSet) []int64 {
	out := make([]int64, len(cs))
	for i, c := range cs {
		out[i] = c.Revision
	}
	return out
}

func hasRevision(rev int64) func(w *watcher) bool {
	return func(w *watcher) bool { return w.lastRev >= rev }
}

// Snapshot: revision, cursor, store id and content; a conditional
// snapshot of an unchanged namespace is ErrNotModified with a current
// cursor and no values; a delete-only publish is a change.
func testSnapshot(t *testing.T, e *env) {
	rev := e.Publish(t, e.ns, raw("a", "1", "b", `"two"`, "db/primary/host", `"10.0.0.1"`), nil)
	snap := e.snapshot(t, e.ns)
	if snap.Revision != rev || snap.Cursor < rev || snap.CompactRevision < 0 {
		t.Fatalf("Snapshot = %+v; want revision %d, cursor >= it", snap, rev)
	}
	sameValues(t, "snapshot", values(t, snap), raw("a", "1", "b", `"two"`, "db/primary/host", `"10.0.0.1"`))

	other := e.Publish(t, e.ns+"-other", raw("x", "1"), nil)
	req := transport.SnapshotRequest{Namespace: e.ns, KnownStoreID: snap.StoreID, KnownRevision: rev}
	nm, err := e.Source.Snapshot(e.ctx(t), req)
	if !errors.Is(err, transport.ErrNotModified) || nm == nil || nm.Values != nil || nm.Revision != rev || nm.Cursor < other || nm.StoreID != snap.StoreID {
		t.Fatalf("conditional Snapshot = %+v, %v; want ErrNotModified at revision %d, cursor >= %d (another namespace's publish), no values", nm, err, rev, other)
	}
	del := e.Publish(t, e.ns, nil, []string{"b"})
	full, err := e.Source.Snapshot(e.ctx(t), req)
	if err != nil || full.Revision != del {
		t.Fatalf("conditional Snapshot after a delete = %+v, %v; want revision %d", full, err, del)
	}
	sameValues(t, "snapshot after a delete", values(t, full), raw("a", "1", "db/primary/host", `"10.0.0.1"`))
}

// NotFound: a namespace never published to is ErrNotFound.
func testNotFound(t *testing.T, e *env) {
	e.Publish(t, e.ns+"-other", raw("x", "1"), nil) // the store is not empty
	_, err := e.Source.Snapshot(e.ctx(t), transport.SnapshotRequest{Namespace: e.ns})
	if !errors.Is(err, transport.ErrNotFound) {
		t.Fatalf("Snapshot of a namespace never published to = %v; want ErrNotFound", err)
	}
}

// WatchFromCursor: the backlog after the cursor, then live changes, each
// publish one change set with exactly its puts and deletes, chained by
// prev_revision, none repeated, and a progress event at the end.
func testWatchFromCursor(t *testing.T, e *env) {
	first := e.Publish(t, e.ns, raw("a", "0", "b", "0", "c", "0"), nil)
	snap := e.snapshot(t, e.ns)
	var want []int64
	want = append(want, e.Publish(t, e.ns, raw("a", "1", "d", `"x"`), []string{"b"}))
	e.Publish(t, e.ns+"-other", raw("x", "1"), nil) // other namespaces' revisions are not this one's
	want = append(want, e.Publish(t, e.ns, nil, []string{"c"}))
	bundle := raw()
	for i := range 20 {
		bundle[fmt.Sprintf("k%02d", i)] = json.RawMessage(fmt.Sprint(i))
	}
	want = append(want, e.Publish(t, e.ns, bundle, nil))

	// The backlog, from the snapshot's cursor.
	w := e.watchFor(t, "every published revision", transport.WatchRequest{Namespace: e.ns, Since: snap.Cursor}, hasRevision(want[2]))
	if got := revisions(w.changes); !slices.Equal(got, want) {
		t.Fatalf("change sets at revisions %v; want %v", got, want)
	}
	c0, c1, c2 := w.changes[0], w.changes[1], w.changes[2]
	if c0.PrevRevision != first || c0.StoreID != snap.StoreID {
		t.Errorf("first change %+v; want prev_revision %d (the snapshot's) and store %s", c0, first, snap.StoreID)
	}
	sameValues(t, "change 1 puts", c0.Puts, raw("a", "1", "d", `"x"`))
	if !slices.Equal(c0.Deletes, []string{"b"}) || len(c1.Puts) != 0 || !slices.Equal(c1.Deletes, []string{"c"}) {
		t.Errorf("deletes %v then %v (puts %v); want [b], then only [c]", c0.Deletes, c1.Deletes, c1.Puts)
	}
	sameValues(t, "a 20-key publish, one change set", c2.Puts, bundle)

	// Live: a watch from the head gets what is published while it runs.
	ctx := e.ctx(t)
	var once sync.Once
	var live int64
	w, err := e.watch(t, ctx, transport.WatchRequest{Namespace: e.ns, Since: w.floor}, func(w *watcher) bool {
		once.Do(func() { live = e.Publish(t, e.ns, raw("a", "2"), nil) }) // after the first event: the watch is open
		return live > 0 && w.lastRev >= live
	})
	if !errors.Is(err, errStop) || !slices.Equal(revisions(w.changes), []int64{live}) {
		t.Fatalf("live watch: %v, changes %v; want exactly revision %d", err, revisions(w.changes), live)
	}
}

// Progress: a quiet namespace's watch gets progress events without any
// publish (heartbeats), and their cursor moves past other namespaces'
// publishes while the namespace's revision stays.
func testProgress(t *testing.T, e *env) {
	rev := e.Publish(t, e.ns, raw("a", "1"), nil)
	snap := e.snapshot(t, e.ns)
	w := e.watchFor(t, "two progress events", transport.WatchRequest{Namespace: e.ns, Since: snap.Cursor},
		func(w *watcher) bool { return len(w.prog) >= 2 })
	if len(w.changes) != 0 {
		t.Errorf("a quiet namespace's watch delivered changes %v", revisions(w.changes))
	}
	var other int64
	var once sync.Once
	w = e.watchFor(t, "a progress past another namespace's publish", transport.WatchRequest{Namespace: e.ns, Since: snap.Cursor},
		func(w *watcher) bool {
			once.Do(func() { other = e.Publish(t, e.ns+"-other", raw("x", "1"), nil) })
			return other > 0 && len(w.prog) > 0 && w.prog[len(w.prog)-1].Cursor >= other
		})
	if p := w.prog[len(w.prog)-1]; p.Revision != rev || p.StoreID != snap.StoreID {
		t.Errorf("progress %+v; want the namespace's revision %d and store %s", p, rev, snap.StoreID)
	}
}

// Resume: a watch ended by its caller resumes from its cursor: the new
// watch delivers exactly what was published since, nothing at or below
// the cursor.
func testResume(t *testing.T, e *env) {
	e.Publish(t, e.ns, raw("v", "0"), nil)
	snap := e.snapshot(t, e.ns)
	var want []int64
	for i := 1; i <= 3; i++ {
		want = append(want, e.Publish(t, e.ns, raw("v", fmt.Sprint(i)), nil))
	}
	w := e.watchFor(t, "revision "+fmt.Sprint(want[0]), transport.WatchRequest{Namespace: e.ns, Since: snap.Cursor}, hasRevision(want[0]))
	cursor := w.floor
	for i := 4; i <= 6; i++ {
		want = append(want, e.Publish(t, e.ns, raw("v", fmt.Sprint(i)), nil))
	}
	w2 := e.watchFor(t, "every later revision", transport.WatchRequest{Namespace: e.ns, Since: cursor}, hasRevision(want[len(want)-1]))
	got := append(revisions(w.changes), revisions(w2.changes)...)
	if !slices.Equal(got, want) {
		t.Fatalf("revisions across the resume %v; want %v", got, want)
	}
}

// interrupted opens a watch, injects fault once it delivered, publishes,
// and checks that the publish arrives, on the same watch or on one
// resumed from the cursor after the watch ended with a retryable error.
func (e *env) interrupted(t *testing.T, fault func(t *testing.T)) {
	e.Publish(t, e.ns, raw("v", "0"), nil)
	snap := e.snapshot(t, e.ns)
	before := e.Publish(t, e.ns, raw("v", "1"), nil)
	ctx := e.ctx(t)
	type result struct {
		w   *watcher
		err error
	}
	seen := make(chan struct{})
	var once sync.Once
	var target struct {
		sync.Mutex
		rev int64
	}
	done := make(chan result, 1)
	go func() {
		w := &watcher{t: t, req: transport.WatchRequest{Namespace: e.ns, Since: snap.Cursor}, floor: snap.Cursor}
		err := e.Source.Watch(ctx, w.req, func(ev transport.Event) error {
			if err := w.check(ev); err != nil {
				return err
			}
			if w.lastRev >= before {
				once.Do(func() { close(seen) })
			}
			target.Lock()
			defer target.Unlock()
			if target.rev > 0 && w.lastRev >= target.rev {
				return errStop
			}
			return nil
		})
		done <- result{w, err}
	}()
	select {
	case <-seen:
	case r := <-done:
		t.Fatalf("the watch ended with %v (%v) before delivering revision %d", r.err, r.w.bad, before)
	}
	fault(t)
	rev := e.Publish(t, e.ns, raw("v", "2"), nil)
	target.Lock()
	target.rev = rev
	target.Unlock()
	r := <-done
	if r.w.bad != nil {
		t.Fatal(r.w.bad)
	}
	if errors.Is(r.err, errStop) {
		return // the watch rode the fault out
	}
	if ctx.Err() != nil || !transport.Retryable(r.err) {
		t.Fatalf("after the fault the watch ended with %v; want a retryable error (or the publish delivered)", r.err)
	}
	w := e.watchFor(t, "the publish after the fault", transport.WatchRequest{Namespace: e.ns, Since: r.w.floor}, hasRevision(rev))
	if got := append(revisions(r.w.changes), revisions(w.changes)...); !slices.Equal(got, []int64{before, rev}) {
		t.Fatalf("revisions across the fault %v; want [%d %d]", got, before, rev)
	}
}

// Disconnect: a cut connection ends the watch with a retryable error (or
// the source rides it out), and a watch from the cursor misses nothing.
func testDisconnect(t *testing.T, e *env) {
	if e.Disconnect == nil {
		t.Skip("the harness cannot disconnect")
	}
	e.interrupted(t, e.Disconnect)
}

// Restart: the same, across a restart of the server.
func testRestart(t *testing.T, e *env) {
	if e.Restart == nil {
		t.Skip("the harness cannot restart")
	}
	e.interrupted(t, e.Restart)
}

// Compacted: a cursor below the compaction point is ErrCompacted (a
// *transport.CompactedError naming the point), not retryable; a snapshot
// then works and a watch from its cursor goes on.
func testCompacted(t *testing.T, e *env) {
	e.Publish(t, e.ns, raw("v", "0"), nil)
	old := e.Publish(t, e.ns, raw("v", "1", "gone", "true"), nil)
	head := e.Publish(t, e.ns, raw("v", "2"), []string{"gone"})
	e.Compact(t, head)
	// From below the revision before the compaction point: etcd keeps the
	// point's own change readable, so a cursor one below it may still be
	// served; two below, no store has the history.
	old--
	err := e.Source.Watch(e.ctx(t), transport.WatchRequest{Namespace: e.ns, Since: old}, func(transport.Event) error {
		return errors.New("transporttest: an event from a compacted cursor")
	})
	var ce *transport.CompactedError
	if !errors.Is(err, transport.ErrCompacted) || !errors.As(err, &ce) || ce.CompactRevision < head || transport.Retryable(err) {
		t.Fatalf("Watch from %d after compacting at %d = %v; want a *CompactedError at >= %d, not retryable", old, head, err, head)
	}
	snap := e.snapshot(t, e.ns)
	if snap.Revision != head || snap.CompactRevision < 0 {
		t.Fatalf("Snapshot after compaction = %+v; want revision %d", snap, head)
	}
	sameValues(t, "snapshot after compaction", values(t, snap), raw("v", "2"))
	next := e.Publish(t, e.ns, raw("v", "3"), nil)
	e.watchFor(t, "the publish after the resnapshot", transport.WatchRequest{Namespace: e.ns, Since: snap.Cursor}, hasRevision(next))
}

// CursorAhead: a cursor above the store's head is ErrCursorAhead, not
// retryable.
func testCursorAhead(t *testing.T, e *env) {
	e.Publish(t, e.ns, raw("v", "1"), nil)
	snap := e.snapshot(t, e.ns)
	err := e.Source.Watch(e.ctx(t), transport.WatchRequest{Namespace: e.ns, Since: snap.Cursor + 1000}, func(transport.Event) error {
		return errors.New("transporttest: an event for a cursor above the head")
	})
	if !errors.Is(err, transport.ErrCursorAhead) || transport.Retryable(err) {
		t.Fatalf("Watch from %d, above the head %d = %v; want ErrCursorAhead, not retryable", snap.Cursor+1000, snap.Cursor, err)
	}
}

// StoreReset: after the store is replaced, a snapshot names another store
// id, and a watch from the old cursor says the history changed: it fails
// with ErrCursorAhead, ErrStoreChanged or ErrCompacted, or delivers events
// of the new store id.
func testStoreReset(t *testing.T, e *env) {
	if e.Reset == nil {
		t.Skip("the harness cannot reset the store")
	}
	for i := range 5 {
		e.Publish(t, e.ns, raw("v", fmt.Sprint(i)), nil)
	}
	old := e.snapshot(t, e.ns)
	e.Reset(t)
	rev := e.Publish(t, e.ns, raw("v", `"new"`), nil)
	snap := e.snapshot(t, e.ns)
	if snap.StoreID == old.StoreID || snap.Revision != rev {
		t.Fatalf("Snapshot after a reset = %+v; want another store id than %s, revision %d", snap, old.StoreID, rev)
	}
	sameValues(t, "snapshot after a reset", values(t, snap), raw("v", `"new"`))
	var other string
	err := e.Source.Watch(e.ctx(t), transport.WatchRequest{Namespace: e.ns, Since: old.Cursor}, func(ev transport.Event) error {
		if ev.Change != nil && ev.Change.StoreID != old.StoreID {
			other = ev.Change.StoreID
		}
		if ev.Progress != nil && ev.Progress.StoreID != old.StoreID {
			other = ev.Progress.StoreID
		}
		if other != "" {
			return errStop
		}
		return nil
	})
	moved := errors.Is(err, transport.ErrCursorAhead) || errors.Is(err, transport.ErrStoreChanged) || errors.Is(err, transport.ErrCompacted)
	if !moved && other == "" {
		t.Fatalf("Watch from the old store's cursor %d = %v; want it to say the store changed", old.Cursor, err)
	}
	if moved && transport.Retryable(err) {
		t.Errorf("Watch from the old store's cursor = %v: retryable; want a resnapshot", err)
	}
}

// Values: every value reaches the client as its JSON text, as published:
// null is a value (present), not a delete; integers beyond 2^53 and beyond
// int64 keep their digits; strings, escapes and nested values are intact.
func testValues(t *testing.T, e *env) {
	vals := raw(
		"null", "null",
		"int53", "9007199254740993",
		"int64max", "9223372036854775807",
		"beyond-int64", "18446744073709551616",
		"below-int64", "-9223372036854775809",
		"neg-zero", "-0",
		"exp", "1e3",
		"float", "2.50",
		"duration", `"250ms"`,
		"number-not-duration", "250",
		"escaped", `"caf\u00e9 \"q\" \\ \n"`,
		"unicode", `"café ✓"`,
		"empty", `""`,
		"bool", "false",
		"nested", `{"a":[1,2.5,{"b":null}],"c":{}}`,
		"array", `[]`,
	)
	rev := e.Publish(t, e.ns, vals, nil)
	snap := e.snapshot(t, e.ns)
	if snap.Revision != rev {
		t.Fatalf("Snapshot at %d; want %d", snap.Revision, rev)
	}
	sameValues(t, "snapshot", values(t, snap), vals)

	rev2 := e.Publish(t, e.ns, raw("null2", "null", "int53", "9007199254740995"), []string{"null", "duration"})
	w := e.watchFor(t, "the change", transport.WatchRequest{Namespace: e.ns, Since: snap.Cursor}, hasRevision(rev2))
	c := w.changes[0]
	sameValues(t, "change puts (a null put is a put)", c.Puts, raw("null2", "null", "int53", "9007199254740995"))
	if d := slices.Sorted(slices.Values(c.Deletes)); !slices.Equal(d, []string{"duration", "null"}) {
		t.Errorf("change deletes %v; want [duration null]", c.Deletes)
	}
	after := e.snapshot(t, e.ns)
	want := raw()
	for k, v := range vals {
		want[k] = v
	}
	delete(want, "null")
	delete(want, "duration")
	want["null2"], want["int53"] = json.RawMessage("null"), json.RawMessage("9007199254740995")
	sameValues(t, "snapshot after the change", values(t, after), want)
}
