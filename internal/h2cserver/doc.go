// Package h2cserver serves HTTP/1.1 and HTTP/2 with prior knowledge (h2c)
// on one listener, as net/http does with
// http.Protocols.SetUnencryptedHTTP2, at a fraction of its cost per
// connection and per write: it is the reference server's and the relay's
// server, whose clients each hold one connection with a few long-lived
// streams on it.
//
// A Server reads the preface first; every connection that is not HTTP/2
// goes to the http.Server as before. It serves HTTP/2 itself, framing
// with golang.org/x/net/http2's Framer and hpack:
//
//   - One goroutine per connection reads its frames; each request's
//     handler runs on a goroutine of its own and writes its frames to the
//     socket itself, under the connection's write lock. net/http's server
//     (and x/net/http2's) puts a serve loop between the two, and a new
//     goroutine for every flush: at 2,000 long-lived streams those
//     hand-offs cost more of a publish's CPU than the writes themselves.
//   - No HTTP/1 buffers on an HTTP/2 connection (net/http keeps its 4 KiB
//     read and write buffers for the connection's life), no HPACK table of
//     its own, a 512-byte read buffer, and a stream's write buffer no
//     larger than what it writes. An idle connection with one held stream
//     costs about a third of net/http's (BenchmarkIdleConnMemory).
//
// It takes its settings from an http.Server: Handler, ReadHeaderTimeout
// (or, without one, ReadTimeout: either also bounds the wait for the
// preface), WriteTimeout (per request), IdleTimeout, MaxHeaderBytes,
// HTTP2's MaxConcurrentStreams and receive buffers, ConnState (New and
// Closed; HTTP/2 connections report no Active or Idle), BaseContext,
// ConnContext and ErrorLog. It has the same life: Serve, Shutdown (GOAWAY,
// then the connection closes once its streams have ended), Close (every
// connection at once).
//
// A handler's http.ResponseWriter is an http.Flusher and supports
// http.ResponseController's Flush, SetWriteDeadline (from any goroutine;
// a write blocked at the deadline fails) and EnableFullDuplex; not
// SetReadDeadline. A write that times out before any byte of its frame
// went out fails its stream only; one that times out partway (a client
// that stopped reading) closes the connection, since no frame can follow
// a torn one. A frame that is no stream's (a PING's or SETTINGS' ack, a
// window update, GOAWAY) waits at most 30 s for such a client, and the
// connection then closes. A request that expects 100-continue gets it on
// its handler's first read of the body.
//
// Not served: TLS, server push, response trailers (a handler's Trailer
// fields are not sent; a request's are read and dropped), stream
// priorities (ignored, as RFC 9113 allows) and CONNECT.
package h2cserver
