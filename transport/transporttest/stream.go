package transporttest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/holdfast-dev/holdfast/transport"
)

var streamCases = []testCase{
	{"StreamNamespaces", testStreamNamespaces},
	{"StreamInvalidName", testStreamInvalidName},
	{"StreamCursorAhead", testStreamCursorAhead},
	{"StreamCompacted", testStreamCompacted},
	{"StreamPromptProgress", testStreamPromptProgress},
	{"StreamDuplicate", testStreamDuplicate},
}

// streamSource is the Store's stream, or skips t.
func (e *env) streamSource(t *testing.T) transport.StreamSource {
	t.Helper()
	if e.Stream != nil {
		return e.Stream
	}
	if s, ok := e.Source.(transport.StreamSource); ok {
		return s
	}
	t.Skip("the source has no multi-namespace watch")
	return nil
}

// streamWatcher checks every event of one stream against the protocol's
// invariants and records them.
type streamWatcher struct {
	req     transport.StreamRequest
	floor   map[string]int64 // namespaces still in the stream: their cursor
	cursor  int64            // the last progress
	changes map[string][]*transport.ChangeSet
	ended   map[string]error
	prog    int
	bad     error
}

func newStreamWatcher(req transport.StreamRequest) *streamWatcher {
	w := &streamWatcher{req: req, floor: map[string]int64{}, cursor: -1,
		changes: map[string][]*transport.ChangeSet{}, ended: map[string]error{}}
	for _, r := range req.Namespaces {
		w.floor[r.Namespace] = r.Since
	}
	return w
}

func (w *streamWatcher) check(ev transport.StreamEvent) error {
	fail := func(format string, args ...any) error {
		w.bad = fmt.Errorf("stream of %d namespaces: "+format, append([]any{len(w.req.Namespaces)}, args...)...)
		return w.bad
	}
	n := 0
	for _, set := range []bool{ev.Change != nil, ev.Progress != nil, ev.Ended != nil} {
		if set {
			n++
		}
	}
	if n != 1 {
		return fail("an event with %d of change, progress and ended set; want exactly one", n)
	}
	switch {
	case ev.Change != nil:
		c := ev.Change
		f, ok := w.floor[c.Namespace]
		switch {
		case !ok:
			return fail("change %+v of a namespace not in the stream (or ended)", c)
		case c.StoreID == "":
			return fail("change %+v without a store id", c)
		case c.Revision <= max(f, w.cursor):
			return fail("change of %q at revision %d, at or below its cursor %d", c.Namespace, c.Revision, max(f, w.cursor))
		case c.PrevRevision < 0 || c.PrevRevision >= c.Revision:
			return fail("change of %q at %d with prev_revision %d", c.Namespace, c.Revision, c.PrevRevision)
		}
		if prev := w.changes[c.Namespace]; len(prev) > 0 && c.PrevRevision != prev[len(prev)-1].Revision {
			return fail("change of %q at %d chains on %d; the previous change was %d (one is missing)",
				c.Namespace, c.Revision, c.PrevRevision, prev[len(prev)-1].Revision)
		}
		w.floor[c.Namespace] = c.Revision
		w.changes[c.Namespace] = append(w.changes[c.Namespace], c)
	case ev.Progress != nil:
		p := ev.Progress
		if p.StoreID == "" || p.Cursor < w.cursor {
			return fail("progress %+v after progress at %d; want a store id, no step back", p, w.cursor)
		}
		w.cursor = p.Cursor
		w.prog++
	default:
		d := ev.Ended
		if _, ok := w.floor[d.Namespace]; !ok || d.Err == nil {
			return fail("ended %q (%v): not in the stream, ended twice, or no error", d.Namespace, d.Err)
		}
		delete(w.floor, d.Namespace)
		w.ended[d.Namespace] = d.Err
	}
	return nil
}

