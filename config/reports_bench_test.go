package config_test

import (
	"context"
	"fmt"
	"math"
	"testing"
	"time"

	"github.com/holdfast-dev/holdfast/config"
	"github.com/holdfast-dev/holdfast/internal/fakeserver"
	"github.com/holdfast-dev/holdfast/internal/rollout"
	"github.com/holdfast-dev/holdfast/internal/testutil/nstest"
	"github.com/holdfast-dev/holdfast/transport"
)

// BenchmarkRolloutIdleReports measures the reports (ack requests) the
// reference server receives per second from 200 connected clients that
// change nothing while a rollout runs in their namespace, heartbeat 1 s,
// over 10 s once the stage's reports went: kept, of a server that lists
// reports-kept (none expected); old, of one that does not (a report a
// heartbeat each). Run it with -benchtime 1x.
func BenchmarkRolloutIdleReports(b *testing.B) {
	for _, kept := range []bool{true, false} {
		name := "kept"
		if !kept {
			name = "old"
		}
		b.Run(name, func(b *testing.B) {
			opts := []fakeserver.Option{fakeserver.WithHeartbeat(time.Second)}
			if !kept {
				opts = append(opts, fakeserver.WithoutCapability(transport.CapabilityReportsKept))
			}
			srv, err := fakeserver.Start(opts...)
			if err != nil {
				b.Fatal(err)
			}
			defer srv.Close()
			if _, err := srv.Publish("app", map[string]any{"a": "1"}); err != nil {
				b.Fatal(err)
			}
			const clients = 200
			var nss []*config.Namespace
			for i := range clients {
				c, err := config.New(config.WithEndpoint(srv.URL()), config.WithClientID(fmt.Sprintf("client-%d", i)))
				if err != nil {
					b.Fatal(err)
				}
				defer c.Close()
				ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				ns, err := c.Namespace(ctx, "app")
				cancel()
				if err != nil {
					b.Fatal(err)
				}
				nss = append(nss, ns)
			}
			b.ResetTimer()
			for range b.N {
				rev := stageRollout(b, srv, "app", &rollout.Staged{ID: fmt.Sprintf("r%d", srv.Head()), Stage: 100, Cut: math.MaxUint64, Puts: stagedChange}, nil)
				for _, ns := range nss {
					nstest.WaitRevision(b, ns, rev, 30*time.Second)
				}
				time.Sleep(2 * time.Second) // the stage's reports' window (a plain ack's at most 1 s) passed: what follows is idle
				from, start := srv.Stats().Acks, time.Now()
				time.Sleep(10 * time.Second)
				b.ReportMetric(float64(srv.Stats().Acks-from)/time.Since(start).Seconds(), "reports/s")
			}
		})
	}
}
