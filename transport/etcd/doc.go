// Package etcd is a holdfast transport.Source over etcd v3, for fleets that
// outgrow one reference server. It lives in a module of its own
// (github.com/holdfast-dev/holdfast/transport/etcd), so the core module
// never pulls gRPC or etcd.
//
// # Mapping
//
// Namespace N is the key prefix "/holdfast/N/"; key k holds one JSON value
// at "/holdfast/N/k". The key "/holdfast/N/" itself (an empty key name,
// which no holdfast key can be) is the namespace's meta key: a writer puts
// a Meta there (the namespace's previous revision and the commit time) in
// the same transaction as its puts and deletes. holdfast server is such a
// writer (its store package, github.com/holdfast-dev/holdfast/server/store,
// also keeps the audit of each change there and in an audit log). So:
//
//   - a namespace's revision is the revision of its last change, deletes
//     included (a delete leaves no key, but the meta key moves);
//   - each change set's PrevRevision chains on the one before, as over HTTP,
//     and a client that sees a gap resnapshots;
//   - the store id is the id holdfast server created under StoreIDKey, or
//     else the etcd cluster id (16 hex digits); a cursor is an etcd
//     revision.
//
// Snapshot is one linearizable range read of the prefix (its header
// revision is the cursor). Watch is one etcd watch from the cursor + 1 that
// confirms the namespace current every heartbeat (a linearizable read of
// the meta key, or an etcd progress request with WithProgressRequests);
// ErrCompacted from etcd becomes a *transport.CompactedError, and the
// client resnapshots. A put written without the meta key is delivered,
// but a delete written without it does not move the namespace's revision.
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
// The Source only reads. Publishing, rolling back, the audit of each
// change (who, why, which keys), its queries (history, values at a
// revision or a time, diffs) and the audit log's trimming are holdfast
// server's: the package server/store of the server module
// (store.Namespaces), which writes in the layout above.
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
// # Close
//
// Close ends the Source's watches, waits for them, and closes the etcd
// client unless it came from WithClient. It is idempotent; every method
// returns ErrClosed afterwards.
package etcd
