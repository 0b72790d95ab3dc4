package listen

import (
	"crypto/x509"
	"encoding/json"
	"net/http"
	"net/netip"

	"github.com/holdfast-dev/holdfast/internal/peer"
	"github.com/holdfast-dev/holdfast/transport"
)

// Guard wraps h with what every listener does before a handler: the
// identity of a verified client certificate goes on the request's
// context (peer.FromContext); a request that carries an Authorization
// header over plaintext from a peer that is neither loopback nor in
// trusted is refused with 403, whatever the header holds.
func Guard(h http.Handler, trusted []netip.Prefix) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.TLS != nil {
			if len(r.TLS.VerifiedChains) > 0 && len(r.TLS.VerifiedChains[0]) > 0 {
				r = r.WithContext(peer.NewContext(r.Context(), peerOf(r.TLS.VerifiedChains[0][0])))
			}
		} else if r.Header.Get("Authorization") != "" && !trustedPeer(r.RemoteAddr, trusted) {
			w.Header().Set("Content-Type", "application/json")
			w.Header().Set("Cache-Control", "no-store")
			w.WriteHeader(http.StatusForbidden)
			_ = json.NewEncoder(w).Encode(transport.ErrorBody{Error: transport.CodeForbidden,
				Message: "bearer tokens are not accepted over plaintext from an address other than loopback: connect over TLS (https://), or through a -trusted-proxy"})
			return
		}
		h.ServeHTTP(w, r)
	})
}

func peerOf(c *x509.Certificate) peer.Peer {
	return peer.Peer{Subject: c.Subject.String(), CommonName: c.Subject.CommonName}
}

// trustedPeer reports whether a request's RemoteAddr is loopback or in
// trusted.
func trustedPeer(remote string, trusted []netip.Prefix) bool {
	ap, err := netip.ParseAddrPort(remote)
	if err != nil {
		return false
	}
	a := ap.Addr().Unmap()
	if a.IsLoopback() {
		return true
	}
	for _, p := range trusted {
		if p.Contains(a) {
			return true
		}
	}
	return false
}
