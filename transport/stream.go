package transport

import (
	"context"
	"errors"
)

// A stream is one watch that carries several namespaces: the
// multi-namespace watch of protocol version 1 (capability
// CapabilityStream; docs/PROTOCOL.md, "GET /sdk/stream"). The revision
// space of a store is global, so one cursor speaks for every namespace of
// a stream: a progress event at cursor C says that each of them is
// complete up to C.

// CapabilityStream is the capability of the multi-namespace watch. A
// server lists it in HeaderCapabilities when it serves PathStream and
// PathStreamEvents; a client uses them only then.
const CapabilityStream = "stream"

// Paths of the multi-namespace watch: Server-Sent Events, and the same as
// a long-poll.
const (
	PathStream       = "/sdk/stream"
	PathStreamEvents = "/sdk/stream/events"
)

// EventEnded is the SSE event of a stream that takes one namespace out of
// it (its body a NamespaceEnded); the others go on.
const EventEnded = "ended"

// CodeInvalidNamespace is the code of an ended event for a name that is
// not a valid namespace name (ErrInvalidNamespace on the client).
const CodeInvalidNamespace = "invalid_namespace"

// CapabilityH2C: the server speaks HTTP/2 with prior knowledge (h2c) on
// its plain-http listener, beside HTTP/1.1.
const CapabilityH2C = "h2c"

// MaxStreamNamespaces is how many namespaces one stream may carry. A
// request with more is refused whole (400 bad_request).
const MaxStreamNamespaces = 1000

// ErrStreamUnsupported is returned by StreamSource.WatchStream when the
// other side does not offer the multi-namespace watch (an older server, or
// one that did not list CapabilityStream). The caller falls back to a
// Watch per namespace.
var ErrStreamUnsupported = errors.New("transport: the server does not offer the multi-namespace watch")

// StreamSource is a Source that can also carry several namespaces over one
// watch. Resume, resnapshot and backoff stay with the caller, as for Watch:
// a stream is only the wire.
type StreamSource interface {
	Source
	// WatchStream delivers, in store order, every change after each
	// namespace's Since of every namespace in req, and progress events for
	// the whole stream, calling handle for each from a single goroutine,
	// until ctx ends, handle returns an error or the stream fails. Trouble
	// with one namespace (compacted, not found, not authorized, its cursor
	// ahead of the head, an invalid name) is an Ended event for it; the
	// stream goes on with the others. It always returns a non-nil error:
	// ctx.Err(), handle's error, ErrStreamUnsupported, or a transport
	// error; a request the server refuses whole (too many namespaces, one
	// named twice) fails with an error wrapping ErrBadRequest.
	WatchStream(ctx context.Context, req StreamRequest, handle func(StreamEvent) error) error
}

// StreamRequest names the namespaces of a stream, each with the cursor it
// resumes from. Each namespace appears once.
type StreamRequest struct {
	Namespaces []WatchRequest
}

// StreamEvent is one item of a stream: exactly one field is set.
type StreamEvent struct {
	// Change is one revision of one namespace of the stream (its
	// Namespace says which).
	Change *ChangeSet
	// Progress speaks for the whole stream.
	Progress *StreamProgress
	// Ended takes one namespace out of the stream.
	Ended *NamespaceEnded
}

// StreamProgress says that the stream is alive and that every namespace
// still in it is complete up to Cursor: nothing of theirs changed between
// their last change delivered (or the cursor they joined at) and Cursor.
// AgeMillis and Unconfirmed are the age of relayed data, for every
// namespace of the stream (see Snapshot).
type StreamProgress struct {
	StoreID     string `json:"store_id"`
	Cursor      int64  `json:"cursor"`
	AgeMillis   int64  `json:"age_ms,omitempty"`
	Unconfirmed bool   `json:"unconfirmed,omitempty"`
}

// NamespaceEnded takes one namespace out of a stream; the stream goes on
// with the others. Err is what its own Watch would have returned:
// ErrCompacted (a *CompactedError), ErrNotFound, ErrUnauthorized,
// ErrCursorAhead, ErrInvalidNamespace, or a *StatusError.
type NamespaceEnded struct {
	Namespace string
	Err       error
}

// BatchAcker is implemented by sources that can report several acks in
// one request (capability CapabilityAckBatch over HTTP).
type BatchAcker interface {
	AckBatch(ctx context.Context, acks []Ack) error
}

// CapabilityAckBatch is the capability of a POST /sdk/ack whose body is a
// batch: {"client_id":…,"acks":[Ack,…]}, the acks of one client.
const CapabilityAckBatch = "ack-batch"
