package server

import (
	"context"
	"errors"
	"fmt"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/holdfast-dev/holdfast/internal/authlimit"
	"github.com/holdfast-dev/holdfast/server/control"
)

// registerMetrics registers the server's own instruments, read at each
// collection (docs/SERVER.md, "Metrics", lists every series):
//
//	holdfast.server.publishes        publishes and rollbacks this server committed
//	holdfast.server.head             the store's latest revision
//	holdfast.server.store.up         1 while the store answers a linearizable read
//	holdfast.server.leader           1 while this server runs the store's single-writer jobs
//	holdfast.server.watchcache.lag   revisions the watch cache's furthest-behind namespace is behind the head
//	holdfast.server.auth.failures    credentials not accepted, and requests refused for them, by result
func (s *Server) registerMetrics(mp metric.MeterProvider, limit *authlimit.Limiter) (metric.Registration, error) {
	meter := mp.Meter(control.MeterScope)
	publishes, err1 := meter.Int64ObservableCounter("holdfast.server.publishes", metric.WithUnit("{publish}"),
		metric.WithDescription("Publishes and rollbacks this server committed."))
	head, err2 := meter.Int64ObservableGauge("holdfast.server.head", metric.WithUnit("{revision}"),
		metric.WithDescription("The store's latest revision."))
	up, err3 := meter.Int64ObservableGauge("holdfast.server.store.up",
		metric.WithDescription("1 while the store answers a linearizable read within 2 s, else 0."))
	leading, err4 := meter.Int64ObservableGauge("holdfast.server.leader",
		metric.WithDescription("1 while this server is the store's leader (it runs rollouts, audit trimming, defragmentation), else 0."))
	lag, err5 := meter.Int64ObservableGauge("holdfast.server.watchcache.lag", metric.WithUnit("{revision}"),
		metric.WithDescription("How many store revisions the watch cache's furthest-behind namespace is behind the head (the namespaces' cursors advance with each heartbeat)."))
	auth, err6 := meter.Int64ObservableCounter("holdfast.server.auth.failures", metric.WithUnit("{request}"),
		metric.WithDescription("Token checks refused: credentials not accepted (result not_accepted), and requests refused without a check for a peer's recent failures (result rate_limited)."))
	if err := errors.Join(err1, err2, err3, err4, err5, err6); err != nil {
		return nil, fmt.Errorf("server: metrics: %w", err)
	}
	notAccepted := metric.WithAttributeSet(attribute.NewSet(attribute.String("result", "not_accepted")))
	rateLimited := metric.WithAttributeSet(attribute.NewSet(attribute.String("result", "rate_limited")))
	return meter.RegisterCallback(func(ctx context.Context, o metric.Observer) error {
		o.ObserveInt64(publishes, s.Publishes())
		var ok int64
		if st := s.Status(ctx); st.Error == "" {
			ok = 1
			o.ObserveInt64(head, st.Head)
			var behind int64
			for _, ns := range s.cache.Namespaces() {
				if ns.Ready {
					behind = max(behind, st.Head-ns.Cursor)
				}
			}
			o.ObserveInt64(lag, behind)
		}
		o.ObserveInt64(up, ok)
		var l int64
		if s.leader.Leading() {
			l = 1
		}
		o.ObserveInt64(leading, l)
		as := limit.Stats()
		o.ObserveInt64(auth, as.Failed, notAccepted)
		o.ObserveInt64(auth, as.Refused, rateLimited)
		return nil
	}, publishes, head, up, leading, lag, auth)
}
