// Package instrument makes holdfast's OpenTelemetry instruments and spans
// for config: one Instruments per Client, one NamespaceMetrics per open
// namespace, read from a Probe at each collection. The names it records
// under are the public package telemetry's.
package instrument

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/holdfast-dev/holdfast/telemetry"
)

const maxExtraValues = 16

var (
	knownResults    = []string{telemetry.ResultApplied, telemetry.ResultRejected, telemetry.ResultDuplicate, telemetry.ResultWouldReject, telemetry.ValueOther}
	knownResnapshot = []string{telemetry.ResnapshotInitial, telemetry.ResnapshotCompacted, telemetry.ResnapshotGap, telemetry.ResnapshotStoreReset,
		telemetry.ResnapshotBadCursor, telemetry.ResnapshotBackstop, telemetry.ResnapshotCursorAhead, telemetry.ResnapshotHistoryRewritten, telemetry.ResnapshotTooLarge, telemetry.ValueOther}
	knownStates    = []string{telemetry.StateSyncing, telemetry.StateFresh, telemetry.StateStale, telemetry.StateBreached, telemetry.StateFailedClosed}
	knownReconnect = []string{telemetry.ReconnectIdle, telemetry.ReconnectEOF, telemetry.ReconnectError, telemetry.ReconnectUnauthorized,
		telemetry.ReconnectThrottled, telemetry.ValueOther}
)

// Histogram bucket boundaries, in seconds.
var (
	callbackBuckets    = []float64{0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10}
	propagationBuckets = []float64{0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600}
)

// Probe is what the observable instruments of a namespace read, at each
// collection, possibly from several goroutines at once: its methods must be
// safe for concurrent use and cheap.
type Probe interface {
	// Staleness is the time since the data was last confirmed current.
	// A negative value is not reported.
	Staleness() time.Duration
	// MaxStaleness is the namespace's MaxStaleness; 0 (no limit) is not
	// reported.
	MaxStaleness() time.Duration
	// HeadAge is the time since the server last told the client its head
	// (a snapshot, a change or a progress event). A negative value means
	// never, in this process, and is not reported.
	HeadAge() time.Duration
	// Revision is the applied revision.
	Revision() int64
	// HeadLag is how many revisions the applied one is behind the server's
	// head (the cursor or the head the server last told, minus the applied
	// revision). A negative value means unknown and is not reported.
	HeadLag() int64
	// State is the namespace's state, one of telemetry's State* values;
	// another value (Closed) reports no state.
	State() string
	// FailedClosed reports whether a fail-closed namespace serves its
	// Defaults, being stale past MaxStaleness.
	FailedClosed() bool
	// Breached reports whether the namespace is stale past MaxStaleness
	// (holdfast.state.breached is also 1 while FailedClosed).
	Breached() bool
	// TypeMismatches is the cumulative count of getter type mismatches.
	TypeMismatches() int64
	// CallbackPanics is the cumulative count of callbacks that panicked.
	CallbackPanics() int64
}

// FailedClosedTimer is an optional interface of a Probe that keeps the
// cumulative time it has spent failed closed. With it,
// holdfast.failed_closed.time is exact; without it, the time is summed from
// FailedClosed at each collection (each interval during which a collection
// found the namespace failed closed counts whole), which can be off by up
// to one collection interval per episode.
type FailedClosedTimer interface {
	FailedClosedTime() time.Duration
}

// Instruments holds every instrument of the SDK, made once per Client from
// a MeterProvider. It is safe for concurrent use.
type Instruments struct {
	meter metric.Meter
	now   func() time.Time

	staleness        metric.Float64ObservableGauge
	maxStaleness     metric.Float64ObservableGauge
	headAge          metric.Float64ObservableGauge
	state            metric.Int64ObservableGauge
	revisionApplied  metric.Int64ObservableGauge
	revisionLag      metric.Int64ObservableGauge
	breached         metric.Int64ObservableGauge
	failedClosed     metric.Int64ObservableGauge
	failedClosedTime metric.Float64ObservableCounter
	typeMismatches   metric.Int64ObservableCounter
	callbackPanics   metric.Int64ObservableCounter

	applies          metric.Int64Counter
	resnapshots      metric.Int64Counter
	reconnects       metric.Int64Counter
	breaches         metric.Int64Counter
	persistErrors    metric.Int64Counter
	callbackDuration metric.Float64Histogram
	propagationDelay metric.Float64Histogram

	mu         sync.Mutex
	namespaces map[string]bool // registered, not closed
}

