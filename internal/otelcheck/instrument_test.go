package otelcheck_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric/noop"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/holdfast-dev/holdfast/internal/instrument"
	"github.com/holdfast-dev/holdfast/telemetry"
)

// probe is a Probe whose readings tests set.
type probe struct {
	mu             sync.Mutex
	staleness      time.Duration
	maxStaleness   time.Duration
	headAge        time.Duration
	state          string
	revision       int64
	headLag        int64
	failedClosed   bool
	breached       bool
	typeMismatches int64
	callbackPanics int64
}

func (p *probe) set(f func(p *probe)) {
	p.mu.Lock()
	defer p.mu.Unlock()
	f(p)
}

func (p *probe) Staleness() time.Duration { p.mu.Lock(); defer p.mu.Unlock(); return p.staleness }
func (p *probe) MaxStaleness() time.Duration {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.maxStaleness
}
func (p *probe) HeadAge() time.Duration { p.mu.Lock(); defer p.mu.Unlock(); return p.headAge }
func (p *probe) State() string          { p.mu.Lock(); defer p.mu.Unlock(); return p.state }
func (p *probe) Revision() int64        { p.mu.Lock(); defer p.mu.Unlock(); return p.revision }
func (p *probe) HeadLag() int64         { p.mu.Lock(); defer p.mu.Unlock(); return p.headLag }
func (p *probe) FailedClosed() bool     { p.mu.Lock(); defer p.mu.Unlock(); return p.failedClosed }
func (p *probe) Breached() bool         { p.mu.Lock(); defer p.mu.Unlock(); return p.breached }
func (p *probe) TypeMismatches() int64  { p.mu.Lock(); defer p.mu.Unlock(); return p.typeMismatches }
func (p *probe) CallbackPanics() int64  { p.mu.Lock(); defer p.mu.Unlock(); return p.callbackPanics }

// timedProbe keeps its own fail-closed time.
type timedProbe struct {
	probe
	closedFor time.Duration
}

func (p *timedProbe) FailedClosedTime() time.Duration {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.closedFor
}

var (
	_ instrument.Probe             = (*probe)(nil)
	_ instrument.FailedClosedTimer = (*timedProbe)(nil)
)

// rig is an SDK MeterProvider with a ManualReader and the instruments made
// from it.
type rig struct {
	reader *sdkmetric.ManualReader
	in     *instrument.Instruments
}

func newRig(t testing.TB) *rig {
	t.Helper()
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	t.Cleanup(func() { _ = mp.Shutdown(context.Background()) })
	in, err := instrument.New(mp)
	if err != nil {
		t.Fatal(err)
	}
	return &rig{reader: reader, in: in}
}

func (r *rig) namespace(t testing.TB, ns string, p instrument.Probe) *instrument.NamespaceMetrics {
	t.Helper()
	m, err := r.in.Namespace(ns, p)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = m.Close() })
	return m
}

// points collects once and returns every data point by
// "name{attributes}": a sum's or gauge's value; for a histogram, its count
// under "name#count{...}" and its sum under "name#sum{...}".
func (r *rig) points(t testing.TB) map[string]float64 {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := r.reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	out := make(map[string]float64)
	put := func(name string, attrs attribute.Set, v float64) {
		k := name + "{" + attrs.Encoded(attribute.DefaultEncoder()) + "}"
		if _, dup := out[k]; dup {
			t.Errorf("two points for %s", k)
		}
		out[k] = v
	}
	for _, sm := range rm.ScopeMetrics {
		if sm.Scope.Name != telemetry.ScopeName {
			t.Errorf("scope %q, want %q", sm.Scope.Name, telemetry.ScopeName)
		}
		for _, m := range sm.Metrics {
			switch d := m.Data.(type) {
			case metricdata.Sum[int64]:
				for _, p := range d.DataPoints {
					put(m.Name, p.Attributes, float64(p.Value))
				}
			case metricdata.Sum[float64]:
				for _, p := range d.DataPoints {
					put(m.Name, p.Attributes, p.Value)
				}
			case metricdata.Gauge[int64]:
				for _, p := range d.DataPoints {
					put(m.Name, p.Attributes, float64(p.Value))
				}
			case metricdata.Gauge[float64]:
				for _, p := range d.DataPoints {
					put(m.Name, p.Attributes, p.Value)
				}
			case metricdata.Histogram[float64]:
				for _, p := range d.DataPoints {
					put(m.Name+"#count", p.Attributes, float64(p.Count))
					put(m.Name+"#sum", p.Attributes, p.Sum)
				}
			default:
				t.Errorf("%s: unexpected data %T", m.Name, m.Data)
			}
		}
	}
	return out
}

