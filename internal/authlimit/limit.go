// Package authlimit slows down a peer that keeps presenting wrong
// credentials: each peer (a client address; an IPv6 one by its /64) has
// a bucket of failures that refills at a steady rate; a peer whose
// bucket is empty is refused before its credentials are even looked at
// (429 with Retry-After), until it refills. A peer that fails never
// slows another, nor a right token from another address; the table of
// peers is bounded (the peers that recovered go first, then any), so
// that many addresses cannot grow it: forgetting a peer only lets it
// try again sooner.
//
// Many clients may share an address (a NAT egress, an IPv6 /64): some
// with a revoked token must not lock out the others. So each peer also
// has a few keyed hashes of the tokens it had accepted lately (never the
// tokens): such a token is looked at even while its peer is refused,
// and one that then fails is forgotten, so that a revoked token is
// slowed like any wrong one after its first failure. A request with no
// token (none sent, or a client certificate only) guesses nothing and is
// never refused either.
package authlimit

import (
	"fmt"
	"hash/maphash"
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

// acceptedPerPeer is how many accepted tokens a peer is remembered by:
// the healthy clients behind one address seldom have more distinct ones.
const acceptedPerPeer = 8

// Config configures a Limiter; zero fields take the defaults.
type Config struct {
	Burst    int     // failures a peer may have at once
	Rate     float64 // failures a second a peer regains
	MaxPeers int     // peers with failures (and, apart, with accepted tokens) remembered at once
	Now      func() time.Time
}

// Limiter counts failed authentications per peer. Its zero value is not
// usable; make one with New. It is safe for concurrent use.
type Limiter struct {
	burst, rate float64
	maxPeers    int
	now         func() time.Time

	seed maphash.Seed // keys the hashes of accepted tokens

	mu        sync.Mutex
	peers     map[netip.Prefix]*bucket
	accepted  map[netip.Prefix]*recent // tokens each peer had accepted lately
	nextSweep time.Time                // a full table is swept at most once a second
	refused   int64
	evicted   int64
	failed    int64
}

// bucket is a peer's failures left (tokens) as of at.
type bucket struct {
	tokens float64
	at     time.Time
}

// recent holds the hashes of the tokens a peer had accepted last, oldest
// replaced first.
type recent struct {
	sums [acceptedPerPeer]uint64
	n    int // sums used, up to acceptedPerPeer
	next int // the one replaced next when full
}

func (c *recent) has(sum uint64) bool {
	for _, s := range c.sums[:c.n] {
		if s == sum {
			return true
		}
	}
	return false
}

func (c *recent) add(sum uint64) {
	switch {
	case c.has(sum):
	case c.n < acceptedPerPeer:
		c.sums[c.n] = sum
		c.n++
	default:
		c.sums[c.next] = sum
		c.next = (c.next + 1) % acceptedPerPeer
	}
}

func (c *recent) remove(sum uint64) {
	for i, s := range c.sums[:c.n] {
		if s == sum {
			c.n--
			c.sums[i] = c.sums[c.n]
			c.next = 0
			return
		}
	}
}

// New returns a Limiter of cfg.
func New(cfg Config) *Limiter {
	l := &Limiter{burst: float64(cfg.Burst), rate: cfg.Rate, maxPeers: cfg.MaxPeers, now: cfg.Now,
		seed:  maphash.MakeSeed(),
		peers: make(map[netip.Prefix]*bucket), accepted: make(map[netip.Prefix]*recent)}
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
	return l.allow(p, 0, false)
}

// allow is Allow, where a token of hash sum (when known) that p had
// accepted lately may try even while p is refused.
func (l *Limiter) allow(p netip.Prefix, sum uint64, known bool) (wait time.Duration, ok bool) {
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
	if c := l.accepted[p]; known && c != nil && c.has(sum) {
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
	l.fail(p)
}

// failToken is Fail of a token of hash sum: p no longer counts it as
// accepted (a token revoked since).
func (l *Limiter) failToken(p netip.Prefix, sum uint64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if c := l.accepted[p]; c != nil {
		c.remove(sum)
		if c.n == 0 {
			delete(l.accepted, p)
		}
	}
	l.fail(p)
}

// accept notes that p presented a token of hash sum that authenticated.
// The table of such peers is bounded apart from that of failures: only
// right tokens add to it, so any peer may go to make room.
func (l *Limiter) accept(p netip.Prefix, sum uint64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	c := l.accepted[p]
	if c == nil {
		for q := range l.accepted {
			if len(l.accepted) < l.maxPeers {
				break
			}
			delete(l.accepted, q)
		}
		c = &recent{}
		l.accepted[p] = c
	}
	c.add(sum)
}

// fail is Fail; l.mu is held.
func (l *Limiter) fail(p netip.Prefix) {
	l.failed++
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
// peer: while the peer is past its failures a token it had not accepted
// lately is refused (refused, with how long until it may try) and
// authenticate is not run; a token sent and not accepted counts as a
// failure. A request that sends no token guesses nothing: it is neither
// refused nor counted. A nil Limiter, or a request with no peer address,
// only authenticates.
func (l *Limiter) Authenticate(r *http.Request, authenticate func(*http.Request) (access.Identity, bool)) (id access.Identity, ok bool, wait time.Duration, refused bool) {
	p, known := Peer(r)
	token := r.Header.Get("Authorization")
	if l == nil || !known || token == "" {
		id, ok = authenticate(r)
		return id, ok, 0, false
	}
	sum := maphash.String(l.seed, token)
	if wait, allowed := l.allow(p, sum, true); !allowed {
		return access.Identity{}, false, wait, true
	}
	if id, ok = authenticate(r); ok {
		l.accept(p, sum)
	} else {
		l.failToken(p, sum)
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
	Known   int   // peers with accepted tokens remembered
	Refused int64 // attempts refused
	Evicted int64 // peers forgotten before they recovered, to make room
	Failed  int64 // credentials not accepted (Fail, and Authenticate's)
}

// Stats returns the Limiter's counts.
func (l *Limiter) Stats() Stats {
	l.mu.Lock()
	defer l.mu.Unlock()
	return Stats{Peers: len(l.peers), Known: len(l.accepted), Refused: l.refused, Evicted: l.evicted, Failed: l.failed}
}
