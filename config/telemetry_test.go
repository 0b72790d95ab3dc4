package config_test

import (
	"context"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/holdfast-dev/holdfast/config"
)

// collect returns the namespace's data points by metric name: counters and
// gauges by value, with "{result}" or "{reason}" appended when a point has
// one; histograms by their count, as "name.count".
func collect(t *testing.T, r *sdkmetric.ManualReader, ns string) map[string]float64 {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := r.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	key := func(name string, attrs attribute.Set) (string, bool) {
		if v, ok := attrs.Value("holdfast.namespace"); !ok || v.AsString() != ns {
			return "", false
		}
		for _, k := range []attribute.Key{"result", "reason"} {
			if v, ok := attrs.Value(k); ok {
				return name + "{" + v.AsString() + "}", true
			}
		}
		return name, true
	}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			switch d := m.Data.(type) {
			case metricdata.Sum[int64]:
				for _, p := range d.DataPoints {
					if k, ok := key(m.Name, p.Attributes); ok {
						out[k] += float64(p.Value)
					}
				}
			case metricdata.Sum[float64]:
				for _, p := range d.DataPoints {
					if k, ok := key(m.Name, p.Attributes); ok {
						out[k] += p.Value
					}
				}
			case metricdata.Gauge[int64]:
				for _, p := range d.DataPoints {
					if k, ok := key(m.Name, p.Attributes); ok {
						out[k] = float64(p.Value)
					}
				}
			case metricdata.Gauge[float64]:
				for _, p := range d.DataPoints {
					if k, ok := key(m.Name, p.Attributes); ok {
						out[k] = p.Value
					}
				}
			case metricdata.Histogram[float64]:
				for _, p := range d.DataPoints {
					if k, ok := key(m.Name, p.Attributes); ok {
						out[k+".count"] += float64(p.Count)
					}
				}
			}
		}
	}
	return out
}

// TestMetricsMoveWithEvents: each instrument moves when its event happens.
func TestMetricsMoveWithEvents(t *testing.T) {
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	defer mp.Shutdown(context.Background())

	srv := startServer(t)
	publish(t, srv, "tm", map[string]any{"port": 1, "name": "x"})
	c := newClient(t, srv.URL(), config.WithMeterProvider(mp))
	ns := open(t, c, "tm", config.WithSchema([]byte(`{"properties":{"port":{"type":"integer"}}}`)))
	ns.OnChange("port", func(config.Change) {})
	ns.OnChange("port", func(config.Change) { panic("counted") })

	m := collect(t, reader, "tm")
	if m["holdfast.resnapshots{initial}"] != 1 || m["holdfast.applies{applied}"] != 1 {
		t.Errorf("after open: %v", m)
	}
	if _, ok := m["holdfast.staleness"]; !ok {
		t.Errorf("no staleness gauge: %v", m)
	}

	rev := publish(t, srv, "tm", map[string]any{"port": 2})
	waitRevision(t, ns, rev)
	publish(t, srv, "tm", map[string]any{"port": "not-an-int"})
	eventually(t, "the rejection", func() bool { return ns.Rejected() == 1 })
	ns.Int("name", 0) // a type mismatch
	eventually(t, "the callbacks", func() bool { return ns.CallbackPanics() == 1 })
	srv.DropStreams()
	eventually(t, "a reconnect", func() bool { return collect(t, reader, "tm")["holdfast.reconnects{eof}"] >= 1 })

	m = collect(t, reader, "tm")
	checks := map[string]float64{
		"holdfast.applies{applied}":        2,
		"holdfast.applies{rejected}":       1,
		"holdfast.getter.type_mismatches":  1,
		"holdfast.callback.panics":         1,
		"holdfast.callback.duration.count": 2,
		"holdfast.propagation.delay.count": 1,
		"holdfast.revision.applied":        float64(rev),
	}
	for name, want := range checks {
		if m[name] != want {
			t.Errorf("%s = %v; want %v", name, m[name], want)
		}
	}
}

// TestMetricsBreach: a fail-closed namespace past MaxStaleness counts a
// breach and reports its state gauges.
func TestMetricsBreach(t *testing.T) {
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	defer mp.Shutdown(context.Background())

	srv := startServer(t)
	publish(t, srv, "br", map[string]any{"v": 1})
	c := newClient(t, srv.URL(), config.WithMeterProvider(mp))
	ns := open(t, c, "br", config.FailClosed(), config.MaxStaleness(100*time.Millisecond))
	if err := srv.Stop(); err != nil {
		t.Fatal(err)
	}
	eventually(t, "failed closed", func() bool { return ns.Status().State == config.StateFailedClosed })
	m := collect(t, reader, "br")
	if m["holdfast.breaches"] != 1 || m["holdfast.state.failed_closed"] != 1 || m["holdfast.state.breached"] != 1 {
		t.Errorf("breach metrics = %v", m)
	}
	if m["holdfast.staleness"] < 0.1 {
		t.Errorf("staleness %v s; want past MaxStaleness", m["holdfast.staleness"])
	}
}