// key names a point of namespace ns with extra attributes "k=v".
func key(name, ns string, kv ...string) string {
	attrs := append([]string{"holdfast.namespace=" + ns}, kv...)
	// attribute.DefaultEncoder sorts by key: holdfast.namespace < reason, result.
	return name + "{" + strings.Join(attrs, ",") + "}"
}

const absent = -1.0

func value(pts map[string]float64, k string) float64 {
	if v, ok := pts[k]; ok {
		return v
	}
	return absent
}

// TestEachInstrumentMoves shows, for every event and every probe reading,
// that its instrument moves for its namespace, and only there.
func TestEachInstrumentMoves(t *testing.T) {
	const ns = "payments.prod"
	type step struct {
		name   string
		act    func(m *instrument.NamespaceMetrics, p *timedProbe)
		key    string
		before float64 // absent: no point before
		after  float64
	}
	steps := []step{
		{"apply applied", func(m *instrument.NamespaceMetrics, _ *timedProbe) { m.Apply(telemetry.ResultApplied) },
			key(telemetry.NameApplies, ns, "result=applied"), absent, 1},
		{"apply rejected", func(m *instrument.NamespaceMetrics, _ *timedProbe) { m.Apply(telemetry.ResultRejected) },
			key(telemetry.NameApplies, ns, "result=rejected"), 0, 1}, // starts at zero: a dashboard shows 0, not no data
		{"apply duplicate", func(m *instrument.NamespaceMetrics, _ *timedProbe) { m.Apply(telemetry.ResultDuplicate) },
			key(telemetry.NameApplies, ns, "result=duplicate"), absent, 1},
		{"apply would reject", func(m *instrument.NamespaceMetrics, _ *timedProbe) { m.Apply(telemetry.ResultWouldReject) },
			key(telemetry.NameApplies, ns, "result=would_reject"), absent, 1},
		{"apply unknown result", func(m *instrument.NamespaceMetrics, _ *timedProbe) { m.Apply("weird") },
			key(telemetry.NameApplies, ns, "result=weird"), absent, 1},
		{"resnapshot compacted", func(m *instrument.NamespaceMetrics, _ *timedProbe) { m.Resnapshot(telemetry.ResnapshotCompacted) },
			key(telemetry.NameResnapshots, ns, "reason=compacted"), absent, 1},
		{"resnapshot gap", func(m *instrument.NamespaceMetrics, _ *timedProbe) { m.Resnapshot(telemetry.ResnapshotGap) },
			key(telemetry.NameResnapshots, ns, "reason=gap"), absent, 1},
		{"resnapshot store reset", func(m *instrument.NamespaceMetrics, _ *timedProbe) { m.Resnapshot(telemetry.ResnapshotStoreReset) },
			key(telemetry.NameResnapshots, ns, "reason=store_reset"), absent, 1},
		{"resnapshot backstop", func(m *instrument.NamespaceMetrics, _ *timedProbe) { m.Resnapshot(telemetry.ResnapshotBackstop) },
			key(telemetry.NameResnapshots, ns, "reason=backstop"), absent, 1},
		{"resnapshot initial", func(m *instrument.NamespaceMetrics, _ *timedProbe) { m.Resnapshot(telemetry.ResnapshotInitial) },
			key(telemetry.NameResnapshots, ns, "reason=initial"), absent, 1},
		{"resnapshot bad cursor", func(m *instrument.NamespaceMetrics, _ *timedProbe) { m.Resnapshot(telemetry.ResnapshotBadCursor) },
			key(telemetry.NameResnapshots, ns, "reason=bad_cursor"), absent, 1},
		{"reconnect idle", func(m *instrument.NamespaceMetrics, _ *timedProbe) { m.Reconnect(telemetry.ReconnectIdle) },
			key(telemetry.NameReconnects, ns, "reason=idle"), absent, 1},
		{"reconnect throttled", func(m *instrument.NamespaceMetrics, _ *timedProbe) { m.Reconnect(telemetry.ReconnectThrottled) },
			key(telemetry.NameReconnects, ns, "reason=throttled"), absent, 1},
		{"breach", func(m *instrument.NamespaceMetrics, _ *timedProbe) { m.Breach() },
			key(telemetry.NameBreaches, ns), 0, 1}, // starts at zero: a dashboard shows 0, not no data
		{"persist error", func(m *instrument.NamespaceMetrics, _ *timedProbe) { m.PersistError() },
			key(telemetry.NamePersistErrors, ns), 0, 1}, // starts at zero: a dashboard shows 0, not no data
		{"callback duration count", func(m *instrument.NamespaceMetrics, _ *timedProbe) { m.CallbackDuration(3 * time.Millisecond) },
			key(telemetry.NameCallbackDuration+"#count", ns), absent, 1},
		{"callback duration sum", func(m *instrument.NamespaceMetrics, _ *timedProbe) { m.CallbackDuration(250 * time.Millisecond) },
			key(telemetry.NameCallbackDuration+"#sum", ns), absent, 0.25},
		{"propagation delay count", func(m *instrument.NamespaceMetrics, _ *timedProbe) { m.PropagationDelay(40 * time.Millisecond) },
			key(telemetry.NamePropagationDelay+"#count", ns), absent, 1},
		{"propagation delay sum", func(m *instrument.NamespaceMetrics, _ *timedProbe) { m.PropagationDelay(1500 * time.Millisecond) },
			key(telemetry.NamePropagationDelay+"#sum", ns), absent, 1.5},
		{"propagation delay negative is 0", func(m *instrument.NamespaceMetrics, _ *timedProbe) { m.PropagationDelay(-time.Second) },
			key(telemetry.NamePropagationDelay+"#sum", ns), absent, 0},
		{"staleness", func(_ *instrument.NamespaceMetrics, p *timedProbe) {
			p.set(func(p *probe) { p.staleness = 4500 * time.Millisecond })
		}, key(telemetry.NameStaleness, ns), 0, 4.5},
		{"negative staleness not reported", func(_ *instrument.NamespaceMetrics, p *timedProbe) {
			p.set(func(p *probe) { p.staleness = -1 })
		}, key(telemetry.NameStaleness, ns), 0, absent},
		{"max staleness", func(_ *instrument.NamespaceMetrics, p *timedProbe) {
			p.set(func(p *probe) { p.maxStaleness = 30 * time.Second })
		}, key(telemetry.NameMaxStaleness, ns), absent, 30}, // 0: no limit, not reported
		{"head age", func(_ *instrument.NamespaceMetrics, p *timedProbe) {
			p.set(func(p *probe) { p.headAge = 2500 * time.Millisecond })
		}, key(telemetry.NameHeadAge, ns), 0, 2.5},
		{"unknown head age not reported", func(_ *instrument.NamespaceMetrics, p *timedProbe) {
			p.set(func(p *probe) { p.headAge = -1 })
		}, key(telemetry.NameHeadAge, ns), 0, absent},
		{"state is 1 for the current one", func(_ *instrument.NamespaceMetrics, p *timedProbe) {
			p.set(func(p *probe) { p.state = telemetry.StateStale })
		}, key(telemetry.NameState, ns, "state=stale"), absent, 1}, // "": no state reported
		{"state is 0 for the others", func(_ *instrument.NamespaceMetrics, p *timedProbe) {
			p.set(func(p *probe) { p.state = telemetry.StateStale })
		}, key(telemetry.NameState, ns, "state=fresh"), absent, 0},
		{"state failed closed", func(_ *instrument.NamespaceMetrics, p *timedProbe) {
			p.set(func(p *probe) { p.state = telemetry.StateFailedClosed })
		}, key(telemetry.NameState, ns, "state=failed_closed"), absent, 1},
		{"unknown state reports none", func(_ *instrument.NamespaceMetrics, p *timedProbe) {
			p.set(func(p *probe) { p.state = "closed" })
		}, key(telemetry.NameState, ns, "state=syncing"), absent, absent},
		{"applied revision", func(_ *instrument.NamespaceMetrics, p *timedProbe) {
			p.set(func(p *probe) { p.revision = 4182 })
		}, key(telemetry.NameRevisionApplied, ns), 0, 4182},
		{"revision lag", func(_ *instrument.NamespaceMetrics, p *timedProbe) {
			p.set(func(p *probe) { p.headLag = 3 })
		}, key(telemetry.NameRevisionLag, ns), 0, 3},
		{"unknown revision lag not reported", func(_ *instrument.NamespaceMetrics, p *timedProbe) {
			p.set(func(p *probe) { p.headLag = -1 })
		}, key(telemetry.NameRevisionLag, ns), 0, absent},
		{"breached", func(_ *instrument.NamespaceMetrics, p *timedProbe) {
			p.set(func(p *probe) { p.breached = true })
		}, key(telemetry.NameBreached, ns), 0, 1},
		{"failed closed", func(_ *instrument.NamespaceMetrics, p *timedProbe) {
			p.set(func(p *probe) { p.failedClosed = true })
		}, key(telemetry.NameFailedClosed, ns), 0, 1},
		{"failed closed is breached too", func(_ *instrument.NamespaceMetrics, p *timedProbe) {
			p.set(func(p *probe) { p.failedClosed = true })
		}, key(telemetry.NameBreached, ns), 0, 1},
		{"failed closed time", func(_ *instrument.NamespaceMetrics, p *timedProbe) {
			p.set(func(p *probe) { p.failedClosed = true })
			p.mu.Lock()
			p.closedFor = 90 * time.Second
			p.mu.Unlock()
		}, key(telemetry.NameFailedClosedTime, ns), 0, 90},
		{"type mismatches", func(_ *instrument.NamespaceMetrics, p *timedProbe) {
			p.set(func(p *probe) { p.typeMismatches = 7 })
		}, key(telemetry.NameTypeMismatches, ns), 0, 7},
		{"callback panics", func(_ *instrument.NamespaceMetrics, p *timedProbe) {
			p.set(func(p *probe) { p.callbackPanics = 2 })
		}, key(telemetry.NameCallbackPanics, ns), 0, 2},
	}
	for _, s := range steps {
		t.Run(s.name, func(t *testing.T) {
			r := newRig(t)
			p := &timedProbe{}
			m := r.namespace(t, ns, p)
			other := &timedProbe{}
			r.namespace(t, "other.ns", other)

			before := r.points(t)
			if got := value(before, s.key); got != s.before {
				t.Fatalf("before: %s = %v, want %v", s.key, got, s.before)
			}
			s.act(m, p)
			after := r.points(t)
			if got := value(after, s.key); got != s.after {
				t.Fatalf("after: %s = %v, want %v\npoints: %v", s.key, got, s.after, after)
			}
			// The other namespace did not move.
			for k, v := range after {
				if strings.Contains(k, "holdfast.namespace=other.ns") && before[k] != v {
					t.Errorf("%s moved from %v to %v", k, before[k], v)
				}
			}
		})
	}
}

