// Package peer carries the identity a caller proved with a TLS client
// certificate from the listener that verified it (internal/listen) to
// whatever authenticates the request (access.Tokens.AuthenticateRequest).
package peer

import "context"

// Peer is the identity a caller proved with a TLS client certificate
// (mTLS: a listener's -tls-client-ca): the verified leaf certificate's
// subject. It is set by the listener, before any handler runs, and only
// from a certificate that verified against the listener's client CAs.
type Peer struct {
	// Subject is the certificate's subject as an RFC 2253 string, e.g.
	// "CN=deploy-bot,OU=ops,O=example".
	Subject string
	// CommonName is the subject's common name (CN), possibly empty.
	CommonName string
}

type key struct{}

// NewContext returns ctx carrying p, the identity a caller's client
// certificate proved.
func NewContext(ctx context.Context, p Peer) context.Context {
	return context.WithValue(ctx, key{}, p)
}

// FromContext returns the identity of the caller's verified TLS client
// certificate, if the request came with one.
func FromContext(ctx context.Context) (Peer, bool) {
	p, ok := ctx.Value(key{}).(Peer)
	return p, ok
}
