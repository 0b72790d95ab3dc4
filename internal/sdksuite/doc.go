// Package sdksuite is the SDK's end-to-end suite and the harness of every
// end-to-end test of the SDK.
//
// The suite runs against any server or source: the reference server in
// package config's tests (Reference), holdfast server (over its embedded
// etcd, with the faults in front of it) in the server module's, and the
// etcd source (through proxies that fault the path) in transport/etcd's.
// Each case starts a server of its own through a StartFunc and drives
// real config.Clients against it: opening, typed reads, callbacks in
// order, resume by cursor after dropped streams, a compaction during an
// outage, a black hole, a store reset, refused requests, tokens, long-poll
// mode and Close. What a target cannot do (a source has no long-poll; the
// etcd source no bearer token) its case skips.
//
// The harness is what those tests do around their assertions: a client of
// an endpoint or a source (NewClient, NewDefaultClient), opening a
// namespace (Open), publishing (Publish), the reference server
// (StartReference), logging through the test (Logger). Production code
// never imports it.
package sdksuite
