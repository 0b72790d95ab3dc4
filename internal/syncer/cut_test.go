package syncer

import (
	"context"
	"errors"
	"io"
	"sync/atomic"
	"testing"
	"time"

	"github.com/holdfast-dev/holdfast/internal/testutil"
	"github.com/holdfast-dev/holdfast/transport"
)

// cuttingSource serves store "s" at revision 1. Its first watches each
// deliver a progress and then end as a cut connection does (EOF); after
// cuts of them, a watch fails before delivering anything (the server
// gone).
type cuttingSource struct {
	cuts    int64
	watches atomic.Int64
}

func (c *cuttingSource) Snapshot(_ context.Context, req transport.SnapshotRequest) (*transport.Snapshot, error) {
	return &transport.Snapshot{Namespace: req.Namespace, StoreID: "s", Revision: 1, Cursor: 1, Values: []byte(`{"k":1}`)}, nil
}

func (c *cuttingSource) Watch(_ context.Context, req transport.WatchRequest, handle func(transport.Event) error) error {
	if c.watches.Add(1) > c.cuts {
		return errors.New("dial tcp 127.0.0.1:1: connect: connection refused")
	}
	if err := handle(transport.Event{Progress: &transport.Progress{Namespace: req.Namespace, StoreID: "s", Revision: 1, Cursor: 1}}); err != nil {
		return err
	}
	return io.ErrUnexpectedEOF
}

// TestALiveWatchCutIsNotAFailure: a watch that delivered and then was
// cut (a proxy's read timeout shorter than the heartbeat) resumes from its
// cursor without reporting a failure, however often; a watch that fails
// before delivering anything is reported.
func TestALiveWatchCutIsNotAFailure(t *testing.T) {
	src, sink := &cuttingSource{cuts: 5}, newRecorder()
	s := New(Config{Namespace: "ns", Source: src, Sink: sink,
		Backoff: Backoff{Initial: time.Millisecond, Max: 2 * time.Millisecond}, FetchTimeout: time.Second, Backstop: time.Hour})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); s.Run(ctx) }()
	defer func() { cancel(); <-done }()

	testutil.Eventually(t, 10*time.Second, func() bool {
		sink.mu.Lock()
		defer sink.mu.Unlock()
		return len(sink.failed) > 0
	}, "the failure of the watch that delivered nothing")
	sink.mu.Lock()
	defer sink.mu.Unlock()
	if w := src.watches.Load(); w < 6 {
		t.Fatalf("a failure reported after %d watches; want none of the 5 cut after delivering", w)
	}
	if got := sink.failed[0].Error(); got != "dial tcp 127.0.0.1:1: connect: connection refused" {
		t.Errorf("the first failure reported: %q, want the failed dial", got)
	}
}
