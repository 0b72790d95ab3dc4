package transport

import "context"

// Source is a config plane seen from one client: it fetches snapshots of a
// namespace and watches it from a cursor. The HTTP source is the first
// implementation. Reconnects, resnapshots and backoff live above it, in
// package config, so every Source gets them.
//
// Implementations are safe for concurrent use by several namespaces.
type Source interface {
	// Snapshot fetches the namespace's full content. When req names the
	// store id and revision the caller already holds and the namespace has
	// not changed since, it returns a *Snapshot with nil Values and
	// ErrNotModified; the Snapshot still carries the current Cursor.
	Snapshot(ctx context.Context, req SnapshotRequest) (*Snapshot, error)

	// Watch delivers, in order, every change of the namespace after
	// req.Since and progress events, calling handle for each one from a
	// single goroutine, until ctx ends, handle returns an error, or the
	// stream fails. It always returns a non-nil error: ctx.Err(), handle's
	// error, ErrCompacted (a *CompactedError), or a transport error.
	Watch(ctx context.Context, req WatchRequest, handle func(Event) error) error
}

// SnapshotRequest asks for a namespace's snapshot.
type SnapshotRequest struct {
	Namespace string
	// KnownStoreID and KnownRevision, when KnownStoreID is set, make the
	// request conditional (If-None-Match over HTTP).
	KnownStoreID  string
	KnownRevision int64
}

// WatchRequest asks for a namespace's changes after Since.
type WatchRequest struct {
	Namespace string
	Since     int64
}

// Event is one item of a watch: exactly one of Change and Progress is set.
type Event struct {
	Change   *ChangeSet
	Progress *Progress
}

// ClientIDDefaulter is implemented by sources that name their client to
// their server (HeaderClientID): a server with tokens takes a client's
// acks from the identity it connected as. package config calls it with
// its client id; a source given an id of its own (WithClientID) keeps it.
type ClientIDDefaulter interface {
	DefaultClientID(id string)
}

// Acker is implemented by sources that can report what a client applied or
// rejected back to the config plane.
type Acker interface {
	Ack(ctx context.Context, ack Ack) error
}