// New makes the instruments from mp; a nil mp means otel.GetMeterProvider().
// An error names every instrument the provider refused; the instruments it
// returns still work (the API hands back usable instruments with errors).
func New(mp metric.MeterProvider) (*Instruments, error) {
	if mp == nil {
		mp = otel.GetMeterProvider()
	}
	m := mp.Meter(telemetry.ScopeName)
	in := &Instruments{meter: m, now: time.Now, namespaces: make(map[string]bool)}
	var errs []error
	check := func(err error) {
		if err != nil {
			errs = append(errs, err)
		}
	}
	var err error

	in.staleness, err = m.Float64ObservableGauge(telemetry.NameStaleness, metric.WithUnit("s"),
		metric.WithDescription("Time since the client last confirmed its data current."))
	check(err)
	in.maxStaleness, err = m.Float64ObservableGauge(telemetry.NameMaxStaleness, metric.WithUnit("s"),
		metric.WithDescription("The namespace's MaxStaleness: how old its data may be before it breaches (not reported without one)."))
	check(err)
	in.headAge, err = m.Float64ObservableGauge(telemetry.NameHeadAge, metric.WithUnit("s"),
		metric.WithDescription("Time since the server last told the client its head revision (a snapshot, a change or a progress event)."))
	check(err)
	in.state, err = m.Int64ObservableGauge(telemetry.NameState, metric.WithUnit("{namespace}"),
		metric.WithDescription("The namespace's state: 1 for the current one, 0 for the others."))
	check(err)
	in.revisionApplied, err = m.Int64ObservableGauge(telemetry.NameRevisionApplied, metric.WithUnit("{revision}"),
		metric.WithDescription("The revision of the last good data applied."))
	check(err)
	in.revisionLag, err = m.Int64ObservableGauge(telemetry.NameRevisionLag, metric.WithUnit("{revision}"),
		metric.WithDescription("How far the applied revision is behind the server's head."))
	check(err)
	in.breached, err = m.Int64ObservableGauge(telemetry.NameBreached, metric.WithUnit("{namespace}"),
		metric.WithDescription("1 while the namespace is stale past its MaxStaleness, else 0."))
	check(err)
	in.failedClosed, err = m.Int64ObservableGauge(telemetry.NameFailedClosed, metric.WithUnit("{namespace}"),
		metric.WithDescription("1 while a fail-closed namespace serves its Defaults, else 0."))
	check(err)
	in.failedClosedTime, err = m.Float64ObservableCounter(telemetry.NameFailedClosedTime, metric.WithUnit("s"),
		metric.WithDescription("Cumulative time the namespace spent failed closed, serving its Defaults."))
	check(err)
	in.typeMismatches, err = m.Int64ObservableCounter(telemetry.NameTypeMismatches, metric.WithUnit("{call}"),
		metric.WithDescription("Getter calls that found a value of another type than asked and returned the default."))
	check(err)
	in.callbackPanics, err = m.Int64ObservableCounter(telemetry.NameCallbackPanics, metric.WithUnit("{panic}"),
		metric.WithDescription("Change and status callbacks that panicked; each was recovered."))
	check(err)

	in.applies, err = m.Int64Counter(telemetry.NameApplies, metric.WithUnit("{apply}"),
		metric.WithDescription("Updates handled, by result: applied, rejected, duplicate."))
	check(err)
	in.resnapshots, err = m.Int64Counter(telemetry.NameResnapshots, metric.WithUnit("{resnapshot}"),
		metric.WithDescription("Full snapshot fetches, by reason."))
	check(err)
	in.reconnects, err = m.Int64Counter(telemetry.NameReconnects, metric.WithUnit("{reconnect}"),
		metric.WithDescription("Watch streams re-opened, by reason."))
	check(err)
	in.breaches, err = m.Int64Counter(telemetry.NameBreaches, metric.WithUnit("{breach}"),
		metric.WithDescription("Transitions into breach: stale past MaxStaleness, fail-open or fail-closed."))
	check(err)
	in.persistErrors, err = m.Int64Counter(telemetry.NamePersistErrors, metric.WithUnit("{error}"),
		metric.WithDescription("Failed writes of the last-good file."))
	check(err)
	in.callbackDuration, err = m.Float64Histogram(telemetry.NameCallbackDuration, metric.WithUnit("s"),
		metric.WithDescription("Run time of one change or status callback call."),
		metric.WithExplicitBucketBoundaries(callbackBuckets...))
	check(err)
	in.propagationDelay, err = m.Float64Histogram(telemetry.NamePropagationDelay, metric.WithUnit("s"),
		metric.WithDescription("Time from the server's commit of a change to its apply in the client."),
		metric.WithExplicitBucketBoundaries(propagationBuckets...))
	check(err)

	if len(errs) > 0 {
		return in, fmt.Errorf("instrument: %w", errors.Join(errs...))
	}
	return in, nil
}

