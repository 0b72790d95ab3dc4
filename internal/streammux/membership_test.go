package streammux

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/holdfast-dev/holdfast/internal/testutil"
	"github.com/holdfast-dev/holdfast/transport"
)

// waitLimit bounds every wait of these tests on a condition.
const waitLimit = 10 * time.Second

// scriptSource is a StreamSource whose stream carries what the test sends
// on events, to whichever attempt is open. It records every attempt's
// request and every single-namespace Watch (the fallback).
type scriptSource struct {
	events      chan transport.StreamEvent
	unsupported bool // WatchStream says the source has no stream

	mu      sync.Mutex
	reqs    []transport.StreamRequest
	singles []transport.WatchRequest
}

func newScriptSource() *scriptSource {
	return &scriptSource{events: make(chan transport.StreamEvent)}
}

func (s *scriptSource) Snapshot(context.Context, transport.SnapshotRequest) (*transport.Snapshot, error) {
	return nil, errors.New("no snapshots here")
}

func (s *scriptSource) Watch(ctx context.Context, req transport.WatchRequest, _ func(transport.Event) error) error {
	s.mu.Lock()
	s.singles = append(s.singles, req)
	s.mu.Unlock()
	<-ctx.Done()
	return ctx.Err()
}

func (s *scriptSource) WatchStream(ctx context.Context, req transport.StreamRequest, handle func(transport.StreamEvent) error) error {
	if s.unsupported {
		return transport.ErrStreamUnsupported
	}
	s.mu.Lock()
	s.reqs = append(s.reqs, req)
	s.mu.Unlock()
	for {
		select {
		case ev := <-s.events:
			if err := handle(ev); err != nil {
				return err
			}
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// carries is what the last stream attempt carried: "ns:since", sorted.
func (s *scriptSource) carries() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.reqs) == 0 {
		return ""
	}
	var out []string
	for _, w := range s.reqs[len(s.reqs)-1].Namespaces {
		out = append(out, w.Namespace+":"+strconv.FormatInt(w.Since, 10))
	}
	slices.Sort(out)
	return strings.Join(out, " ")
}

func (s *scriptSource) send(t *testing.T, ev transport.StreamEvent) {
	t.Helper()
	select {
	case s.events <- ev:
	case <-time.After(waitLimit):
		t.Fatalf("no stream open to send %+v", ev)
	}
}

// startMux returns a multiplexer of src and the context its watches
// derive from, as a client's syncers do; it stops at the test's end.
func startMux(t *testing.T, src transport.StreamSource) (*Mux, context.Context, context.CancelFunc) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	m := New(ctx, src, slog.New(slog.DiscardHandler))
	t.Cleanup(func() { cancel(); m.Wait() })
	return m, ctx, cancel
}

// watcher is one namespace's Watch through a View, on its own goroutine.
type watcher struct {
	events chan transport.Event
	done   chan error
	cancel context.CancelFunc
}

func watch(t *testing.T, ctx context.Context, m *Mux, src transport.Source, ns string, since int64) *watcher {
	t.Helper()
	ctx, cancel := context.WithCancel(ctx)
	w := &watcher{events: make(chan transport.Event, 64), done: make(chan error, 1), cancel: cancel}
	go func() {
		w.done <- View{Src: src, Mux: m}.Watch(ctx, transport.WatchRequest{Namespace: ns, Since: since}, func(ev transport.Event) error {
			w.events <- ev
			return nil
		})
	}()
	t.Cleanup(func() { cancel(); <-w.done })
	return w
}

func (w *watcher) next(t *testing.T) transport.Event {
	t.Helper()
	select {
	case ev := <-w.events:
		return ev
	case err := <-w.done:
		t.Fatalf("the watch ended: %v", err)
	case <-time.After(waitLimit):
		t.Fatal("no event")
	}
	return transport.Event{}
}

func (w *watcher) end(t *testing.T) error {
	t.Helper()
	select {
	case err := <-w.done:
		w.done <- err // for the cleanup
		return err
	case <-time.After(waitLimit):
		t.Fatal("the watch did not end")
	}
	return nil
}

func change(ns string, rev int64) transport.StreamEvent {
	return transport.StreamEvent{Change: &transport.ChangeSet{Namespace: ns, Revision: rev, StoreID: "s"}}
}

