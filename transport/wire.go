package transport

import (
	"encoding/json"

	"github.com/holdfast-dev/holdfast/internal/wire"
)

// Paths of the data-plane endpoints, relative to the server's base URL.
const (
	PathSnapshot = "/sdk/snapshot"
	PathEvents   = "/sdk/events"
	PathWatch    = "/sdk/watch"
	PathAck      = "/sdk/ack"
)

// Response headers every data-plane reply carries, so that a 304 (which has no
// body) still names the store and the cursor.
const (
	HeaderStoreID  = "Holdfast-Store-Id"
	HeaderRevision = "Holdfast-Revision"
	HeaderCursor   = "Holdfast-Cursor"
)

// ProtocolVersion is the version of the data-plane protocol this package
// speaks (docs/PROTOCOL.md). A peer that names no version speaks version 0,
// the protocol as it was before versions were named.
const ProtocolVersion = 1

// Headers of version negotiation. A client sends HeaderProtocol (and
// HeaderCapabilities, when it has any) on every request; a server of
// version 1 or later sends HeaderProtocol, HeaderCapabilities (when it has
// any) and HeaderHeartbeat on every data-plane reply. Peers of version 0
// send none and ignore them.
const (
	// HeaderProtocol carries the sender's protocol version, a decimal
	// integer. A server speaks to a client at the lower of the two.
	HeaderProtocol = "Holdfast-Protocol"
	// HeaderCapabilities is a comma-separated list of capability tokens
	// ([a-z0-9-]+): on a request, what the client can handle; on a reply,
	// what the server offers. A feature beyond the base protocol (a new
	// event type, a new query parameter, a field a client must not ignore)
	// is used only when both sides list its capability.
	HeaderCapabilities = "Holdfast-Capabilities"
	// HeaderHeartbeat is the server's heartbeat interval in whole
	// milliseconds: on a quiet watch a progress event comes at least this
	// often. A client with no idle timeout of its own derives its idle
	// timeout from it (three heartbeats).
	HeaderHeartbeat = "Holdfast-Heartbeat-Ms"
)

// Headers of the age of relayed data (docs/PROTOCOL.md, "Age of relayed
// data"). A server that serves data it got from an upstream (a relay) may
// send them on every data-plane reply but errors; an origin sends neither:
// its data is current by definition. Peers that predate them ignore them.
const (
	// HeaderAge is how long before the reply was written the server's
	// upstream last confirmed the data: whole milliseconds, a decimal
	// integer >= 0. Absent means 0. Along a chain of relays ages add up.
	HeaderAge = "Holdfast-Age"
	// HeaderUnconfirmed, with the value "true", says that the server's
	// upstream is not confirming the data right now (the relay is cut
	// off, or its own upstream said so): the data is served, but must not
	// be called fresh. A client reads any value but "false" as true.
	HeaderUnconfirmed = "Holdfast-Unconfirmed"
)

// MaxAge bounds the age a client takes from a server: a larger one (an
// absurd value; ten years) is read as MaxAge, never as younger.
const MaxAge = wire.MaxAge

// SSE event names on /sdk/watch.
const (
	EventChange   = "change"
	EventProgress = "progress"
)

// Ack statuses.
const (
	AckApplied  = wire.AckApplied
	AckRejected = wire.AckRejected
	// AckWouldReject is a prevalidation's report (docs/PROTOCOL.md,
	// "Staged rollouts"): the client's checks reject the staged change of
	// rollout Ack.Rollout, carried by Ack.Revision, whether or not the
	// client is in the stage; nothing was applied or rejected by it.
	AckWouldReject = wire.AckWouldReject
)

// Error codes carried in ErrorBody.Error.
const (
	CodeCompacted  = "compacted"
	CodeNotFound   = "not_found"
	CodeBadRequest = "bad_request"
	// CodeConflict: a write conflicts with the server's state; nothing
	// changed. It comes with 409 Conflict: a publish whose if_revision is
	// not the namespace's revision (with ErrorBody.Revision), or one
	// during a staged rollout.
	CodeConflict = "conflict"
	// CodeCursorAhead: the watch cursor is above the head. It comes with
	// 409 Conflict to clients of protocol version 1 or later, and with 400
	// to clients that name no version (which predate the split of 400; the
	// oldest of them read any 400 on a watch as "resnapshot").
	CodeCursorAhead     = "cursor_ahead"
	CodeTooLarge        = "too_large"
	CodeSchemaViolation = "schema_violation"
	CodeUnauthorized    = "unauthorized"
	CodeForbidden       = "forbidden"
	CodeUnavailable     = "unavailable"
	CodeInternal        = "internal"
)