func TestEveryPointCarriesNamespace(t *testing.T) {
	r := newRig(t)
	m := r.namespace(t, "a.b", &probe{})
	exerciseAll(m)
	pts := r.points(t)
	if len(pts) == 0 {
		t.Fatal("no points")
	}
	for k := range pts {
		if !strings.Contains(k, "{holdfast.namespace=a.b") {
			t.Errorf("point without the namespace: %s", k)
		}
	}
}

// exerciseAll records every event once.
func exerciseAll(m *instrument.NamespaceMetrics) {
	m.Apply(telemetry.ResultApplied)
	m.Apply(telemetry.ResultRejected)
	m.Apply(telemetry.ResultDuplicate)
	m.Apply(telemetry.ResultWouldReject)
	m.Resnapshot(telemetry.ResnapshotCompacted)
	m.Reconnect(telemetry.ReconnectEOF)
	m.Breach()
	m.CallbackDuration(time.Millisecond)
	m.PersistError()
	m.PropagationDelay(20 * time.Millisecond)
}

func TestFailedClosedTimeFromSamples(t *testing.T) {
	r := newRig(t)
	now := time.Date(2026, 11, 29, 8, 0, 0, 0, time.UTC)
	r.in.SetClock(func() time.Time { return now })
	p := &probe{}
	r.namespace(t, "ns", p)
	k := key(telemetry.NameFailedClosedTime, "ns")

	for i, s := range []struct {
		advance time.Duration
		closed  bool
		want    float64
	}{
		{0, false, 0},
		{10 * time.Second, true, 10}, // found failed closed: the interval counts
		{5 * time.Second, true, 15},
		{7 * time.Second, false, 15}, // open again: nothing more
		{time.Minute, false, 15},
		{2 * time.Second, true, 17},
	} {
		now = now.Add(s.advance)
		p.set(func(p *probe) { p.failedClosed = s.closed })
		if got := value(r.points(t), k); got != s.want {
			t.Fatalf("sample %d: %s = %v, want %v", i, k, got, s.want)
		}
	}
}

