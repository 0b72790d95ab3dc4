// Package transport defines how a holdfast client talks to a config plane:
// the Source interface, its errors, and the wire types of the data-plane
// protocol (JSON over HTTP, with Server-Sent Events for watches), shared by
// the HTTP source and the servers. The bodies that the servers and the
// relay encode too are defined once, in the project's internal/wire
// package: Ack and ChangeSet are aliases of its types.
//
// A Source fetches snapshots and watches from a cursor; it does not
// reconnect, resnapshot or back off. Those live in package config, so that
// every Source gets them.
//
// Errors are values: ErrCompacted (as *CompactedError), ErrNotFound (the
// server has no such namespace), ErrNotHoldfast (what answered is not a
// holdfast server: check the base URL), ErrCursorAhead (the server's
// history is not the one the cursor came from: resnapshot),
// ErrUnauthorized, ErrTooLarge, ErrMalformed, ErrStreamIdle, and
// *StatusError for every non-success reply (it unwraps to the sentinel
// and names the server's store). Test them with errors.Is and errors.As.
//
// # The HTTP source
//
// HTTPSource is the Source of the data-plane protocol (docs/PROTOCOL.md in
// the repository):
//
//	src, err := transport.NewHTTPSource("https://config.example.com",
//		transport.WithBearerToken(token), transport.WithWatchMode(transport.WatchAuto))
//	snap, err := src.Snapshot(ctx, transport.SnapshotRequest{Namespace: "payments.prod"})
//	err = src.Watch(ctx, transport.WatchRequest{Namespace: "payments.prod", Since: snap.Cursor},
//		func(ev transport.Event) error { ...; return nil })
//
// Snapshot is GET /sdk/snapshot, conditional (If-None-Match on the ETag
// "<store_id>.<revision>") when the request names the data already held,
// in which case an unchanged namespace returns ErrNotModified and costs no
// body; replies may be gzipped. Watch follows GET /sdk/watch as
// Server-Sent Events (WatchSSE), or repeats GET /sdk/events long-polls
// (WatchLongPoll), or starts with SSE and switches to long-poll when
// streams keep failing before their first event while plain requests
// succeed, as behind a proxy that buffers streams (WatchAuto). Ack is POST
// /sdk/ack.
//
// Everything read from the server is bounded: an event by
// WithMaxEventBytes (1 MiB), a snapshot or long-poll reply after
// decompression by WithMaxSnapshotBytes (64 MiB), an error body by 64 KiB;
// a larger one fails with ErrTooLarge. A snapshot that receives no bytes,
// or a watch stream that delivers no whole event, for the idle timeout
// (WithIdleTimeout; unless set, 15 s, and for an SSE stream's events after
// its headers three of the heartbeats the server advertises), before or
// after its response headers, fails with
// ErrStreamIdle: keepalive comments from a proxy whose upstream is gone do
// not keep a stream alive. Every message is checked before it is delivered (its
// namespace, a store id, 0 <= revision <= cursor, prev_revision < revision);
// one that fails is ErrMalformed and nothing of it is delivered.
//
// The source speaks protocol version ProtocolVersion: it says so on every
// request (Holdfast-Protocol), declares no capability, and records what
// the server advertises (ServerInfo). Servers of version 0 work as before.
//
// # Several endpoints
//
// FailoverSource is a Source over several HTTP sources whose endpoints
// serve the same store (servers or relays of one config plane): every
// request goes to the current one; a failure of the endpoint (not of the
// request) makes the next one current, the caller resuming there from
// its cursor; a background probe returns to the first once it has been
// healthy for WithFailbackAfter, moving running watches without ending
// them. EndpointReporter says which endpoint serves.
//
// The bearer token is sent only to the base URL's host. Close closes idle
// connections; it does not end running watches: cancel their contexts.
package transport
