// Package transport defines how a holdfast client talks to a config plane:
// the Source interface, its errors, and the wire types of the data-plane
// protocol (JSON over HTTP, with Server-Sent Events for watches), shared by
// the HTTP source and the reference server.
//
// A Source fetches snapshots and watches from a cursor; it does not
// reconnect, resnapshot or back off. Those live in package config, so that
// every Source gets them.
//
// Errors are values: ErrCompacted (as *CompactedError), ErrNotFound,
// ErrUnauthorized, ErrTooLarge, ErrMalformed, ErrStreamIdle and
// *StatusError for any other non-success reply. Test them with errors.Is
// and errors.As.
package transport