func TestCloseUnregisters(t *testing.T) {
	r := newRig(t)
	p := &probe{staleness: time.Second, revision: 5, headLag: 1, typeMismatches: 1, callbackPanics: 1}
	m, err := r.in.Namespace("gone", p)
	if err != nil {
		t.Fatal(err)
	}
	keep := r.namespace(t, "kept", p)
	observed := []string{telemetry.NameStaleness, telemetry.NameRevisionApplied, telemetry.NameRevisionLag,
		telemetry.NameBreached, telemetry.NameFailedClosed, telemetry.NameFailedClosedTime,
		telemetry.NameTypeMismatches, telemetry.NameCallbackPanics}

	pts := r.points(t)
	for _, name := range observed {
		for _, ns := range []string{"gone", "kept"} {
			if value(pts, key(name, ns)) == absent {
				t.Errorf("before Close: no %s", key(name, ns))
			}
		}
	}

	if err := m.Close(); err != nil {
		t.Fatal(err)
	}
	if err := m.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	m.Apply(telemetry.ResultApplied) // still safe after Close

	pts = r.points(t)
	for _, name := range observed {
		if v := value(pts, key(name, "gone")); v != absent {
			t.Errorf("after Close: %s = %v, want no point", key(name, "gone"), v)
		}
		if value(pts, key(name, "kept")) == absent {
			t.Errorf("after Close of another namespace: no %s", key(name, "kept"))
		}
	}

	// The name is free again.
	again, err := r.in.Namespace("gone", p)
	if err != nil {
		t.Fatalf("register after Close: %v", err)
	}
	if err := again.Close(); err != nil {
		t.Fatal(err)
	}
	_ = keep
}

