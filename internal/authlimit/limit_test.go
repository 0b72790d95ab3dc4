package authlimit

import (
	"fmt"
	"hash/maphash"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"slices"
	"testing"
	"time"

	"github.com/holdfast-dev/holdfast/access"
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

// TestAcceptedTokensPassADrainedPeer: clients sharing an address with
// others that flood a wrong (say revoked) token keep their right tokens
// served: a token the peer had accepted lately is looked at while the
// peer is refused; new wrong tokens, and an accepted one revoked since,
// are refused after their first failure; no token is never refused; the
// table of accepted tokens stays bounded.
func TestAcceptedTokensPassADrainedPeer(t *testing.T) {
	now := time.Unix(1000, 0)
	l := New(Config{Burst: 3, Rate: 0.5, MaxPeers: 4, Now: func() time.Time { return now }})
	valid := map[string]bool{"Bearer healthy": true, "Bearer revoked": true}
	auth := func(r *http.Request) (access.Identity, bool) {
		return access.Identity{Name: "svc"}, valid[r.Header.Get("Authorization")]
	}
	call := func(addr, token string) int {
		r := httptest.NewRequest("GET", "/", nil)
		r.RemoteAddr = addr + ":4000"
		if token != "" {
			r.Header.Set("Authorization", "Bearer "+token)
		}
		_, ok, wait, refused := l.Authenticate(r, auth)
		switch {
		case refused:
			if wait < time.Second {
				t.Errorf("refused for %v, want at least 1s", wait)
			}
			return http.StatusTooManyRequests
		case ok:
			return http.StatusOK
		}
		return http.StatusUnauthorized
	}
	const nat = "192.0.2.1"
	for _, tok := range []string{"healthy", "revoked"} {
		if c := call(nat, tok); c != http.StatusOK {
			t.Fatalf("%s before the revocation: %d", tok, c)
		}
	}
	delete(valid, "Bearer revoked")
	var codes []int
	for range 6 {
		codes = append(codes, call(nat, "revoked"))
	}
	// The revoked token was accepted before: looked at once more, then
	// forgotten, and refused like any wrong token once the burst is spent.
	if want := []int{401, 401, 401, 429, 429, 429}; !slices.Equal(codes, want) {
		t.Errorf("a revoked token from the shared address: %v, want %v", codes, want)
	}
	for i := range 5 {
		if c := call(nat, "healthy"); c != http.StatusOK {
			t.Errorf("try %d: a token the drained peer had accepted: %d, want 200", i, c)
		}
	}
	for _, tok := range []string{"guess-1", "guess-2", "revoked"} {
		if c := call(nat, tok); c != http.StatusTooManyRequests {
			t.Errorf("a token %q not accepted lately from the drained peer: %d, want 429", tok, c)
		}
	}
	if c := call(nat, ""); c != http.StatusUnauthorized {
		t.Errorf("no token from the drained peer: %d, want 401", c)
	}
	if c := call("192.0.2.2", "guess-1"); c != http.StatusUnauthorized {
		t.Errorf("another peer's wrong token: %d, want 401", c)
	}

	// Right tokens from many addresses: the table stays bounded, and a
	// peer keeps at most acceptedPerPeer tokens.
	for i := range 100 {
		valid[fmt.Sprintf("Bearer t%d", i)] = true
		call(fmt.Sprintf("198.51.100.%d", i), fmt.Sprintf("t%d", i))
	}
	for i := range 100 {
		call("203.0.113.1", fmt.Sprintf("t%d", i))
	}
	if st := l.Stats(); st.Known > 4 || st.Peers > 4 {
		t.Errorf("%+v: want at most 4 peers of each kind", st)
	}
	l.mu.Lock()
	if c := l.accepted[netip.MustParsePrefix("203.0.113.1/32")]; c == nil || c.n != acceptedPerPeer || !c.has(maphash.String(l.seed, "Bearer t99")) {
		t.Errorf("a peer's accepted tokens: %+v, want the last %d", c, acceptedPerPeer)
	}
	l.mu.Unlock()
}
