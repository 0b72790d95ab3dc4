// Package telemetry holds holdfast's OpenTelemetry instruments, and the
// Grafana dashboard that reads them (dashboards/holdfast.json).
//
// It depends on the OpenTelemetry API only. The application chooses the SDK
// and the exporter; with none set, the global MeterProvider is used, so
// instruments made before the application sets its provider are forwarded
// to it, and cost next to nothing until then.
//
// # Use
//
// A config.Client makes one Instruments from its MeterProvider, and one
// NamespaceMetrics per open namespace:
//
//	in, err := telemetry.New(mp) // nil: otel.GetMeterProvider()
//	m, err := in.Namespace("payments.prod", probe)
//	m.Apply(telemetry.ResultApplied)
//	m.PropagationDelay(time.Since(committedAt))
//	...
//	m.Close() // the namespace's gauges and observed counters stop reporting
//
// The Probe is read in the instruments' callbacks, at each collection, and
// so must be safe for concurrent use and cheap: atomics, or a short lock.
// Every method of a nil *NamespaceMetrics, a nil *Instruments and a nil
// *Tracer is a no-op, so a client without telemetry pays one nil check.
//
// The event methods (Apply, CallbackDuration, ...) do not allocate: the
// attribute sets of each namespace and each known result or reason are
// built once, in Namespace. A value outside the known sets is accepted and
// cached too, up to 16 distinct values per instrument and namespace; past
// that it is counted as "other", so a bug cannot explode the cardinality.
//
// # Instruments
//
// Names are dot-separated with a holdfast. prefix; units are UCUM, given
// with WithUnit, never in the name. Every instrument carries
// holdfast.namespace (AttrNamespace), the namespace's name. It is not
// called "namespace": in Kubernetes, Prometheus attaches the pod's
// namespace as a "namespace" target label, and a metric label of the same
// name would be renamed to exported_namespace on scrape. In the table,
// namespace stands for holdfast.namespace.
//
//	name                             kind                  unit          attributes         meaning
//	holdfast.staleness               gauge (observable)    s             namespace          time since the client last confirmed its data current (a snapshot, a change or a progress event)
//	holdfast.revision.applied        gauge (observable)    {revision}    namespace          the revision of the last good data applied
//	holdfast.revision.lag            gauge (observable)    {revision}    namespace          how far the applied revision is behind the server's head (not reported while unknown)
//	holdfast.state.breached          gauge (observable)    {namespace}   namespace          1 while stale past MaxStaleness, under either policy; else 0
//	holdfast.state.failed_closed     gauge (observable)    {namespace}   namespace          1 while a fail-closed namespace serves its Defaults; else 0
//	holdfast.failed_closed.time      counter (observable)  s             namespace          cumulative time spent failed closed (see FailedClosedTimer)
//	holdfast.getter.type_mismatches  counter (observable)  {call}        namespace          getter calls that found another type than asked and returned the default
//	holdfast.callback.panics         counter (observable)  {panic}       namespace          change and status callbacks that panicked (recovered)
//	holdfast.applies                 counter               {apply}       namespace, result  updates handled: applied, rejected (failed its checks; the last good kept), duplicate
//	holdfast.resnapshots             counter               {resnapshot}  namespace, reason  full snapshot fetches: initial, compacted, gap, store_reset, bad_cursor, backstop
//	holdfast.reconnects              counter               {reconnect}   namespace, reason  watch streams re-opened: idle, eof, error, unauthorized, throttled, ...
//	holdfast.breaches                counter               {breach}      namespace          transitions into breach (stale past MaxStaleness), fail-open or fail-closed
//	holdfast.persist.errors          counter               {error}       namespace          failed writes of the last-good file
//	holdfast.callback.duration       histogram             s             namespace          run time of one callback call
//	holdfast.propagation.delay       histogram             s             namespace          apply time minus the server's committed_at of the change (clamped at 0)
//
// The gauges and observable counters are read from the Probe at collection;
// after NamespaceMetrics.Close they no longer report for that namespace.
//
// # Prometheus names
//
// Through the OpenTelemetry Prometheus exporter (go.opentelemetry.io/otel/
// exporters/prometheus, default translation), dots become underscores, the
// unit adds a suffix (s: _seconds; annotations in braces add none), counters
// end in _total, and histograms expose _bucket, _sum and _count:
//
//	holdfast_staleness_seconds                 holdfast_applies_total
//	holdfast_revision_applied                  holdfast_resnapshots_total
//	holdfast_revision_lag                      holdfast_reconnects_total
//	holdfast_state_breached                    holdfast_breaches_total
//	holdfast_state_failed_closed               holdfast_persist_errors_total
//	holdfast_failed_closed_time_seconds_total  holdfast_callback_duration_seconds_bucket
//	holdfast_getter_type_mismatches_total      holdfast_propagation_delay_seconds_bucket
//	holdfast_callback_panics_total
//
// with the labels holdfast_namespace, result and reason (and the
// exporter's otel_scope_name). The test TestDashboardQueriesExportedNames
// proves these names against the real exporter and every query of the
// dashboard. The dashboard assumes that default translation
// (otlptranslator.UnderscoreEscapingWithSuffixes); an exporter set to keep
// UTF-8 names (NoUTF8EscapingWithSuffixes) exports names that keep their
// dots, which its queries do not match.
//
// # Traces
//
// NewTracer wraps a TracerProvider (nil: the global one) for the spans of a
// snapshot fetch (SpanSnapshot) and a resnapshot (SpanResnapshot).
package telemetry
