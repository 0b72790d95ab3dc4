// Package etcd is a holdfast transport.Source over etcd v3, for fleets that
// outgrow one reference server. It lives in a module of its own
// (github.com/holdfast-dev/holdfast/transport/etcd), so the core module
// never pulls gRPC or etcd.
//
// # Mapping
//
// Namespace N is the key prefix "/holdfast/N/"; key k holds one JSON value
// at "/holdfast/N/k". The key "/holdfast/N/" itself (an empty key name,
// which no holdfast key can be) is the namespace's meta key: Publish writes
// it in the same transaction as the puts and deletes, with the namespace's
// previous revision, the commit time and the change's audit (see Audit).
// So:
//
//   - a namespace's revision is the revision of its last publish, deletes
//     included (a delete leaves no key, but the meta key moves);
//   - each change set's PrevRevision chains on the one before, as over HTTP,
//     and a client that sees a gap resnapshots;
//   - the store id is the etcd cluster id (16 hex digits); a cursor is an
//     etcd revision.
//
// Snapshot is one linearizable range read of the prefix (its header revision
// is the cursor). Watch is one etcd watch from the cursor + 1 that confirms
// the namespace current every heartbeat (a linearizable read of the meta
// key, or an etcd progress request with WithProgressRequests); ErrCompacted from etcd becomes a
// *transport.CompactedError, and the client resnapshots. Write through
// Publish (or write the meta key in the same transaction yourself): a put
// made past it is delivered, but a delete made past it does not move the
// namespace's revision.
//
// # Stream
//
// WatchStream (transport.StreamSource) carries every namespace of a client
// over one etcd watch of the whole KeyRoot prefix: one etcd watcher, on
// one gRPC stream, however many namespaces. A write to any namespace, one
// the stream carries or not, advances the stream's cursor as soon as the
// watch delivers it, with no request: a client's global revision follows
// every publish within milliseconds. The cost is that every client
// receives every write under KeyRoot. Per-namespace trouble (compacted,
// cursor ahead, invalid name, too large) ends that namespace only.
//
// # Use
//
//	src, err := etcd.New(etcd.WithEndpoints("https://etcd-0:2379", "https://etcd-1:2379", "https://etcd-2:2379"),
//		etcd.WithTLS(tlsConfig), etcd.WithAuth("holdfast", password))
//	if err != nil { ... }
//	defer src.Close()
//	client, err := config.New(config.WithSource(src), config.WithCacheDir(dir))
//	if err != nil { ... }
//	defer client.Close() // before src.Close: the client does not close src
//	ns, err := client.Namespace(ctx, "payments.prod")
//
// Operators and tests publish with Publish (one transaction, one revision,
// an optional schema check) and Rollback (a revision's content as a new
// revision).
//
// # Audit
//
// Publish and Rollback record, in the meta key and in the same
// transaction as the change, the actor (WithActor; by default the etcd
// user of WithAuth), the reason (WithReason), the kind ("publish" or
// "rollback"), the revision a rollback restored, and the keys put and
// deleted. WithIfRevision makes either conditional on the namespace's
// current revision: otherwise nothing is written and the error is a
// *ConflictError carrying the current revision; of concurrent publishers
// at the same revision exactly one commits.
//
// History (the meta key's revisions, newest first), ValuesAt and
// ValuesAtTime (the namespace's content then) and Diff (the keys that
// differ between two revisions) answer the queries of the reference
// server's control API, in its JSON form (History, NamespaceValues, Diff),
// for the holdfast command's -etcd flag. They read etcd's own revisions,
// so they reach back to etcd's compaction point and no further (a
// *transport.CompactedError with it): unlike the reference server's, this
// audit does not survive compaction. Keep etcd's compaction retention as
// long as the audit must reach, or export History before compacting.
// Keys reserved to holdfast ("$holdfast/…") show in none of them. Meta
// records of earlier versions of this module (previous revision and
// commit time only) read as publishes without actor or reason, their keys
// taken from etcd's revisions.
//
// # Errors
//
// Snapshot returns transport.ErrNotFound for a namespace without keys,
// transport.ErrNotModified for a conditional request of an unchanged
// namespace, transport.ErrUnauthorized when etcd refuses the credentials,
// transport.ErrTooLarge past a size limit, or the etcd error. Watch always
// returns non-nil: ctx.Err(), the handler's error, a
// *transport.CompactedError, transport.ErrCursorAhead (a cursor ahead of
// the cluster's head, by a linearizable read: the cluster was restored
// from an older backup, or rebuilt), transport.ErrStreamIdle (nothing
// heard, or a change the store has not delivered, for the idle timeout),
// or the etcd error, such as "no leader" when the member lost quorum. In
// every case the client keeps serving its last good data and retries:
// resume, or resnapshot. Every Snapshot is a linearizable read and says so
// (transport.Snapshot.Linearizable): one behind what the client applied, at
// the same store id, proves the history was rewritten.
//
// The audit's methods return ErrInvalidArgument for malformed input (a
// revision below 1, a zero time, a negative limit, a bad namespace name),
// transport.ErrNotFound for a namespace never published, a revision
// beyond the cluster's head or one at which the namespace had no key, and
// a time before its first revision, and a *transport.CompactedError below
// etcd's compaction point.
//
// # Close
//
// Close ends the Source's watches, waits for them, and closes the etcd
// client unless it came from WithClient. It is idempotent; every method
// returns ErrClosed afterwards.
package etcd
