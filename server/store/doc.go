// Package store is the store under holdfast server: the etcd cluster it
// opens, and what the server alone writes there.
//
// # Opening
//
// Open opens an etcd cluster that the server reaches with an etcd client,
// whichever of three kinds it is.
//
//   - Embedded (the default): a single-member etcd that the server runs in
//     its own process, in a data directory it locks, listening only on
//     loopback ports that it chooses (never 2379/2380), its logs bridged to
//     the server's slog.Logger.
//   - External: the members of an etcd cluster that runs apart
//     (Config.Endpoints).
//   - Memory: an embedded etcd in a temporary directory, removed at Close:
//     nothing is kept, and the code above the store is the same as in the
//     other two kinds.
//
// Open also creates the store's id (the key etcd.StoreIDKey, with a
// compare-and-set) if no server has, so that every server of one store,
// and every restart of one, serves the same id.
//
// The data directory's lock is flock(2): it is released when the process
// ends, however it ends, and it is honoured only on Unix-like systems.
//
// # Writing namespaces
//
// Namespaces is the server's write path. Publish and Rollback write a
// namespace's keys in the layout the SDK's etcd source reads
// (github.com/holdfast-dev/holdfast/transport/etcd: etcd.Prefix, and the
// meta key's etcd.Meta, which chains each change on the one before), one
// etcd transaction per change, optionally checked against a schema
// (WithSchema), conditional on the namespace's revision (WithIfRevision),
// on a key's (WithGuard) or on any etcd comparison (WithCondition), and
// committing writes of their own with it (WithOps: a rollout's state).
//
// # Audit
//
// The same transaction records the change's audit twice: in the meta key
// (the actor, by default the etcd user of the client; on whose behalf;
// the reason; the kind; the revision a rollback restored; the keys put
// and deleted) and in the audit log, a record under AuditRoot with the
// values put. etcd's compaction does not touch the log: History,
// ValuesAt, ValuesAtTime and Diff answer for every change the log keeps,
// however far etcd has compacted, and Rollback restores such revisions.
// The log is bounded by TrimAudit, which folds a namespace's oldest
// records into its base under AuditBaseRoot (its content at the last
// record folded): History then reports the records before the base as
// truncated, and the content at a revision below the base is compacted.
// Changes from before the log existed (written by an older version) are
// read from etcd's revisions, down to etcd's compaction point; changes
// written past holdfast are recorded after the fact by the server's
// leader (UnauditedRecord). Keys reserved to holdfast ("$holdfast/…")
// show in none of the queries, and a rollback leaves them as they are.
//
// The queries return ErrInvalidArgument for malformed input (a revision
// below 1, a zero time, a negative limit, a bad namespace name),
// transport.ErrNotFound for a namespace never published, a revision beyond
// the cluster's head or one at which the namespace had no key, and a time
// before its first revision, and a *transport.CompactedError for a
// revision that neither the log nor etcd still holds.
//
// Export and Import move a whole store, audit log included, to another
// cluster with its revisions.
package store