// Snapshot is the full content of one namespace at one revision:
// the body of GET /sdk/snapshot.
type Snapshot struct {
	Namespace string `json:"ns"`
	StoreID   string `json:"store_id"`
	// Revision is the revision of the namespace's last change.
	Revision int64 `json:"revision"`
	// Cursor is the store revision up to which this view is complete; a
	// watch resumes from it. Cursor >= Revision.
	Cursor          int64 `json:"cursor"`
	CompactRevision int64 `json:"compact_revision"`
	// Values is the namespace's content as on the wire: one JSON object of
	// key to value, kept as text so that a client decodes it once, in
	// place (cache.BuildJSON), rather than into a map of copies first.
	// A source never returns it nil but with ErrNotModified.
	Values json.RawMessage `json:"values"`
	// AgeMillis and Unconfirmed are the age of relayed data (see
	// HeaderAge, HeaderUnconfirmed): how many milliseconds before the
	// reply was written the server's upstream last confirmed this data (0
	// from an origin), and whether that upstream is not confirming it
	// right now. With ErrNotModified they come from the reply's headers.
	AgeMillis   int64 `json:"age_ms,omitempty"`
	Unconfirmed bool  `json:"unconfirmed,omitempty"`
	// Linearizable is set by a source whose snapshot is a linearizable
	// read of the store itself (etcd), never a replica's or a relay's
	// possibly lagging view: a revision behind what the client applied is
	// then proof that the store's history was rewritten.
	Linearizable bool `json:"-"`
}

// ChangeSet is one atomic publish to one namespace: every put and delete of
// it shares one revision. PrevRevision is the namespace's revision before it,
// so a client can tell a gap (PrevRevision != what it applied) from a
// duplicate (Revision <= what it applied). A change carries no age: it is
// the origin's data, passed through relays unchanged. Raw is the change
// set as it came on the wire, when a source decoded it (the HTTP source
// does): a relay serves these bytes, so that fields it does not know pass
// through unchanged. Its fields are internal/wire's, which the server
// side encodes with.
type ChangeSet = wire.ChangeSet

// Progress says that the stream is alive and that nothing changed in the
// namespace up to Cursor. Revision is the namespace's current revision.
// AgeMillis and Unconfirmed are the age of relayed data, as of when the
// event was written (see Snapshot): a relay's progress confirms only what
// its upstream confirmed, that long ago.
type Progress struct {
	Namespace   string `json:"ns"`
	StoreID     string `json:"store_id"`
	Revision    int64  `json:"revision"`
	Cursor      int64  `json:"cursor"`
	AgeMillis   int64  `json:"age_ms,omitempty"`
	Unconfirmed bool   `json:"unconfirmed,omitempty"`
}

// EventsResponse is the body of GET /sdk/events (long-poll). An empty Changes
// still advances Cursor. AgeMillis and Unconfirmed are the age of relayed
// data as of the reply (see Snapshot); the changes carry none.
type EventsResponse struct {
	Namespace   string      `json:"ns"`
	StoreID     string      `json:"store_id"`
	Cursor      int64       `json:"cursor"`
	Revision    int64       `json:"revision"`
	Changes     []ChangeSet `json:"changes"`
	AgeMillis   int64       `json:"age_ms,omitempty"`
	Unconfirmed bool        `json:"unconfirmed,omitempty"`
}

// MaxAckErrorBytes bounds Ack.Error: a client cuts a longer error, and the
// server keeps no more.
const MaxAckErrorBytes = wire.MaxAckErrorBytes

// Ack is the body of POST /sdk/ack: what one client applied or rejected
// (Status: AckApplied, AckRejected or AckWouldReject) of which namespace
// at which revision, with the staged rollout it is about (Rollout) and
// the fields this version does not know (Extra, kept by a relay that
// forwards it). Its fields and encoding are internal/wire's, which the
// server side decodes with.
type Ack = wire.Ack

// ErrorBody is the JSON body of every error reply.
type ErrorBody struct {
	Error   string `json:"error"`
	Message string `json:"message,omitempty"`
	StoreID string `json:"store_id,omitempty"`
	// CompactRevision is set with CodeCompacted.
	CompactRevision int64 `json:"compact_revision,omitempty"`
	// Revision is set with CodeConflict: the namespace's revision now
	// (absent: 0, it has none).
	Revision int64 `json:"revision,omitempty"`
	// Details lists every failure, for example each schema violation.
	Details []string `json:"details,omitempty"`
}
