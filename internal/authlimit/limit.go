// Package authlimit slows down a peer that keeps presenting wrong
// credentials: each peer (a client address; an IPv6 one by its /64) has
// a bucket of failures that refills at a steady rate; a peer whose
// bucket is empty is refused before its credentials are even looked at
// (429 with Retry-After), until it refills. A peer that fails never
// slows another, nor a right token from another address; the table of
// peers is bounded (the peers that recovered go first, then any), so
// that many addresses cannot grow it: forgetting a peer only lets it
// try again sooner.
package authlimit

import (
	"fmt"
	"math"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"sync"
	"time"

	"github.com/holdfast-dev/holdfast/access"
	"github.com/holdfast-dev/holdfast/internal/peer"
)

// The defaults: a peer may fail DefaultBurst times at once, then
// DefaultRate times a second.
const (
	DefaultBurst    = 30
	DefaultRate     = 5.0
	DefaultMaxPeers = 65_536
)

// Config configures a Limiter; zero fields take the defaults.
type Config struct {
	Burst    int     // failures a peer may have at once
	Rate     float64 // failures a second a peer regains
	MaxPeers int     // peers with failures remembered at once
	Now      func() time.Time
}

// Limiter counts failed authentications per peer. Its zero value is not
// usable; make one with New. It is safe for concurrent use.
type Limiter struct {
	burst, rate float64
	maxPeers    int
	now         func() time.Time

	mu        sync.Mutex
	peers     map[netip.Prefix]*bucket
	nextSweep time.Time // a full table is swept at most once a second
	refused   int64
	evicted   int64
}

// bucket is a peer's failures left (tokens) as of at.
type bucket struct {
	tokens float64
	at     time.Time
}

// New returns a Limiter of cfg.
func New(cfg Config) *Limiter {
	l := &Limiter{burst: float64(cfg.Burst), rate: cfg.Rate, maxPeers: cfg.MaxPeers, now: cfg.Now,
		peers: make(map[netip.Prefix]*bucket)}
	if l.burst <= 0 {
		l.burst = DefaultBurst
	}
	if l.rate <= 0 {
		l.rate = DefaultRate
	}
	if l.maxPeers <= 0 {
		l.maxPeers = DefaultMaxPeers
	}
	if l.now == nil {
		l.now = time.Now
	}
	return l
}

// Peer returns the peer a request comes from: the client address the
// listener found (behind a -trusted-proxy, the client it forwards),
// else the connection's remote address; an IPv6 address stands for its
// /64. ok is false when there is none (a request served in-process).
func Peer(r *http.Request) (netip.Prefix, bool) {
	addr, ok := peer.AddrFromContext(r.Context())
	if !ok {
		host, _, err := net.SplitHostPort(r.RemoteAddr)
		if err != nil {
			host = r.RemoteAddr
		}
		if addr, err = netip.ParseAddr(host); err != nil {
			return netip.Prefix{}, false
		}
	}
	addr = addr.Unmap().WithZone("")
	bits := 32
	if addr.Is6() {
		bits = 64
	}
	p, err := addr.Prefix(bits)
	return p, err == nil
}

// refill brings b up to now; l.mu is held.
func (l *Limiter) refill(b *bucket, now time.Time) {
	if d := now.Sub(b.at); d > 0 {
		b.tokens = math.Min(l.burst, b.tokens+d.Seconds()*l.rate)
		b.at = now
	}
}

// Allow reports whether p may try its credentials now; when not, wait
// is how long until it may (at least a second: what Retry-After says).
func (l *Limiter) Allow(p netip.Prefix) (wait time.Duration, ok bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	b := l.peers[p]
	if b == nil {
		return 0, true
	}
	now := l.now()
	l.refill(b, now)
	if b.tokens >= 1 {
		return 0, true
	}
	l.refused++
	wait = time.Duration((1 - b.tokens) / l.rate * float64(time.Second))
	return max(wait, time.Second), false
}

// Fail notes that p presented credentials that did not authenticate.
func (l *Limiter) Fail(p netip.Prefix) {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.now()
	b := l.peers[p]
	if b == nil {
		if len(l.peers) >= l.maxPeers {
			l.makeRoom(now)
		}
		b = &bucket{tokens: l.burst, at: now}
		l.peers[p] = b
	}
	l.refill(b, now)
	b.tokens = math.Max(b.tokens-1, 0)
}

// makeRoom forgets the peers that recovered (a sweep, at most once a
// second: many addresses must not make each failure cost the whole
// table); when none has, any one (the map's order is random). l.mu is
// held.
func (l *Limiter) makeRoom(now time.Time) {
	if !now.Before(l.nextSweep) {
		l.nextSweep = now.Add(time.Second)
		for p, b := range l.peers {
			l.refill(b, now)
			if b.tokens >= l.burst {
				delete(l.peers, p)
			}
		}
	}
	for p := range l.peers {
		if len(l.peers) < l.maxPeers {
			break
		}
		delete(l.peers, p)
		l.evicted++
	}
}

// Authenticate runs authenticate on r within the failure limit of r's
// peer: while the peer is past its failures it is refused (refused, with
// how long until it may try) and authenticate is not run; a token sent
// and not accepted counts as a failure (none sent guesses nothing). A nil
// Limiter, or a request with no peer address, only authenticates.
func (l *Limiter) Authenticate(r *http.Request, authenticate func(*http.Request) (access.Identity, bool)) (id access.Identity, ok bool, wait time.Duration, refused bool) {
	p, known := Peer(r)
	known = known && l != nil
	if known {
		if wait, allowed := l.Allow(p); !allowed {
			return access.Identity{}, false, wait, true
		}
	}
	id, ok = authenticate(r)
	if !ok && known && r.Header.Get("Authorization") != "" {
		l.Fail(p)
	}
	return id, ok, 0, false
}

// Refusal sets the Retry-After of a reply to a peer refused for wait
// (whole seconds, rounded up) and returns what the reply says.
func Refusal(w http.ResponseWriter, wait time.Duration) string {
	secs := int64((wait + time.Second - 1) / time.Second)
	w.Header().Set("Retry-After", strconv.FormatInt(secs, 10))
	return fmt.Sprintf("too many requests with a token that was not accepted from your address: retry in %d s", secs)
}

// Stats are a Limiter's counts.
type Stats struct {
	Peers   int   // peers with failures remembered
	Refused int64 // attempts refused
	Evicted int64 // peers forgotten before they recovered, to make room
}

// Stats returns the Limiter's counts.
func (l *Limiter) Stats() Stats {
	l.mu.Lock()
	defer l.mu.Unlock()
	return Stats{Peers: len(l.peers), Refused: l.refused, Evicted: l.evicted}
}
