package syncer

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/holdfast-dev/holdfast/internal/snapshot"
	"github.com/holdfast-dev/holdfast/internal/testutil"
	"github.com/holdfast-dev/holdfast/transport"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// recorder is a Sink that keeps every report.
type recorder struct {
	mu      sync.Mutex
	applied []Update
	failed  []error
	notify  chan struct{}
}

func newRecorder() *recorder { return &recorder{notify: make(chan struct{}, 100)} }

func (r *recorder) Applied(u Update) {
	r.mu.Lock()
	r.applied = append(r.applied, u)
	r.mu.Unlock()
	r.notify <- struct{}{}
}
func (r *recorder) Confirmed(Position) {}
func (r *recorder) Failed(err error) {
	r.mu.Lock()
	r.failed = append(r.failed, err)
	r.mu.Unlock()
}
func (r *recorder) Rejected(int64, error)            {}
func (r *recorder) WouldReject(int64, string, error) {}

// movingSource serves store "s<k>" at revision 1 on its k-th snapshot and
// refuses every watch with 400 cursor_ahead naming the next store: a
// server whose store id changes all the time.
type movingSource struct {
	snapshots atomic.Int64
	watches   atomic.Int64
}

func (s *movingSource) Snapshot(_ context.Context, req transport.SnapshotRequest) (*transport.Snapshot, error) {
	k := s.snapshots.Add(1)
	return &transport.Snapshot{Namespace: req.Namespace, StoreID: "s" + string(rune('0'+k)), Revision: 1, Cursor: 1, Values: []byte(`{"k":1}`)}, nil
}

func (s *movingSource) Watch(context.Context, transport.WatchRequest, func(transport.Event) error) error {
	s.watches.Add(1)
	return &transport.StatusError{StatusCode: http.StatusBadRequest, Code: transport.CodeCursorAhead, StoreID: "other", Err: transport.ErrCursorAhead}
}

// TestStoreMoveResnapshotsAtOnceButNotInALoop: the first answer that the
// server's history moved (400 cursor_ahead, another store id) resnapshots
// at once, however long the backoff; a second before any stream delivered
// waits the backoff, so a server that always answers so is paced.
func TestStoreMoveResnapshotsAtOnceButNotInALoop(t *testing.T) {
	src, sink := &movingSource{}, newRecorder()
	s := New(Config{
		Namespace: "ns", Source: src, Sink: sink,
		Backoff:      Backoff{Initial: time.Hour, Max: time.Hour, Unauthorized: time.Hour},
		FetchTimeout: time.Second, Backstop: time.Hour,
	})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); s.Run(ctx) }()
	defer func() { cancel(); <-done }()

	for i := range 2 { // the initial snapshot, then the one made at once
		select {
		case <-sink.notify:
		case <-time.After(10 * time.Second):
			t.Fatalf("%d snapshots applied; the store move did not resnapshot at once", i)
		}
	}
	sink.mu.Lock()
	second := sink.applied[1]
	sink.mu.Unlock()
	if second.Reset != ResetStore || second.Snapshot.StoreID() != "s2" {
		t.Errorf("second apply: reset %q, store %s; want %q, s2", second.Reset, second.Snapshot.StoreID(), ResetStore)
	}
	// The second move meets the hour-long backoff: no third snapshot.
	testutil.Consistently(t, 300*time.Millisecond, func() error {
		if n := src.snapshots.Load(); n > 2 {
			return fmt.Errorf("%d snapshots", n)
		}
		return nil
	}, "a server that always moves its store is answered in a loop")
	if w := src.watches.Load(); w != 2 {
		t.Errorf("%d watches; want 2 (one per snapshot)", w)
	}
}

// behindSource serves revision 3 of store "s" (the client applied 5),
// unconfirmed while unconfirmed is set: a relay cut off from its upstream
// that is behind the client.
type behindSource struct {
	unconfirmed atomic.Bool
	snapshots   atomic.Int64
}

func (b *behindSource) Snapshot(_ context.Context, req transport.SnapshotRequest) (*transport.Snapshot, error) {
	b.snapshots.Add(1)
	return &transport.Snapshot{Namespace: req.Namespace, StoreID: "s", Revision: 3, Cursor: 3, Values: []byte(`{"k":3}`),
		Unconfirmed: b.unconfirmed.Load()}, nil
}

func (b *behindSource) Watch(ctx context.Context, _ transport.WatchRequest, _ func(transport.Event) error) error {
	<-ctx.Done()
	return ctx.Err()
}

// TestUnconfirmedSnapshotIsNoProofOfRewrittenHistory: a snapshot behind
// the applied data, of the same store, from a server that says its
// upstream is not confirming it, is never taken for rewritten history,
// however long past the grace; once confirmed, the grace decides as
// before.
func TestUnconfirmedSnapshotIsNoProofOfRewrittenHistory(t *testing.T) {
	src := &behindSource{}
	src.unconfirmed.Store(true)
	rec := newRecorder()
	s := New(Config{Namespace: "app", Source: src, Sink: rec, RewriteGrace: 50 * time.Millisecond,
		Backoff: Backoff{Initial: 5 * time.Millisecond, Max: 10 * time.Millisecond}, FetchTimeout: time.Second, Backstop: time.Hour})
	seed, err := snapshot.Build("app", "s", 5, map[string]json.RawMessage{"k": json.RawMessage(`5`)})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Seed(seed, 5); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); s.Run(ctx) }()
	defer func() { cancel(); <-done }()

	// Well past the grace, many snapshots later: still nothing applied.
	if !testutil.Wait(5*time.Second, func() bool { return src.snapshots.Load() >= 10 }) {
		t.Fatalf("%d snapshots", src.snapshots.Load())
	}
	rec.mu.Lock()
	n := len(rec.applied)
	rec.mu.Unlock()
	if n != 0 {
		t.Fatalf("an unconfirmed snapshot behind the floor was applied as rewritten history")
	}
	src.unconfirmed.Store(false)
	select {
	case <-rec.notify:
	case <-time.After(5 * time.Second):
		t.Fatal("a confirmed snapshot behind the floor was not taken after the grace")
	}
	rec.mu.Lock()
	defer rec.mu.Unlock()
	if u := rec.applied[0]; u.Snapshot.Revision() != 3 || u.Reset != ResetHistory {
		t.Fatalf("applied %d (reset %q), want 3 as rewritten history", u.Snapshot.Revision(), u.Reset)
	}
}