// watchStream runs one stream until until holds (checked after each event,
// under the watcher's lock) and returns the watcher. A stream the source
// does not offer skips t, unless the Store requires it.
func (e *env) watchStream(t *testing.T, req transport.StreamRequest, until func(w *streamWatcher) bool) *streamWatcher {
	t.Helper()
	src := e.streamSource(t)
	w := newStreamWatcher(req)
	var mu sync.Mutex
	err := src.WatchStream(e.ctx(t), req, func(ev transport.StreamEvent) error {
		mu.Lock()
		defer mu.Unlock()
		if err := w.check(ev); err != nil {
			return err
		}
		if until(w) {
			return errStop
		}
		return nil
	})
	mu.Lock()
	defer mu.Unlock()
	if w.bad != nil {
		t.Fatal(w.bad)
	}
	if errors.Is(err, transport.ErrStreamUnsupported) && !e.RequireStream {
		t.Skipf("the source does not offer the multi-namespace watch here: %v", err)
	}
	if !errors.Is(err, errStop) {
		t.Fatalf("WatchStream ended with %v before the case saw what it waits for (changes %v, ended %v, %d progress events)",
			err, streamRevisions(w), w.ended, w.prog)
	}
	return w
}

func streamRevisions(w *streamWatcher) map[string][]int64 {
	out := map[string][]int64{}
	for ns, cs := range w.changes {
		out[ns] = revisions(cs)
	}
	return out
}

// hasAll holds once every namespace of want has its last revision.
func hasAll(want map[string][]int64) func(w *streamWatcher) bool {
	return func(w *streamWatcher) bool {
		for ns, revs := range want {
			cs := w.changes[ns]
			if len(cs) == 0 || cs[len(cs)-1].Revision < revs[len(revs)-1] {
				return false
			}
		}
		return true
	}
}

// StreamNamespaces: 20 namespaces on one stream, each from its snapshot's
// cursor, each get exactly their changes, in order, backlog and live.
func testStreamNamespaces(t *testing.T, e *env) {
	e.streamSource(t)
	var req transport.StreamRequest
	want := map[string][]int64{}
	for i := range 20 {
		ns := fmt.Sprintf("%s-%02d", e.ns, i)
		e.Publish(t, ns, raw("v", "0"), nil)
	}
	for i := range 20 {
		ns := fmt.Sprintf("%s-%02d", e.ns, i)
		req.Namespaces = append(req.Namespaces, transport.WatchRequest{Namespace: ns, Since: e.snapshot(t, ns).Cursor})
	}
	for round := 1; round <= 2; round++ {
		for _, r := range req.Namespaces {
			want[r.Namespace] = append(want[r.Namespace], e.Publish(t, r.Namespace, raw("v", fmt.Sprint(round)), nil))
		}
	}
	var once sync.Once
	w := e.watchStream(t, req, func(w *streamWatcher) bool {
		if !hasAll(want)(w) {
			return false
		}
		once.Do(func() { // live: the stream is open
			for _, r := range req.Namespaces[:5] {
				want[r.Namespace] = append(want[r.Namespace], e.Publish(t, r.Namespace, raw("v", "3"), nil))
			}
		})
		return hasAll(want)(w)
	})
	got := streamRevisions(w)
	for ns, revs := range want {
		if !slices.Equal(got[ns], revs) {
			t.Errorf("%s: changes at %v; want %v", ns, got[ns], revs)
		}
	}
	if len(got) != len(want) || len(w.ended) != 0 {
		t.Errorf("changes of %d namespaces, %d ended (%v); want %d, none", len(got), len(w.ended), w.ended, len(want))
	}
}

// pair opens a stream of a healthy namespace and a troubled one, and
// checks that the troubled one ends with an error that passes ok while the
// healthy one gets a publish made after the end.
func (e *env) pair(t *testing.T, troubled transport.WatchRequest, what string, ok func(error) bool) {
	e.streamSource(t)
	good := e.ns + "-good"
	e.Publish(t, good, raw("v", "0"), nil)
	req := transport.StreamRequest{Namespaces: []transport.WatchRequest{
		{Namespace: good, Since: e.snapshot(t, good).Cursor}, troubled}}
	var rev int64
	w := e.watchStream(t, req, func(w *streamWatcher) bool {
		if _, ended := w.ended[troubled.Namespace]; ended && rev == 0 {
			rev = e.Publish(t, good, raw("v", "1"), nil)
		}
		cs := w.changes[good]
		return rev > 0 && len(cs) > 0 && cs[len(cs)-1].Revision >= rev
	})
	if err := w.ended[troubled.Namespace]; !ok(err) {
		t.Errorf("%q ended with %v; want %s", troubled.Namespace, err, what)
	}
	if len(w.ended) != 1 || len(w.changes[troubled.Namespace]) != 0 {
		t.Errorf("ended %v, changes %v; want only %q ended, with no change", w.ended, streamRevisions(w), troubled.Namespace)
	}
}