// SetClock replaces the clock that sums the fail-closed time of probes
// without FailedClosedTimer; for tests. Call it before Namespace.
func (in *Instruments) SetClock(now func() time.Time) { in.now = now }

// Namespace registers the observable instruments of namespace ns, read
// from probe at each collection, and returns its event recorder. Close it
// when the namespace closes. A nil *Instruments returns a nil
// *NamespaceMetrics, whose methods do nothing. A namespace can be
// registered once at a time per Instruments.
func (in *Instruments) Namespace(ns string, probe Probe) (*NamespaceMetrics, error) {
	if in == nil {
		return nil, nil
	}
	if ns == "" {
		return nil, errors.New("instrument: empty namespace name")
	}
	if probe == nil {
		return nil, fmt.Errorf("instrument: namespace %q: nil Probe", ns)
	}
	in.mu.Lock()
	defer in.mu.Unlock()
	if in.namespaces[ns] {
		return nil, fmt.Errorf("instrument: namespace %q already registered", ns)
	}

	nsAttr := telemetry.AttrNamespace.String(ns)
	base := metric.WithAttributeSet(attribute.NewSet(nsAttr))
	m := &NamespaceMetrics{
		in:          in,
		ns:          ns,
		probe:       probe,
		addBase:     []metric.AddOption{base},
		recordBase:  []metric.RecordOption{base},
		observeBase: []metric.ObserveOption{base},
		applies:     newAddOpts(nsAttr, telemetry.AttrResult, knownResults),
		resnapshots: newAddOpts(nsAttr, telemetry.AttrReason, knownResnapshot),
		reconnects:  newAddOpts(nsAttr, telemetry.AttrReason, knownReconnect),
		states:      make([]metric.ObserveOption, len(knownStates)),
	}
	for i, st := range knownStates {
		m.states[i] = metric.WithAttributeSet(attribute.NewSet(nsAttr, telemetry.AttrState.String(st)))
	}
	m.fct, _ = probe.(FailedClosedTimer)
	reg, err := in.meter.RegisterCallback(m.observe,
		in.staleness, in.maxStaleness, in.headAge, in.state, in.revisionApplied, in.revisionLag, in.breached, in.failedClosed,
		in.failedClosedTime, in.typeMismatches, in.callbackPanics)
	if err != nil {
		return nil, fmt.Errorf("instrument: namespace %q: %w", ns, err)
	}
	m.reg = reg
	in.namespaces[ns] = true
	// Counters that usually stay at zero start at zero, so that a
	// dashboard shows 0 for them rather than no data.
	ctx := context.Background()
	in.breaches.Add(ctx, 0, m.addBase...)
	in.persistErrors.Add(ctx, 0, m.addBase...)
	in.applies.Add(ctx, 0, m.applies.get(telemetry.ResultRejected)...)
	return m, nil
}

