// Package listen is the HTTP stack of every listener of holdfast server
// and holdfast relay (data plane, control API, admin endpoints) and of
// the reference server: net/http's server, with HTTP/2 over TLS through
// ALPN, or HTTP/1.1 and HTTP/2 with prior knowledge (h2c) on a plaintext
// listener, and the bounds that keep a few clients from holding what the
// others need:
//
//   - a connection cap per listener (DefaultMaxConns): past it a new
//     connection is refused at once (an HTTP/1.1 503 on a plaintext
//     listener), and the refusals are logged, at most once per
//     refusalLogEvery;
//   - a bound on a request's headers, in time (ReadHeaderTimeout, which
//     also bounds a TLS handshake) and size (MaxHeaderBytes);
//   - a bound on a request's body, in time: past a grace (BodyGrace, the
//     order of the header timeout) it must keep a least average rate
//     (MinBodyRate), and it ends within BodyTimeout; at the connection
//     cap, a connection whose body is behind that rate is closed to admit
//     a new one (the ack stream, a body as long-lived as its client, is
//     exempt);
//   - an idle timeout (IdleTimeout): a connection with no request in
//     flight (HTTP/1.1) or no open stream (HTTP/2) is closed;
//   - HTTP/2's limits: concurrent streams, frame size, header tables, and
//     a connection that accepts no byte for DefaultWriteByteTimeout is
//     closed;
//   - a connection's send buffer (what the kernel holds of replies its
//     peer has not read) starts at InitialSendBuffer and grows as the
//     peer reads, up to MaxSendBuffer.
//
// Never http.Server.WriteTimeout: it would cut watch streams and
// long-polls. Writes are bounded per write, by the handlers
// (http.ResponseController.SetWriteDeadline).
//
// TLS (Config.TLS, NewTLS): a certificate and key reloaded when their
// files change (the pair in use is kept until a new one parses and
// matches), session tickets on (a reconnect storm resumes sessions), and
// with client CAs mutual TLS: a caller's verified certificate subject is
// its identity (peer.FromContext).
//
// Without TLS, a listener on an address other than loopback needs
// Config.Plaintext, and Listen says so in a warning; a request with an
// Authorization header that comes over plaintext from a peer that is
// neither loopback nor one of Config.TrustedProxies (a TLS-terminating
// balancer) is refused with 403: a token is never accepted in clear text
// off the machine.
package listen
