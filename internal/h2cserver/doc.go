// Package h2cserver serves HTTP/1.1 and HTTP/2 with prior knowledge (h2c)
// on one listener, as net/http does with
// http.Protocols.SetUnencryptedHTTP2, but without net/http's HTTP/1
// buffers on every HTTP/2 connection.
//
// net/http allocates a connection's 4 KiB HTTP/1 read and write buffers
// before it looks for the HTTP/2 preface, and keeps them for as long as
// the HTTP/2 connection lives: 8 KiB of a server's memory per client that
// nothing reads or writes through. A Server reads the preface first and
// hands an HTTP/2 connection straight to golang.org/x/net/http2; every
// other connection goes to the http.Server as before.
//
// A Server takes its settings from an http.Server (Handler, timeouts,
// ConnState, contexts, ErrorLog, HTTP2) and has the same life: Serve,
// Shutdown (GOAWAY to HTTP/2 connections, as net/http sends), Close (every
// connection at once). It serves no TLS.
//
// x/net/http2's Server, which this package uses, is deprecated in favour
// of net/http's own HTTP/2; it is still a complete server of its own
// (v0.59.0). Should it become a shim over net/http, or go, the reference
// server and relay go back to http.Protocols.SetUnencryptedHTTP2 and lose
// only the 8 KiB per connection.
package h2cserver
