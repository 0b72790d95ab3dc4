// Package dataplane serves holdfast's data plane, the SDK-facing protocol
// of package transport (docs/PROTOCOL.md): GET /sdk/snapshot, the
// long-poll /sdk/events, the SSE watch /sdk/watch, the multi-namespace
// /sdk/stream and /sdk/stream/events, and the acks (/sdk/ack,
// /sdk/ack/stream, /sdk/ack/cohort), over a Backend: the in-memory MVCC
// store of the reference server (internal/fakeserver), or the follower
// store of a watch cache: a relay's, of its upstream, and holdfast
// server's, of its etcd store.
//
// It keeps what is the data plane's own: the watch hub (hub.go), which
// fans a backend's changes out to watchers off the commit path, each with
// a bounded queue (WithWatcherBuffer: a watcher that falls further behind
// is disconnected, never silently skipped; its client resumes from its
// cursor; a stream that cannot take a batch of writes within max(10s, 3
// heartbeats) is disconnected too); the heartbeat and, behind a relay,
// the beats that pass its upstream's freshness on (stream.go); request
// decoding (decode.go, ackdecode.go); the token gate (access.go, package
// access); old clients' view without reserved keys (reserved.go);
// snapshot admission (WithMaxSnapshotsInFlight, admission.go: replies
// counted while they make progress, fairly across peers); and the acks: recorded
// at an origin (Clients, cohort.go), handed to a relay's forwarder
// (WithAckSink) there.
//
// Cursors: a snapshot's cursor is the backend's head when it was read; a
// stream's first event after its backlog is a progress event at that
// cursor, and every event id is a cursor: no change of the namespace sent
// after it is at or below it.
//
// Clients that predate staged rollouts: to a request whose
// Holdfast-Capabilities does not list transport.CapabilityRollout, every
// reply leaves out reserved keys (rollout.Reserved): snapshots (with an
// ETag of their own, "<store_id>.base.<revision>", when the content held
// any) and change sets (a change of only reserved keys is an empty one of
// the same revision and prev_revision).
//
// Faults are not the data plane's: a test server passes its own
// (WithFaults, see Faults), which the data plane asks on every request's
// path; without one there are none. Other routes (the reference server's
// control API) are mounted with WithRoutes.
package dataplane
