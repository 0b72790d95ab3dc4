// Package sdksuite is the SDK's end-to-end suite, run against any server:
// the reference server in package config's tests, holdfast server (over
// its embedded etcd, with the faults in front of it) in the server
// module's. Each case starts a server of its own through a StartFunc and
// drives real config.Clients against it: opening, typed reads, callbacks
// in order, resume by cursor after dropped streams, a compaction during an
// outage, a black hole, a store reset, refused requests, tokens, long-poll
// mode and Close.
package sdksuite
