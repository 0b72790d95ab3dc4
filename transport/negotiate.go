package transport

import (
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Bounds on an idle timeout derived from a server's advertised heartbeat:
// the floor keeps a tiny heartbeat (a test server's) from making scheduling
// hiccups look like dead streams; the ceiling keeps a server from switching
// liveness checks off with a huge one.
const (
	MinDerivedIdleTimeout = 500 * time.Millisecond
	MaxDerivedIdleTimeout = 3 * time.Minute
)

// clientCapabilities is what this client declares it can handle, in
// HeaderCapabilities on every request: informational (the request path
// says what the client uses), so that a server can count its clients.
const clientCapabilities = CapabilityStream + "," + CapabilityAckBatch + "," + CapabilityAckStream + "," + CapabilityRollout

// heartbeatsPerIdle is how many advertised heartbeats make the derived idle
// timeout: one late heartbeat, or two, are not a dead stream.
const heartbeatsPerIdle = 3

// ServerInfo is what a server advertised about itself in the headers of
// its last data-plane reply (docs/PROTOCOL.md, "Versions and
// capabilities"). A server of protocol version 0 advertises nothing: its
// ServerInfo has Protocol 0, no capabilities and no heartbeat.
type ServerInfo struct {
	// Protocol is the version the server named (Holdfast-Protocol), 0 when
	// it named none.
	Protocol int
	// Capabilities are the capability tokens it offers
	// (Holdfast-Capabilities), sorted; nil when none.
	Capabilities []string
	// Heartbeat is its heartbeat interval (Holdfast-Heartbeat-Ms), zero
	// when it did not say.
	Heartbeat time.Duration
	// Seen is when the reply was received; zero before any reply from a
	// holdfast server (one that names its store).
	Seen time.Time
}

// HasCapability reports whether the server offers capability name.
func (i ServerInfo) HasCapability(name string) bool {
	_, found := slices.BinarySearch(i.Capabilities, name)
	return found
}

// parseServerInfo reads what a reply's headers advertise. ok is false for a
// reply that does not name a store: not a holdfast server's (a proxy's
// error page, say), so it says nothing about the server.
func parseServerInfo(h http.Header, now time.Time) (info ServerInfo, ok bool) {
	if h.Get(HeaderStoreID) == "" {
		return ServerInfo{}, false
	}
	info.Seen = now
	if v, err := strconv.Atoi(strings.TrimSpace(h.Get(HeaderProtocol))); err == nil && v > 0 {
		info.Protocol = v
	}
	info.Capabilities = parseCapabilities(h.Values(HeaderCapabilities))
	if ms, err := strconv.ParseInt(strings.TrimSpace(h.Get(HeaderHeartbeat)), 10, 64); err == nil && ms > 0 {
		// Clamped, not ignored, past an hour: a huge heartbeat still means
		// "slow", and the derived timeout caps it the same way.
		info.Heartbeat = min(time.Duration(ms), time.Duration(time.Hour/time.Millisecond)) * time.Millisecond
	}
	return info, true
}

// parseCapabilities splits comma-separated capability lists, keeping the
// well-formed tokens ([a-z0-9-]+, at most 64 bytes), sorted and unique.
func parseCapabilities(values []string) []string {
	var out []string
	for _, v := range values {
		for _, c := range strings.Split(v, ",") {
			c = strings.TrimSpace(c)
			if validCapability(c) && !slices.Contains(out, c) && len(out) < 64 {
				out = append(out, c)
			}
		}
	}
	slices.Sort(out)
	return out
}

func validCapability(c string) bool {
	if c == "" || len(c) > 64 {
		return false
	}
	for i := 0; i < len(c); i++ {
		if b := c[i]; !(b >= 'a' && b <= 'z' || b >= '0' && b <= '9' || b == '-') {
			return false
		}
	}
	return true
}

// derivedIdleTimeout is the idle timeout for a server whose heartbeat is
// hb: three heartbeats, within the bounds; def when hb is unknown.
func derivedIdleTimeout(hb, def time.Duration) time.Duration {
	if hb <= 0 {
		return def
	}
	return min(max(heartbeatsPerIdle*hb, MinDerivedIdleTimeout), MaxDerivedIdleTimeout)
}

// ServerInfo returns what the server advertised in its last data-plane
// reply that named a store; the zero ServerInfo before any.
func (s *HTTPSource) ServerInfo() ServerInfo {
	if p := s.info.Load(); p != nil {
		i := *p
		i.Capabilities = slices.Clone(i.Capabilities)
		return i
	}
	return ServerInfo{}
}

// offers reports whether the server last advertised capability name:
// ServerInfo's answer without its copy, for the paths taken on every
// ack.
func (s *HTTPSource) offers(name string) bool {
	p := s.info.Load()
	return p != nil && p.HasCapability(name)
}

// IdleTimeout returns the idle timeout in force: WithIdleTimeout's when it
// was given, else three of the heartbeats the server last advertised
// (within MinDerivedIdleTimeout and MaxDerivedIdleTimeout), else
// DefaultIdleTimeout (a server of protocol version 0 advertises none).
func (s *HTTPSource) IdleTimeout() time.Duration {
	if s.opts.idleSet {
		return s.opts.idleTimeout
	}
	if p := s.info.Load(); p != nil {
		return derivedIdleTimeout(p.Heartbeat, s.opts.idleTimeout)
	}
	return s.opts.idleTimeout
}

// replyTimeout bounds what the heartbeat does not govern: how long a reply
// may take to start (latency, a large snapshot being built), a snapshot or
// ack go without bytes, a long-poll run past its wait. It is IdleTimeout,
// but never below the default when that is derived: a short heartbeat
// must not make a slow network look dead.
func (s *HTTPSource) replyTimeout() time.Duration {
	if s.opts.idleSet {
		return s.opts.idleTimeout
	}
	return max(s.IdleTimeout(), s.opts.idleTimeout)
}

// idleTimeoutFor is the idle timeout for a stream whose reply headers are
// h: derived from the heartbeat of the server that answered it (behind a
// load balancer, another server may have answered the last request),
// unless the user set one.
func (s *HTTPSource) idleTimeoutFor(h http.Header) time.Duration {
	if s.opts.idleSet {
		return s.opts.idleTimeout
	}
	if info, ok := parseServerInfo(h, time.Time{}); ok {
		return derivedIdleTimeout(info.Heartbeat, s.opts.idleTimeout)
	}
	return s.IdleTimeout()
}

// noteReply records what a reply from a holdfast server advertises.
func (s *HTTPSource) noteReply(resp *http.Response) {
	if resp.TLS != nil {
		s.h2tls.Store(resp.ProtoMajor == 2)
	}
	if info, ok := parseServerInfo(resp.Header, time.Now()); ok {
		s.info.Store(&info)
		if s.h2c != nil && info.HasCapability(CapabilityH2C) {
			s.h2c.upgrade()
		}
	}
}
