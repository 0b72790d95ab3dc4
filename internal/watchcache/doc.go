// Package watchcache is the watch cache that holdfast's edge tier and its
// server share: a Cache follows an upstream source, each namespace a
// client asks for (or Config.Namespaces) through a syncer, over one
// multi-namespace stream when the upstream offers it, and serves the
// data plane (internal/dataplane) from what it holds, with the upstream's
// store id and revisions unchanged.
//
// It keeps a bounded window of change sets per namespace for clients that
// resume, passes staleness on (what it serves carries how long ago its
// upstream last confirmed it), forwards its clients' acks upstream, lets
// go of namespaces nobody asked for within the linger time, and bounds
// what a client naming namespaces that do not exist costs (flood.go).
//
// Package relay builds the edge on it (holdfast relay: an upstream over
// HTTP, a last-good cache directory, an allow-list). holdfast server
// builds its data plane on it over its store through the etcd source,
// with what only a store offers: Config.Backfill (the store's history for
// a cursor older than the window), Config.Confirm (a linearizable read of
// a namespace's revision) and Config.StoreID.
//
// Its errors, logs and refusals say "relay", as they did when the
// relay was the only user: holdfast server's logs and replies keep their
// text.
package watchcache