// NamespaceMetrics records the events of one namespace. Its methods are
// safe for concurrent use; on a nil *NamespaceMetrics they do nothing.
type NamespaceMetrics struct {
	in    *Instruments
	ns    string
	probe Probe
	fct   FailedClosedTimer // probe, when it keeps the time itself

	addBase     []metric.AddOption
	recordBase  []metric.RecordOption
	observeBase []metric.ObserveOption
	applies     *addOpts
	resnapshots *addOpts
	reconnects  *addOpts
	states      []metric.ObserveOption // per knownStates

	// The fail-closed time summed from samples, when probe is no
	// FailedClosedTimer; guarded by mu.
	mu         sync.Mutex
	lastSample time.Time
	closedTime time.Duration

	closeOnce sync.Once
	reg       metric.Registration
	closeErr  error
}

// Namespace is the name the metrics are recorded for.
func (m *NamespaceMetrics) Namespace() string {
	if m == nil {
		return ""
	}
	return m.ns
}

// Apply counts an update handled with result: telemetry.ResultApplied,
// telemetry.ResultRejected, telemetry.ResultDuplicate or (a staged
// change that prevalidation rejected) telemetry.ResultWouldReject.
func (m *NamespaceMetrics) Apply(result string) {
	if m == nil {
		return
	}
	m.in.applies.Add(context.Background(), 1, m.applies.get(result)...)
}

// Resnapshot counts a full snapshot fetch for reason (Resnapshot*).
func (m *NamespaceMetrics) Resnapshot(reason string) {
	if m == nil {
		return
	}
	m.in.resnapshots.Add(context.Background(), 1, m.resnapshots.get(reason)...)
}

// Reconnect counts a watch stream re-opened for reason (Reconnect*).
func (m *NamespaceMetrics) Reconnect(reason string) {
	if m == nil {
		return
	}
	m.in.reconnects.Add(context.Background(), 1, m.reconnects.get(reason)...)
}

// Breach counts a transition into breach: stale past MaxStaleness,
// fail-open or fail-closed.
func (m *NamespaceMetrics) Breach() {
	if m == nil {
		return
	}
	m.in.breaches.Add(context.Background(), 1, m.addBase...)
}

// PersistError counts a failed write of the last-good file.
func (m *NamespaceMetrics) PersistError() {
	if m == nil {
		return
	}
	m.in.persistErrors.Add(context.Background(), 1, m.addBase...)
}

// CallbackDuration records the run time of one callback call.
func (m *NamespaceMetrics) CallbackDuration(d time.Duration) {
	if m == nil {
		return
	}
	m.in.callbackDuration.Record(context.Background(), d.Seconds(), m.recordBase...)
}

// PropagationDelay records the time from the server's commit of a change
// (its committed_at) to its apply here. A negative delay, from clocks that
// disagree, is recorded as 0; call it only for changes that carry a
// committed_at.
func (m *NamespaceMetrics) PropagationDelay(d time.Duration) {
	if m == nil {
		return
	}
	m.in.propagationDelay.Record(context.Background(), max(d, 0).Seconds(), m.recordBase...)
}

// Close unregisters the namespace's callbacks: its gauges and observed
// counters stop reporting from the next collection on, and the namespace
// can be registered again. It is idempotent; the event methods still work
// after it.
func (m *NamespaceMetrics) Close() error {
	if m == nil {
		return nil
	}
	m.closeOnce.Do(func() {
		if err := m.reg.Unregister(); err != nil {
			m.closeErr = fmt.Errorf("instrument: namespace %q: %w", m.ns, err)
		}
		m.in.mu.Lock()
		delete(m.in.namespaces, m.ns)
		m.in.mu.Unlock()
	})
	return m.closeErr
}

