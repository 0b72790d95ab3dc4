// Package syncer follows one namespace of a config plane through a
// transport.Source: snapshot, watch from the cursor, resume after a
// disconnect, resnapshot on compaction, a gap, a new store or rewritten
// history, back off with jitter and never give up.
//
// A Syncer owns the namespace's sync state on its one goroutine: the
// applied data (the monotonic floor), the cursor, the store id, the head,
// the revision last rejected and the backoff. Nothing
// else reads or writes it, so it takes no lock; it builds and checks every
// new snapshot on that goroutine and reports what happened through a Sink,
// in order: Applied, Confirmed, Failed, Rejected. What is served and which
// state the namespace is in are decided by the Sink's owner (package config
// for an application's namespace, the relay for its upstream).
//
// # The monotonic floor and rewritten history
//
// Within one store id the applied revision never goes back. A server whose
// head is behind what was applied, under the same store id, is either a
// lagging replica (it catches up within seconds) or a store restored from a
// backup (new history). Until it is known to be new history the Syncer
// refuses the older data and reports a failure, so the last good keeps
// serving, never as fresh. It is new history once the evidence (the server
// refusing the cursor as above its head, snapshots behind the floor) has
// lasted Config.RewriteGrace, or at once when a snapshot is a linearizable
// read of the store itself (transport.Snapshot.Linearizable). Then the
// floor is reset, the snapshot applied, and the reset logged and counted.
package syncer
