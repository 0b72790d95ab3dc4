package authlimit

import (
	"net/http/httptest"
	"net/netip"
	"testing"
	"time"

	"github.com/holdfast-dev/holdfast/internal/peer"
)

func TestLimiter(t *testing.T) {
	now := time.Unix(1000, 0)
	l := New(Config{Burst: 3, Rate: 0.5, MaxPeers: 4, Now: func() time.Time { return now }})
	a, b := netip.MustParsePrefix("192.0.2.1/32"), netip.MustParsePrefix("192.0.2.2/32")
	type step struct {
		advance time.Duration
		peer    netip.Prefix
		fail    bool // else Allow
		allowed bool
		wait    time.Duration
	}
	for i, st := range []step{
		{0, a, false, true, 0},
		{0, a, true, false, 0}, {0, a, true, false, 0}, {0, a, true, false, 0}, // the burst spent
		{0, a, false, false, 2 * time.Second}, // 1 failure per 2 s
		{0, b, false, true, 0},                // another peer: untouched
		{time.Second, a, false, false, time.Second},
		{time.Second, a, false, true, 0},
		{0, a, true, false, 0},
		{0, a, false, false, 2 * time.Second},
		{10 * time.Second, a, false, true, 0}, // recovered
	} {
		now = now.Add(st.advance)
		if st.fail {
			l.Fail(st.peer)
			continue
		}
		wait, ok := l.Allow(st.peer)
		if ok != st.allowed || wait != st.wait {
			t.Errorf("step %d: Allow(%v) = %v, %v; want %v, %v", i, st.peer, wait, ok, st.wait, st.allowed)
		}
	}
	if st := l.Stats(); st.Refused != 3 {
		t.Errorf("%+v: want 3 refused", st)
	}

	// Many addresses: the table stays bounded, the recovered go first.
	for i := range 100 {
		l.Fail(netip.PrefixFrom(netip.AddrFrom4([4]byte{198, 51, 100, byte(i)}), 32))
	}
	if st := l.Stats(); st.Peers > 4 || st.Evicted == 0 {
		t.Errorf("%+v: want at most 4 peers, evictions counted", st)
	}
}

func TestPeer(t *testing.T) {
	for _, tc := range []struct{ remote, fwd, want string }{
		{"192.0.2.7:4000", "", "192.0.2.7/32"},
		{"[2001:db8:1:2:3:4:5:6]:4000", "", "2001:db8:1:2::/64"}, // an IPv6 peer by its /64
		{"[::ffff:192.0.2.7]:1", "", "192.0.2.7/32"},
		{"127.0.0.1:1", "203.0.113.9", "203.0.113.9/32"}, // what the listener found behind a trusted proxy
	} {
		r := httptest.NewRequest("GET", "/", nil)
		r.RemoteAddr = tc.remote
		if tc.fwd != "" {
			r = r.WithContext(peer.NewAddrContext(r.Context(), netip.MustParseAddr(tc.fwd)))
		}
		p, ok := Peer(r)
		if !ok || p.String() != tc.want {
			t.Errorf("%s (forwarded %q): %v %v, want %s", tc.remote, tc.fwd, p, ok, tc.want)
		}
	}
	r := httptest.NewRequest("GET", "/", nil)
	r.RemoteAddr = "pipe"
	if p, ok := Peer(r); ok {
		t.Errorf("no address: %v", p)
	}
}
