// Package relay is holdfast's edge tier: a relay follows an upstream (a
// holdfast server or another relay, over the data plane; never etcd
// itself) over one multi-namespace stream and serves the same data plane
// to its own clients, with the upstream's store id and revisions
// unchanged, so that a client can move between relays, or between a relay
// and the origin, and resume with its cursor.
//
// A relay keeps a bounded window of change sets per namespace for clients
// that resume, persists the last good of every namespace it serves, passes
// staleness on honestly (what it serves carries how long ago its upstream
// last confirmed it), forwards its clients' acks and nacks upstream, and
// sheds reconnect storms with 503 and a spread Retry-After.
//
// The holdfast command runs one: holdfast relay -addr HOST:PORT -upstream URL.
// The watch cache underneath (the project's internal/watchcache) is
// holdfast server's too, which builds it over its store directly.
package relay
