package watchcache

import (
	"context"
	"errors"
	"fmt"

	"go.opentelemetry.io/otel/metric"

	"github.com/holdfast-dev/holdfast/telemetry"
)

// register registers the cache's instruments with c.cfg.Meter, named
// under c.cfg.MetricPrefix ("holdfast.server", "holdfast.relay"), read at
// each collection:
//
//	PREFIX.streams.open          watch streams open now (downstream connections)
//	PREFIX.namespaces            namespaces followed
//	PREFIX.namespace.streams     the downstream watches carrying each namespace: the fan-out
//	PREFIX.namespace.age         seconds since the upstream last confirmed each namespace (0: it confirms it now)
//	PREFIX.namespace.unconfirmed 1 while the upstream is not confirming a namespace
func (c *Cache) register() (metric.Registration, error) {
	m, p := c.cfg.Meter, c.cfg.MetricPrefix
	open, err1 := m.Int64ObservableGauge(p+".streams.open", metric.WithUnit("{stream}"),
		metric.WithDescription("Watch streams open now: the downstream clients' connections."))
	count, err2 := m.Int64ObservableGauge(p+".namespaces", metric.WithUnit("{namespace}"),
		metric.WithDescription("Namespaces followed."))
	streams, err3 := m.Int64ObservableGauge(p+".namespace.streams", metric.WithUnit("{stream}"),
		metric.WithDescription("The downstream watches (streams and waiting long-polls) carrying the namespace now."))
	age, err4 := m.Float64ObservableGauge(p+".namespace.age", metric.WithUnit("s"),
		metric.WithDescription("How long ago the upstream last confirmed the namespace's data (0: it confirms it now)."))
	unconfirmed, err5 := m.Int64ObservableGauge(p+".namespace.unconfirmed",
		metric.WithDescription("1 while the upstream is not confirming the namespace's data, else 0."))
	if err := errors.Join(err1, err2, err3, err4, err5); err != nil {
		return nil, fmt.Errorf("watch cache: metrics: %w", err)
	}
	return m.RegisterCallback(func(_ context.Context, o metric.Observer) error {
		o.ObserveInt64(open, int64(c.OpenStreams()))
		nss := c.Namespaces()
		o.ObserveInt64(count, int64(len(nss)))
		for _, ns := range nss {
			attrs := metric.WithAttributes(telemetry.AttrNamespace.String(ns.Namespace))
			o.ObserveInt64(streams, int64(ns.Streams), attrs)
			o.ObserveFloat64(age, ns.Age.Seconds(), attrs)
			var u int64
			if ns.Unconfirmed {
				u = 1
			}
			o.ObserveInt64(unconfirmed, u, attrs)
		}
		return nil
	}, open, count, streams, age, unconfirmed)
}
