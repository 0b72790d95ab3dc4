// Package streammux carries the watches of many namespaces over one
// multi-namespace stream of a transport.StreamSource.
//
// Every namespace's syncer watches through a View, whose Watch rides the
// one shared stream (a Mux) when the source is a transport.StreamSource
// that offers it, and is the source's own per-namespace Watch otherwise.
// Resume, resnapshot and backoff stay in each syncer: the view only
// carries events. The SDK's Client holds one Mux; so does a relay, for
// its upstream.
package streammux
