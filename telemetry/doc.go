// Package telemetry names what holdfast's config client reports through
// OpenTelemetry, and ships what reads it: a Grafana dashboard
// (dashboards/holdfast.json, also Dashboard) and Prometheus alerting rules
// (alerts/holdfast.rules.yml, also AlertRules, unit-tested by
// alerts/holdfast.test.yml). holdfast server and holdfast relay have theirs
// beside them: dashboards/holdfast-server.json (ServerDashboard) and
// alerts/holdfast-server.rules.yml (ServerAlertRules, unit-tested by
// alerts/holdfast-server.test.yml), over the series
// dashboards/holdfast-server.series lists (docs/SERVER.md, "Metrics").
//
// A config.Client records its metrics and spans through the MeterProvider
// and TracerProvider given to config.WithMeterProvider and
// config.WithTracerProvider (default: the global ones). holdfast depends on
// the OpenTelemetry API only: the application chooses the SDK and the
// exporter. This package holds names an application may need, to filter,
// to write views or queries, or to test: the instrument names (Name*), the
// attribute keys (Attr*) and values, the span names (Span*) and the
// instrumentation scope (ScopeName).
//
// # Instruments
//
// Names are dot-separated with a holdfast. prefix; units are UCUM, never in
// the name. Every instrument carries holdfast.namespace (AttrNamespace), the
// namespace's name. It is not called "namespace": in Kubernetes, Prometheus
// attaches the pod's namespace as a "namespace" target label, and a metric
// label of the same name would be renamed to exported_namespace on scrape.
// In the table, namespace stands for holdfast.namespace.
//
//	name                             kind                  unit          attributes         meaning
//	holdfast.staleness               gauge (observable)    s             namespace          time since the client last confirmed its data current (a snapshot, a change or a progress event)
//	holdfast.max_staleness           gauge (observable)    s             namespace          the namespace's MaxStaleness, the staleness it breaches past (not reported without one)
//	holdfast.head.age                gauge (observable)    s             namespace          time since the server last told the client its head revision (a snapshot, a change or a progress event); not reported before the first
//	holdfast.revision.applied        gauge (observable)    {revision}    namespace          the revision of the last good data applied
//	holdfast.revision.lag            gauge (observable)    {revision}    namespace          the LAST KNOWN lag: the server's head as last told (see holdfast.head.age) minus the applied revision; not reported while unknown
//	holdfast.state                   gauge (observable)    {namespace}   namespace, state   1 for the namespace's current state (State*), 0 for the others
//	holdfast.state.breached          gauge (observable)    {namespace}   namespace          1 while stale past MaxStaleness, under either policy; else 0
//	holdfast.state.failed_closed     gauge (observable)    {namespace}   namespace          1 while a fail-closed namespace serves its Defaults; else 0
//	holdfast.failed_closed.time      counter (observable)  s             namespace          cumulative time spent failed closed
//	holdfast.getter.type_mismatches  counter (observable)  {call}        namespace          getter calls that found another type than asked and returned the default
//	holdfast.callback.panics         counter (observable)  {panic}       namespace          change and status callbacks that panicked (recovered)
//	holdfast.applies                 counter               {apply}       namespace, result  updates handled: applied, rejected (failed its checks; the last good kept), duplicate, would_reject (a staged rollout's change failed this client's prevalidation; the base kept)
//	holdfast.resnapshots             counter               {resnapshot}  namespace, reason  full snapshot fetches: initial, compacted, gap, store_reset, bad_cursor, backstop, ...
//	holdfast.reconnects              counter               {reconnect}   namespace, reason  watch streams re-opened: idle, eof, error, unauthorized, throttled, ...
//	holdfast.breaches                counter               {breach}      namespace          transitions into breach (stale past MaxStaleness), fail-open or fail-closed
//	holdfast.persist.errors          counter               {error}       namespace          failed writes of the last-good file
//	holdfast.callback.duration       histogram             s             namespace          run time of one callback call
//	holdfast.propagation.delay       histogram             s             namespace          apply time minus the server's committed_at of the change (clamped at 0)
//
// The gauges and observable counters are read at each collection, and stop
// reporting for a namespace once it closes. holdfast.revision.lag only
// moves when the server says something: a client cut off keeps its last
// value (0, usually), so read it next to holdfast.head.age. A result or
// reason outside the known values is reported as it is, up to 16 distinct
// ones per instrument and namespace; past that as ValueOther.
//
// # Prometheus names
//
// Through the OpenTelemetry Prometheus exporter (go.opentelemetry.io/otel/
// exporters/prometheus, default translation), dots become underscores, the
// unit adds a suffix (s: _seconds; annotations in braces add none), counters
// end in _total, and histograms expose _bucket, _sum and _count:
//
//	holdfast_staleness_seconds                 holdfast_applies_total
//	holdfast_max_staleness_seconds             holdfast_resnapshots_total
//	holdfast_head_age_seconds                  holdfast_reconnects_total
//	holdfast_revision_applied                  holdfast_breaches_total
//	holdfast_revision_lag                      holdfast_persist_errors_total
//	holdfast_state                             holdfast_callback_duration_seconds_bucket
//	holdfast_state_breached                    holdfast_propagation_delay_seconds_bucket
//	holdfast_state_failed_closed               holdfast_getter_type_mismatches_total
//	holdfast_failed_closed_time_seconds_total  holdfast_callback_panics_total
//
// with the labels holdfast_namespace, state, result and reason (and the
// exporter's otel_scope_name). Tests in the module internal/otelcheck prove
// these names against the real exporter, and every query of the dashboard
// and the alert rules. Both assume that default translation
// (otlptranslator.UnderscoreEscapingWithSuffixes); an exporter set to keep
// UTF-8 names (NoUTF8EscapingWithSuffixes) exports names that keep their
// dots, which their queries do not match.
//
// # Traces
//
// A snapshot fetch is a span SpanSnapshot, a whole resnapshot (the fetch,
// the checks, the apply) a span SpanResnapshot, each with AttrNamespace.
package telemetry
