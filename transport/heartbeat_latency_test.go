package transport_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/holdfast-dev/holdfast/internal/fakeserver"
	"github.com/holdfast-dev/holdfast/transport"
)

// The advertised heartbeat says how often a quiet stream carries an event;
// it says nothing of how long a reply takes to start (network latency, a
// large snapshot being built). A client that learned a short heartbeat
// (100ms: a derived idle timeout of 500ms) must still get a snapshot, and
// a watch, from a server whose replies take 800ms to start, as it did
// with the 15s default before the heartbeat was advertised.
func TestDerivedIdleTimeoutToleratesLatency(t *testing.T) {
	ignore := goleak.IgnoreCurrent()
	defer goleak.VerifyNone(t, ignore)
	srv, err := fakeserver.Start(fakeserver.WithHeartbeat(100 * time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	rev, err := srv.Publish("app", map[string]any{"k": 1})
	if err != nil {
		t.Fatal(err)
	}
	src, err := transport.NewHTTPSource(srv.URL())
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if _, err := src.Snapshot(ctx, transport.SnapshotRequest{Namespace: "app"}); err != nil {
		t.Fatal(err)
	}
	if got := src.IdleTimeout(); got != transport.MinDerivedIdleTimeout {
		t.Fatalf("IdleTimeout %v after a 100ms heartbeat; want %v", got, transport.MinDerivedIdleTimeout)
	}

	srv.SetLatency(800 * time.Millisecond)
	defer srv.SetLatency(0)
	if _, err := src.Snapshot(ctx, transport.SnapshotRequest{Namespace: "app"}); err != nil {
		t.Errorf("snapshot from a server 800ms away: %v", err)
	}
	got := 0
	err = src.Watch(ctx, transport.WatchRequest{Namespace: "app", Since: rev}, func(transport.Event) error {
		if got++; got == 3 {
			return context.Canceled
		}
		return nil
	})
	if !errors.Is(err, context.Canceled) {
		t.Errorf("watch of a server 800ms away ended with %v after %d events; want events", err, got)
	}
}
