package otelcheck_test

import (
	"context"
	"testing"
	"time"

	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/metric/noop"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"

	"github.com/holdfast-dev/holdfast/internal/instrument"
	"github.com/holdfast-dev/holdfast/telemetry"
)

// providers are the MeterProviders the hot paths are measured against:
// none (a nil *NamespaceMetrics), the API's no-op, and the SDK with a
// reader (what an application that exports metrics runs).
func providers(tb testing.TB) []struct {
	name string
	mp   metric.MeterProvider
} {
	reader := sdkmetric.NewManualReader()
	sdk := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	tb.Cleanup(func() { _ = sdk.Shutdown(context.Background()) })
	return []struct {
		name string
		mp   metric.MeterProvider
	}{{"nil", nil}, {"noop", noop.NewMeterProvider()}, {"sdk", sdk}}
}

func namespaceFor(tb testing.TB, mp metric.MeterProvider) *instrument.NamespaceMetrics {
	tb.Helper()
	if mp == nil {
		return nil
	}
	in, err := instrument.New(mp)
	if err != nil {
		tb.Fatal(err)
	}
	m, err := in.Namespace("payments.prod", &probe{})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = m.Close() })
	return m
}

func BenchmarkApply(b *testing.B) {
	for _, p := range providers(b) {
		b.Run(p.name, func(b *testing.B) {
			m := namespaceFor(b, p.mp)
			b.ReportAllocs()
			for b.Loop() {
				m.Apply(telemetry.ResultApplied)
			}
		})
	}
}

func BenchmarkCallbackDuration(b *testing.B) {
	for _, p := range providers(b) {
		b.Run(p.name, func(b *testing.B) {
			m := namespaceFor(b, p.mp)
			b.ReportAllocs()
			for b.Loop() {
				m.CallbackDuration(3 * time.Millisecond)
			}
		})
	}
}

func BenchmarkApplyParallel(b *testing.B) {
	for _, p := range providers(b) {
		b.Run(p.name, func(b *testing.B) {
			m := namespaceFor(b, p.mp)
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					m.Apply(telemetry.ResultApplied)
				}
			})
		})
	}
}

// TestHotPathsDoNotAllocate holds Apply, the other counters and the
// histograms to zero allocations, with the no-op and the SDK providers.
func TestHotPathsDoNotAllocate(t *testing.T) {
	for _, p := range providers(t) {
		m := namespaceFor(t, p.mp)
		for name, f := range map[string]func(){
			"Apply":            func() { m.Apply(telemetry.ResultRejected) },
			"Resnapshot":       func() { m.Resnapshot(telemetry.ResnapshotGap) },
			"Reconnect":        func() { m.Reconnect(telemetry.ReconnectIdle) },
			"Breach":           func() { m.Breach() },
			"PersistError":     func() { m.PersistError() },
			"CallbackDuration": func() { m.CallbackDuration(time.Millisecond) },
			"PropagationDelay": func() { m.PropagationDelay(time.Second) },
		} {
			f() // the first measurement of a series creates it
			if n := testing.AllocsPerRun(100, f); n != 0 {
				t.Errorf("%s/%s: %v allocations per call, want 0", p.name, name, n)
			}
		}
	}
}