// observe is the namespace's callback: it reads the probe once per
// collection.
func (m *NamespaceMetrics) observe(_ context.Context, o metric.Observer) error {
	in, p, opts := m.in, m.probe, m.observeBase
	if s := p.Staleness(); s >= 0 {
		o.ObserveFloat64(in.staleness, s.Seconds(), opts...)
	}
	o.ObserveInt64(in.revisionApplied, p.Revision(), opts...)
	if ms := p.MaxStaleness(); ms > 0 {
		o.ObserveFloat64(in.maxStaleness, ms.Seconds(), opts...)
	}
	if a := p.HeadAge(); a >= 0 {
		o.ObserveFloat64(in.headAge, a.Seconds(), opts...)
	}
	if lag := p.HeadLag(); lag >= 0 {
		o.ObserveInt64(in.revisionLag, lag, opts...)
	}
	if st := p.State(); slices.Contains(knownStates, st) {
		for i, s := range knownStates {
			o.ObserveInt64(in.state, b2i(s == st), m.states[i])
		}
	}
	failedClosed := p.FailedClosed()
	o.ObserveInt64(in.breached, b2i(p.Breached() || failedClosed), opts...)
	o.ObserveInt64(in.failedClosed, b2i(failedClosed), opts...)
	o.ObserveFloat64(in.failedClosedTime, m.failedClosedTime(failedClosed).Seconds(), opts...)
	o.ObserveInt64(in.typeMismatches, p.TypeMismatches(), opts...)
	o.ObserveInt64(in.callbackPanics, p.CallbackPanics(), opts...)
	return nil
}

// failedClosedTime is the cumulative time failed closed: the probe's own,
// or the sum of the intervals between samples that ended failed closed.
func (m *NamespaceMetrics) failedClosedTime(failedClosed bool) time.Duration {
	if m.fct != nil {
		return m.fct.FailedClosedTime()
	}
	now := m.in.now()
	m.mu.Lock()
	defer m.mu.Unlock()
	if failedClosed && !m.lastSample.IsZero() && now.After(m.lastSample) {
		m.closedTime += now.Sub(m.lastSample)
	}
	m.lastSample = now
	return m.closedTime
}

func b2i(b bool) int64 {
	if b {
		return 1
	}
	return 0
}

// addOpts holds the measurement options of one counter of one namespace,
// one per attribute value: each built at its first count, then reused, so
// that counting allocates nothing. Built at the first count, not up front:
// most values (a reconnect's reason, a resnapshot's) never occur in most
// namespaces, and a fleet process that holds thousands of clients kept
// some sixty objects per namespace for them, each one more for its GC to
// mark.
type addOpts struct {
	ns    attribute.KeyValue
	key   attribute.Key
	known []valueOpts // values fixed by newAddOpts; a scan of a few beats a map

	mu    sync.Mutex
	extra map[string][]metric.AddOption
}

func newAddOpts(ns attribute.KeyValue, key attribute.Key, values []string) *addOpts {
	a := &addOpts{ns: ns, key: key, known: make([]valueOpts, len(values))}
	for i, v := range values {
		a.known[i].value = v
	}
	return a
}

type valueOpts struct {
	value string
	opts  atomic.Pointer[[]metric.AddOption] // nil until the value's first count
}

func (a *addOpts) build(v string) []metric.AddOption {
	return []metric.AddOption{metric.WithAttributeSet(attribute.NewSet(a.ns, a.key.String(v)))}
}

// knownOpts returns the options of a.known[i], building them at the first
// call; racing first calls build one each and all return the first stored.
func (a *addOpts) knownOpts(i int) []metric.AddOption {
	o := &a.known[i].opts
	if p := o.Load(); p != nil {
		return *p
	}
	built := a.build(a.known[i].value)
	if o.CompareAndSwap(nil, &built) {
		return built
	}
	return *o.Load()
}

// get returns the options for value v, caching up to maxExtraValues values
// beyond the known ones; past that, v counts as telemetry.ValueOther.
func (a *addOpts) get(v string) []metric.AddOption {
	for i := range a.known {
		if a.known[i].value == v {
			return a.knownOpts(i)
		}
	}
	return a.getExtra(v)
}

// getExtra is get's slow path, for values outside the known ones.
func (a *addOpts) getExtra(v string) []metric.AddOption {
	a.mu.Lock()
	defer a.mu.Unlock()
	if o, ok := a.extra[v]; ok {
		return o
	}
	if len(a.extra) >= maxExtraValues {
		return a.knownOpts(len(a.known) - 1) // telemetry.ValueOther, last of every known list
	}
	if a.extra == nil {
		a.extra = make(map[string][]metric.AddOption)
	}
	o := a.build(v)
	a.extra[v] = o
	return o
}