func TestNamespaceErrors(t *testing.T) {
	r := newRig(t)
	r.namespace(t, "dup", &probe{})
	if _, err := r.in.Namespace("dup", &probe{}); err == nil || !strings.HasPrefix(err.Error(), "instrument: ") {
		t.Errorf("second registration: err = %v, want an instrument: error", err)
	}
	if _, err := r.in.Namespace("", &probe{}); err == nil {
		t.Error("empty name: no error")
	}
	if _, err := r.in.Namespace("x", nil); err == nil {
		t.Error("nil probe: no error")
	}
}

func TestNilSafe(t *testing.T) {
	var in *instrument.Instruments
	m, err := in.Namespace("ns", &probe{})
	if m != nil || err != nil {
		t.Fatalf("nil Instruments: %v, %v; want nil, nil", m, err)
	}
	exerciseAll(m)
	m.Resnapshot("x")
	m.Reconnect("x")
	if m.Namespace() != "" {
		t.Error("nil Namespace() not empty")
	}
	if err := m.Close(); err != nil {
		t.Fatal(err)
	}

	var tr *instrument.Tracer
	ctx := context.Background()
	got, end := tr.Start(ctx, telemetry.SpanSnapshot, "ns")
	if got != ctx {
		t.Error("nil Tracer changed the context")
	}
	end(errors.New("x"))
}

func TestDefaultProviders(t *testing.T) {
	in, err := instrument.New(nil) // the global provider
	if err != nil {
		t.Fatal(err)
	}
	m, err := in.Namespace("ns", &probe{})
	if err != nil {
		t.Fatal(err)
	}
	exerciseAll(m)
	if err := m.Close(); err != nil {
		t.Fatal(err)
	}
	_, end := instrument.NewTracer(nil).Start(context.Background(), telemetry.SpanResnapshot, "ns")
	end(nil)
}

func TestNoopProvider(t *testing.T) {
	in, err := instrument.New(noop.NewMeterProvider())
	if err != nil {
		t.Fatal(err)
	}
	m, err := in.Namespace("ns", &probe{})
	if err != nil {
		t.Fatal(err)
	}
	exerciseAll(m)
	if err := m.Close(); err != nil {
		t.Fatal(err)
	}
}