// A namespace that joins restarts the stream with every member at its
// cursor; each change reaches its own namespace's watch, and a progress
// reaches every member.
func TestJoinCarriesEveryNamespaceOnOneStream(t *testing.T) {
	src := newScriptSource()
	m, ctx, _ := startMux(t, src)
	a := watch(t, ctx, m, src, "a", 0)
	testutil.Eventually(t, waitLimit, func() bool { return src.carries() == "a:0" }, "a stream of a")
	b := watch(t, ctx, m, src, "b", 5)
	testutil.Eventually(t, waitLimit, func() bool { return src.carries() == "a:0 b:5" }, "a stream of a and b")

	src.send(t, change("b", 6))
	src.send(t, change("a", 7))
	if ev := b.next(t); ev.Change == nil || ev.Change.Namespace != "b" || ev.Change.Revision != 6 {
		t.Fatalf("b got %+v, want its change at 6", ev)
	}
	if ev := a.next(t); ev.Change == nil || ev.Change.Namespace != "a" || ev.Change.Revision != 7 {
		t.Fatalf("a got %+v, want its change at 7", ev)
	}
	src.send(t, transport.StreamEvent{Progress: &transport.StreamProgress{StoreID: "s", Cursor: 9}})
	for name, w := range map[string]*watcher{"a": a, "b": b} {
		ev := w.next(t)
		if ev.Progress == nil || ev.Progress.Namespace != name || ev.Progress.Cursor != 9 {
			t.Fatalf("%s got %+v, want a progress at 9", name, ev)
		}
	}
}

// A namespace that leaves restarts the stream without it, from the others'
// cursors; a change of it still in flight is dropped.
func TestLeaveRestartsTheStreamWithoutTheNamespace(t *testing.T) {
	src := newScriptSource()
	m, ctx, _ := startMux(t, src)
	a := watch(t, ctx, m, src, "a", 0)
	b := watch(t, ctx, m, src, "b", 0)
	testutil.Eventually(t, waitLimit, func() bool { return src.carries() == "a:0 b:0" }, "a stream of a and b")
	src.send(t, change("a", 1))
	if ev := a.next(t); ev.Change == nil || ev.Change.Revision != 1 {
		t.Fatalf("a got %+v", ev)
	}

	b.cancel() // the namespace closes: its syncer's watch ends, then it leaves
	if err := b.end(t); !errors.Is(err, context.Canceled) {
		t.Fatalf("b's watch ended with %v, want context.Canceled", err)
	}
	m.Leave("b")
	testutil.Eventually(t, waitLimit, func() bool { return src.carries() == "a:1" }, "a stream of a alone, from its cursor")
	src.send(t, change("b", 2))
	src.send(t, change("a", 3))
	if ev := a.next(t); ev.Change == nil || ev.Change.Revision != 3 {
		t.Fatalf("a got %+v, want its change at 3", ev)
	}
}

// A namespace the stream ends (compacted, not found) has its watch ended
// with the stream's error; the others keep theirs.
func TestEndedNamespaceEndsOnlyItsWatch(t *testing.T) {
	src := newScriptSource()
	m, ctx, _ := startMux(t, src)
	a := watch(t, ctx, m, src, "a", 0)
	b := watch(t, ctx, m, src, "b", 0)
	testutil.Eventually(t, waitLimit, func() bool { return src.carries() == "a:0 b:0" }, "a stream of a and b")
	src.send(t, transport.StreamEvent{Ended: &transport.NamespaceEnded{Namespace: "b", Err: transport.ErrCompacted}})
	if err := b.end(t); !errors.Is(err, transport.ErrCompacted) {
		t.Fatalf("b's watch ended with %v, want ErrCompacted", err)
	}
	src.send(t, change("a", 4))
	if ev := a.next(t); ev.Change == nil || ev.Change.Revision != 4 {
		t.Fatalf("a got %+v, want its change at 4", ev)
	}
}

// Closing (the client's context ends) ends every watch and the stream's
// goroutine; Wait returns, and goleak (TestMain) finds nothing running.
func TestCloseEndsTheStreamAndEveryWatch(t *testing.T) {
	src := newScriptSource()
	m, ctx, cancel := startMux(t, src)
	a := watch(t, ctx, m, src, "a", 0)
	b := watch(t, ctx, m, src, "b", 0)
	testutil.Eventually(t, waitLimit, func() bool { return src.carries() == "a:0 b:0" }, "a stream of a and b")
	cancel()
	for name, w := range map[string]*watcher{"a": a, "b": b} {
		if err := w.end(t); !errors.Is(err, context.Canceled) {
			t.Fatalf("%s's watch ended with %v, want context.Canceled", name, err)
		}
	}
	done := make(chan struct{})
	go func() { m.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(waitLimit):
		t.Fatal("Wait did not return after the context ended")
	}
}

// A source without a stream: every namespace watches alone, from where
// it was, and the stream is not tried again at once.
func TestSourceWithoutAStreamFallsBackToSingleWatches(t *testing.T) {
	src := newScriptSource()
	src.unsupported = true
	m, ctx, _ := startMux(t, src)
	watch(t, ctx, m, src, "a", 3)
	testutil.Eventually(t, waitLimit, func() bool {
		src.mu.Lock()
		defer src.mu.Unlock()
		return slices.Contains(src.singles, transport.WatchRequest{Namespace: "a", Since: 3})
	}, "a's own watch from 3")
	if !m.fallback() {
		t.Fatal("the multiplexer would try the stream again at once")
	}
	watch(t, ctx, m, src, "b", 4)
	testutil.Eventually(t, waitLimit, func() bool {
		src.mu.Lock()
		defer src.mu.Unlock()
		return slices.Contains(src.singles, transport.WatchRequest{Namespace: "b", Since: 4})
	}, "b's own watch from 4")
}
