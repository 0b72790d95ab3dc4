package listen

import (
	"crypto/x509"
	"encoding/json"
	"net/http"
	"net/netip"
	"slices"
	"strings"

	"github.com/holdfast-dev/holdfast/internal/peer"
	"github.com/holdfast-dev/holdfast/transport"
)

// Guard wraps h with what every listener does before a handler: the
// identity of a verified client certificate goes on the request's
// context (peer.FromContext); a request that carries an Authorization
// header over plaintext from a peer that is neither loopback nor in
// trusted is refused with 403, whatever the header holds. A request from
// a peer in trusted (a balancer) that names the client it forwards
// (X-Forwarded-For: the last address, the one that balancer added) has
// that client's address on its context (peer.NewAddrContext), for what
// counts by peer: the snapshot slots, the failed authentications.
func Guard(h http.Handler, trusted []netip.Prefix) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if a, ok := forwardedClient(r, trusted); ok {
			r = r.WithContext(peer.NewAddrContext(r.Context(), a))
		}
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

// forwardedClient returns the client a request from a peer in trusted
// forwards: the last address of its X-Forwarded-For (what that peer
// added; the ones before it come from farther, unchecked). Loopback is
// not trusted so: a peer on the machine names no one else.
func forwardedClient(r *http.Request, trusted []netip.Prefix) (netip.Addr, bool) {
	if len(trusted) == 0 {
		return netip.Addr{}, false
	}
	values := r.Header.Values("X-Forwarded-For")
	if len(values) == 0 {
		return netip.Addr{}, false
	}
	ap, err := netip.ParseAddrPort(r.RemoteAddr)
	if err != nil || !slices.ContainsFunc(trusted, func(p netip.Prefix) bool { return p.Contains(ap.Addr().Unmap()) }) {
		return netip.Addr{}, false
	}
	last := values[len(values)-1]
	if i := strings.LastIndexByte(last, ','); i >= 0 {
		last = last[i+1:]
	}
	a, err := netip.ParseAddr(strings.TrimSpace(last))
	if err != nil {
		return netip.Addr{}, false
	}
	return a.Unmap(), true
}