// StreamInvalidName: an invalid name among valid ones ends, alone.
func testStreamInvalidName(t *testing.T, e *env) {
	e.pair(t, transport.WatchRequest{Namespace: "Not/A Namespace"}, "ErrInvalidNamespace, not retryable", func(err error) bool {
		return errors.Is(err, transport.ErrInvalidNamespace) && !transport.Retryable(err)
	})
}

// StreamCursorAhead: one namespace's cursor above the head ends it, alone.
func testStreamCursorAhead(t *testing.T, e *env) {
	ns := e.ns + "-ahead"
	e.Publish(t, ns, raw("v", "1"), nil)
	snap := e.snapshot(t, ns)
	e.pair(t, transport.WatchRequest{Namespace: ns, Since: snap.Cursor + 1000}, "ErrCursorAhead, not retryable", func(err error) bool {
		return errors.Is(err, transport.ErrCursorAhead) && !transport.Retryable(err)
	})
}

// StreamCompacted: one namespace's cursor compacted away ends it, alone,
// with a *CompactedError naming the point.
func testStreamCompacted(t *testing.T, e *env) {
	ns := e.ns + "-old"
	e.Publish(t, ns, raw("v", "0"), nil)
	old := e.Publish(t, ns, raw("v", "1"), nil)
	head := e.Publish(t, ns, raw("v", "2"), nil)
	e.Compact(t, head)
	e.pair(t, transport.WatchRequest{Namespace: ns, Since: old - 1}, "a *CompactedError at >= the point, not retryable", func(err error) bool {
		var ce *transport.CompactedError
		return errors.As(err, &ce) && ce.CompactRevision >= head && !transport.Retryable(err)
	})
}

// StreamPromptProgress: a publish to a namespace the stream does not
// carry moves the stream's progress past it within 1 s.
func testStreamPromptProgress(t *testing.T, e *env) {
	if !e.PromptProgress {
		t.Skip("the harness does not promise prompt progress")
	}
	e.streamSource(t)
	e.Publish(t, e.ns, raw("v", "0"), nil)
	req := transport.StreamRequest{Namespaces: []transport.WatchRequest{{Namespace: e.ns, Since: e.snapshot(t, e.ns).Cursor}}}
	var rev int64
	var at time.Time
	var took time.Duration
	e.watchStream(t, req, func(w *streamWatcher) bool {
		if rev == 0 && w.prog > 0 {
			rev, at = e.Publish(t, e.ns+"-elsewhere", raw("x", "1"), nil), time.Now()
		}
		if rev > 0 && w.cursor >= rev {
			took = time.Since(at)
			return true
		}
		return false
	})
	if took > time.Second {
		t.Errorf("progress past a publish elsewhere after %v; want within 1 s", took)
	}
}

// StreamDuplicate: a namespace named twice fails the whole request with
// an error wrapping ErrBadRequest, and delivers nothing.
func testStreamDuplicate(t *testing.T, e *env) {
	src := e.streamSource(t)
	e.Publish(t, e.ns, raw("v", "0"), nil)
	req := transport.StreamRequest{Namespaces: []transport.WatchRequest{{Namespace: e.ns}, {Namespace: e.ns + "-b"}, {Namespace: e.ns, Since: 1}}}
	ctx, cancel := context.WithTimeout(e.ctx(t), e.Timeout)
	defer cancel()
	n := 0
	err := src.WatchStream(ctx, req, func(transport.StreamEvent) error { n++; return errStop })
	if errors.Is(err, transport.ErrStreamUnsupported) && !e.RequireStream {
		t.Skipf("the source does not offer the multi-namespace watch here: %v", err)
	}
	if !errors.Is(err, transport.ErrBadRequest) || n != 0 {
		t.Fatalf("WatchStream naming %q twice = %v after %d events; want ErrBadRequest, no event", e.ns, err, n)
	}
}
