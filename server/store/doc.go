// Package store opens the store under holdfast server: an etcd cluster
// that the server reaches with an etcd client, whichever of three kinds it
// is.
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
package store
