package telemetry

import "go.opentelemetry.io/otel/attribute"

// ScopeName is the instrumentation scope of every instrument and span
// (the otel_scope_name label in Prometheus).
const ScopeName = "github.com/holdfast-dev/holdfast"

// The names of the instruments; see the package documentation.
const (
	NameStaleness        = "holdfast.staleness"
	NameMaxStaleness     = "holdfast.max_staleness"
	NameHeadAge          = "holdfast.head.age"
	NameRevisionApplied  = "holdfast.revision.applied"
	NameRevisionLag      = "holdfast.revision.lag"
	NameState            = "holdfast.state"
	NameBreached         = "holdfast.state.breached"
	NameFailedClosed     = "holdfast.state.failed_closed"
	NameFailedClosedTime = "holdfast.failed_closed.time"
	NameTypeMismatches   = "holdfast.getter.type_mismatches"
	NameCallbackPanics   = "holdfast.callback.panics"
	NameApplies          = "holdfast.applies"
	NameResnapshots      = "holdfast.resnapshots"
	NameReconnects       = "holdfast.reconnects"
	NameBreaches         = "holdfast.breaches"
	NamePersistErrors    = "holdfast.persist.errors"
	NameCallbackDuration = "holdfast.callback.duration"
	NamePropagationDelay = "holdfast.propagation.delay"
)

// The attribute keys.
const (
	AttrNamespace attribute.Key = "holdfast.namespace"
	AttrResult    attribute.Key = "result"
	AttrReason    attribute.Key = "reason"
	AttrState     attribute.Key = "state" // of holdfast.state
)

// The values of AttrState: a namespace's State (config.State), in
// snake_case. holdfast.state reports each, 1 for the current one and 0
// for the others.
const (
	StateSyncing      = "syncing"       // no data yet; opening
	StateFresh        = "fresh"         // confirmed current over a live connection
	StateStale        = "stale"         // not confirmed current right now, within MaxStaleness
	StateBreached     = "breached"      // fail-open, stale past MaxStaleness, serving the last good
	StateFailedClosed = "failed_closed" // fail-closed, stale past MaxStaleness, serving Defaults
)

// The results of an apply (AttrResult of holdfast.applies).
const (
	ResultApplied   = "applied"   // the data changed
	ResultRejected  = "rejected"  // failed its checks; the last good keeps serving
	ResultDuplicate = "duplicate" // a revision already applied or rejected
	// ResultWouldReject: a staged rollout's change, prevalidated by a
	// client not in its stage, failed its checks; the client reported a
	// would-nack and serves the base (counted besides the base's apply).
	ResultWouldReject = "would_reject"
)

// The reasons of a resnapshot (AttrReason of holdfast.resnapshots).
const (
	ResnapshotInitial    = "initial"     // the first snapshot of the namespace
	ResnapshotCompacted  = "compacted"   // the cursor fell below the server's compaction
	ResnapshotGap        = "gap"         // a change did not chain on the applied revision
	ResnapshotStoreReset = "store_reset" // the server's store id changed
	ResnapshotBadCursor  = "bad_cursor"  // the server refused the cursor
	ResnapshotBackstop   = "backstop"    // a periodic full check
	// ResnapshotCursorAhead: the server refused the cursor as above its
	// head, under the same store id (a lagging replica, or a restore).
	ResnapshotCursorAhead = "cursor_ahead"
	// ResnapshotHistoryRewritten: a snapshot behind the applied revision of
	// the same store id was taken as new history, resetting the floor.
	ResnapshotHistoryRewritten = "history_rewritten"
	// ResnapshotTooLarge: an event was over the size limit.
	ResnapshotTooLarge = "too_large"
)

// The usual reasons of a reconnect (AttrReason of holdfast.reconnects);
// others occur.
const (
	ReconnectIdle         = "idle"         // no byte within the idle timeout
	ReconnectEOF          = "eof"          // the server ended the stream
	ReconnectError        = "error"        // a transport error
	ReconnectUnauthorized = "unauthorized" // 401/403
	ReconnectThrottled    = "throttled"    // 429/503
)

// ValueOther replaces a result or reason once an instrument of a namespace
// has seen too many distinct ones (16 beyond the known values), so that a
// bug cannot explode the cardinality.
const ValueOther = "other"

// The names of the spans.
const (
	// SpanSnapshot covers one snapshot request to the config plane.
	SpanSnapshot = "holdfast.snapshot"
	// SpanResnapshot covers a whole resnapshot: the fetch, the checks and
	// the apply.
	SpanResnapshot = "holdfast.resnapshot"
)
