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

// A client given no idle timeout takes it from the heartbeat the server
// advertises: against a server beating every 200ms, a black-holed SSE
// stream is abandoned after about three heartbeats, not DefaultIdleTimeout
// (15s). A long-poll is not paced by heartbeats (the server answers after
// its wait): it keeps the default past its wait, so that a slow network
// is not taken for a dead one.
func TestIdleTimeoutFollowsAdvertisedHeartbeat(t *testing.T) {
	ignore := goleak.IgnoreCurrent()
	defer goleak.VerifyNone(t, ignore)
	const hb = 200 * time.Millisecond
	srv, err := fakeserver.Start(fakeserver.WithHeartbeat(hb))
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	rev, err := srv.Publish("app", map[string]any{"k": 1})
	if err != nil {
		t.Fatal(err)
	}
	for _, mode := range []transport.WatchMode{transport.WatchSSE} {
		t.Run(mode.String(), func(t *testing.T) {
			srv.SetBlackhole(false)
			src, err := transport.NewHTTPSource(srv.URL(), transport.WithWatchMode(mode), transport.WithLongPollWait(hb))
			if err != nil {
				t.Fatal(err)
			}
			defer src.Close()
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			var holed time.Time
			err = src.Watch(ctx, transport.WatchRequest{Namespace: "app", Since: rev}, func(ev transport.Event) error {
				if ev.Progress != nil && holed.IsZero() {
					if i := src.ServerInfo(); i.Protocol != transport.ProtocolVersion || i.Heartbeat != hb {
						t.Errorf("ServerInfo = %+v; want protocol %d, heartbeat %v", i, transport.ProtocolVersion, hb)
					}
					srv.SetBlackhole(true)
					holed = time.Now()
				}
				return nil
			})
			took := time.Since(holed)
			if !errors.Is(err, transport.ErrStreamIdle) || holed.IsZero() {
				t.Fatalf("Watch = %v; want ErrStreamIdle after the black hole", err)
			}
			// Three heartbeats; the upper bound leaves room for a loaded
			// machine, far below the 15s default.
			want := 3 * hb
			if took < want-hb/2 || took > want+3*time.Second {
				t.Errorf("black hole noticed after %v; want about %v (idle timeout %v)", took, want, src.IdleTimeout())
			}
			if got := src.IdleTimeout(); got != 3*hb {
				t.Errorf("IdleTimeout = %v, want %v", got, 3*hb)
			}
		})
	}
	srv.SetBlackhole(false)

	lp, err := transport.NewHTTPSource(srv.URL(), transport.WithWatchMode(transport.WatchLongPoll), transport.WithLongPollWait(hb))
	if err != nil {
		t.Fatal(err)
	}
	defer lp.Close()
	if _, err := lp.Snapshot(context.Background(), transport.SnapshotRequest{Namespace: "app"}); err != nil {
		t.Fatal(err)
	}
	if lp.IdleTimeout() != 3*hb || lp.QuietLimit() != hb+transport.DefaultIdleTimeout {
		t.Errorf("long-poll: IdleTimeout %v, QuietLimit %v; want %v and the wait plus the default %v", lp.IdleTimeout(), lp.QuietLimit(), 3*hb, transport.DefaultIdleTimeout)
	}
}
