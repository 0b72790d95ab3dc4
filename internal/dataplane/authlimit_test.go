package dataplane

import (
	"context"
	"net"
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/holdfast-dev/holdfast/access"
)

// clientFrom returns an HTTP client whose connections come from the
// loopback address ip (127.0.0.0/8 is all loopback on Linux).
func clientFrom(t *testing.T, ip string) *http.Client {
	t.Helper()
	d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(ip)}}
	tr := &http.Transport{DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
		return d.DialContext(ctx, network, addr)
	}}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr}
}

// startWithToken starts a server of namespace a.ns with one token, of
// secret, that may read it; the default limit on wrong tokens applies.
func startWithToken(t *testing.T, secret string) *Server {
	t.Helper()
	toks, err := access.New(access.Token{Name: "svc", Secret: secret, Data: []string{"a.ns"}})
	if err != nil {
		t.Fatal(err)
	}
	b := newMemBackend()
	b.publish("a.ns", map[string]any{"k": 1})
	return b.start(t, WithTokens(toks))
}

// TestWrongTokensAreSlowedPerPeer: a peer that hammers wrong tokens is
// refused (429 with Retry-After) past its burst, its rate bounded; a right
// token from another peer, and that peer's own wrong ones, are answered
// as ever.
func TestWrongTokensAreSlowedPerPeer(t *testing.T) {
	const secret = "s3cret-right-token-00001"
	s := startWithToken(t, secret)
	attacker, healthy := clientFrom(t, "127.0.0.2"), clientFrom(t, "127.0.0.1")
	get := func(c *http.Client, token string) *http.Response {
		req, _ := http.NewRequest(http.MethodGet, url(s)+"/sdk/snapshot?ns=a.ns", nil)
		req.Header.Set("Authorization", "Bearer "+token)
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp
	}
	codes := map[int]int{}
	var retryAfter string
	start := time.Now()
	for time.Since(start) < 2*time.Second {
		resp := get(attacker, "s3cret-wrong-token-00000")
		codes[resp.StatusCode]++
		if resp.StatusCode == http.StatusTooManyRequests {
			retryAfter = resp.Header.Get("Retry-After")
		}
		if c := get(healthy, secret).StatusCode; c != http.StatusOK {
			t.Fatalf("the right token from another peer: %d", c)
		}
	}
	elapsed := time.Since(start)
	t.Logf("wrong tokens from one peer for %v: %v; healthy: all 200", elapsed.Round(time.Millisecond), codes)
	// The burst (30), then 5 a second: what got looked at is bounded.
	if limit := 30 + int(5*elapsed.Seconds()) + 2; codes[http.StatusUnauthorized] > limit {
		t.Errorf("%d wrong tokens looked at in %v, want at most %d", codes[http.StatusUnauthorized], elapsed, limit)
	}
	if codes[http.StatusTooManyRequests] == 0 {
		t.Fatal("no 429")
	}
	if n, err := strconv.Atoi(retryAfter); err != nil || n < 1 {
		t.Errorf("Retry-After %q, want whole seconds >= 1", retryAfter)
	}
	// The other peer's own wrong token is its own affair: 401, not 429.
	if c := get(healthy, "s3cret-wrong-token-00000").StatusCode; c != http.StatusUnauthorized {
		t.Errorf("another peer's wrong token: %d, want 401", c)
	}
}

// TestSharedAddressKeepsItsRightTokens: clients behind one address (a
// NAT egress), some of which flood a revoked token: the others' right
// token, accepted from that address before, is served throughout, while
// the revoked token and new wrong ones are refused with 429.
func TestSharedAddressKeepsItsRightTokens(t *testing.T) {
	const secret, revoked = "s3cret-right-token-00001", "s3cret-revoked-token-0001"
	s := startWithToken(t, secret)
	nat := clientFrom(t, "127.0.0.4")
	get := func(token string) int {
		req, _ := http.NewRequest(http.MethodGet, url(s)+"/sdk/snapshot?ns=a.ns", nil)
		req.Header.Set("Authorization", "Bearer "+token)
		resp, err := nat.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if c := get(secret); c != http.StatusOK {
		t.Fatalf("the right token: %d", c)
	}
	codes := map[int]int{}
	for range 100 {
		codes[get(revoked)]++
		if c := get(secret); c != http.StatusOK {
			t.Fatalf("the right token from the flooded address (%v so far): %d, want 200", codes, c)
		}
	}
	if codes[http.StatusTooManyRequests] == 0 {
		t.Errorf("the revoked token from the shared address: %v, want 429 past the burst", codes)
	}
	if c := get("s3cret-new-guess-0000000"); c != http.StatusTooManyRequests {
		t.Errorf("a new wrong token from the flooded address: %d, want 429", c)
	}
}