// TestCardinalityCap: values beyond the known ones are kept up to a bound,
// then counted as "other".
func TestCardinalityCap(t *testing.T) {
	r := newRig(t)
	m := r.namespace(t, "ns", &probe{})
	for i := range 20 {
		m.Reconnect(fmt.Sprintf("reason-%02d", i))
	}
	m.Reconnect("reason-00") // cached: still its own series
	pts := r.points(t)
	if got := value(pts, key(telemetry.NameReconnects, "ns", "reason=reason-00")); got != 2 {
		t.Errorf("reason-00 = %v, want 2", got)
	}
	if got := value(pts, key(telemetry.NameReconnects, "ns", "reason=reason-15")); got != 1 {
		t.Errorf("reason-15 = %v, want 1", got)
	}
	if got := value(pts, key(telemetry.NameReconnects, "ns", "reason=reason-16")); got != absent {
		t.Errorf("reason-16 = %v, want no series", got)
	}
	if got := value(pts, key(telemetry.NameReconnects, "ns", "reason="+telemetry.ValueOther)); got != 4 {
		t.Errorf("other = %v, want 4", got)
	}
}

// TestConcurrent races events, registrations and collections (run with
// -race).
func TestConcurrent(t *testing.T) {
	r := newRig(t)
	p := &probe{}
	m := r.namespace(t, "ns", p)
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Go(func() {
			for i := range 200 {
				m.Apply(telemetry.ResultApplied)
				m.Reconnect(fmt.Sprintf("r%d", (g*200+i)%40))
				m.CallbackDuration(time.Microsecond)
				p.set(func(p *probe) { p.revision++ })
			}
		})
	}
	wg.Go(func() {
		for i := range 50 {
			n, err := r.in.Namespace(fmt.Sprintf("tmp-%d", i), p)
			if err != nil {
				t.Error(err)
				return
			}
			n.Apply(telemetry.ResultDuplicate)
			_ = n.Close()
		}
	})
	wg.Go(func() {
		for range 50 {
			var rm metricdata.ResourceMetrics
			if err := r.reader.Collect(context.Background(), &rm); err != nil {
				t.Error(err)
				return
			}
		}
	})
	wg.Wait()
	if got := value(r.points(t), key(telemetry.NameApplies, "ns", "result=applied")); got != 800 {
		t.Errorf("applied = %v, want 800", got)
	}
}

func TestTracer(t *testing.T) {
	sr := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(sr))
	defer func() { _ = tp.Shutdown(context.Background()) }()
	tr := instrument.NewTracer(tp)

	ctx, end := tr.Start(context.Background(), telemetry.SpanResnapshot, "payments.prod")
	_, endFetch := tr.Start(ctx, telemetry.SpanSnapshot, "payments.prod")
	endFetch(errors.New("503 Service Unavailable"))
	end(nil)

	spans := sr.Ended()
	if len(spans) != 2 {
		t.Fatalf("%d spans, want 2", len(spans))
	}
	fetch, resnap := spans[0], spans[1]
	if fetch.Name() != telemetry.SpanSnapshot || resnap.Name() != telemetry.SpanResnapshot {
		t.Fatalf("names %q, %q", fetch.Name(), resnap.Name())
	}
	if fetch.Parent().SpanID() != resnap.SpanContext().SpanID() {
		t.Error("the fetch is not a child of the resnapshot")
	}
	if fetch.Status().Code != codes.Error || fetch.Status().Description != "503 Service Unavailable" {
		t.Errorf("fetch status %+v", fetch.Status())
	}
	if len(fetch.Events()) != 1 || fetch.Events()[0].Name != "exception" {
		t.Errorf("fetch events %+v, want the error recorded", fetch.Events())
	}
	if resnap.Status().Code != codes.Unset {
		t.Errorf("resnapshot status %+v, want unset", resnap.Status())
	}
	for _, s := range spans {
		if got := attribute.NewSet(s.Attributes()...); !got.HasValue(telemetry.AttrNamespace) {
			t.Errorf("%s: no namespace attribute", s.Name())
		} else if v, _ := got.Value(telemetry.AttrNamespace); v.AsString() != "payments.prod" {
			t.Errorf("%s: namespace %q", s.Name(), v.AsString())
		}
		if s.InstrumentationScope().Name != telemetry.ScopeName {
			t.Errorf("%s: scope %q", s.Name(), s.InstrumentationScope().Name)
		}
	}
}
