package acks

import (
	"context"
	"log/slog"
	"strconv"
	"testing"
	"time"

	"github.com/holdfast-dev/holdfast/internal/syncer"
	"github.com/holdfast-dev/holdfast/internal/testutil"
	"github.com/holdfast-dev/holdfast/transport"
)

// A relay's Queue keeps each client's last report of each kind and
// namespace, and Resend tells them again (but those of clients gone,
// which it forgets), each once.
func TestQueueResendsKeptReports(t *testing.T) {
	up := &picky{}
	q := New(up, slog.New(slog.DiscardHandler), "relay-1")
	q.Keep()
	ctx, cancel := context.WithCancel(context.Background())
	q.Start(ctx, syncer.Backoff{Initial: time.Millisecond, Max: 10 * time.Millisecond})
	defer q.Wait()
	defer cancel()
	for i := range 3 {
		id := "c" + strconv.Itoa(i)
		q.Forward(transport.Ack{ClientID: id, Namespace: "app", Revision: 1, Status: transport.AckApplied}, true)
		q.Forward(transport.Ack{ClientID: id, Namespace: "app", Revision: 2, Status: transport.AckApplied, Rollout: "r1"}, true)
	}
	q.Forward(transport.Ack{ClientID: "c0", Namespace: "app", Revision: 3, Status: transport.AckRejected, Error: "bad"}, true)
	q.Forward(transport.Ack{ClientID: "c0", Namespace: "other", Revision: 1, Status: transport.AckApplied}, true)
	// Every last report delivered (each client's in the order made):
	// nothing of them waits any more.
	testutil.Eventually(t, 10*time.Second, func() bool {
		up.mu.Lock()
		defer up.mu.Unlock()
		last := 0
		for _, a := range up.got {
			if a.Revision == 2 || a.Status == transport.AckRejected || a.Namespace == "other" {
				last++
			}
		}
		return last == 5
	}, "the reports delivered")
	if n, evicted := q.Kept(); n != 5 || evicted != 0 {
		t.Fatalf("kept %d, evicted %d; want 5, 0", n, evicted)
	}
	up.mu.Lock()
	up.got = nil
	up.mu.Unlock()
	if n := q.Resend("app", true, func(c string) bool { return c == "c2" }); n != 3 {
		t.Fatalf("Resend queued %d, want 3 (c0's ack and nack, c1's ack)", n)
	}
	testutil.Eventually(t, 10*time.Second, func() bool { return len(up.clients()) == 3 }, "the reports told again")
	up.mu.Lock()
	for _, a := range up.got {
		if a.Namespace != "app" || a.ClientID == "c2" || a.Status == transport.AckApplied && (a.Revision != 2 || a.Rollout != "r1") {
			t.Errorf("told again %+v", a)
		}
	}
	up.mu.Unlock()
	if n, _ := q.Kept(); n != 4 {
		t.Fatalf("kept %d after c2 left, want 4", n)
	}
}

// Past maxKept, keeping one more report evicts another, counted.
func TestQueueKeptIsBounded(t *testing.T) {
	q := New(&picky{}, slog.New(slog.DiscardHandler), "relay-1")
	q.Keep()
	q.mu.Lock()
	for i := range maxKept + 10 {
		q.keepLocked(transport.Ack{ClientID: "c" + strconv.Itoa(i), Namespace: "app", Revision: 1, Status: transport.AckApplied})
	}
	q.mu.Unlock()
	if n, evicted := q.Kept(); n != maxKept || evicted != 10 {
		t.Fatalf("kept %d, evicted %d; want %d, 10", n, evicted, maxKept)
	}
}
