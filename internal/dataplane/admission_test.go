package dataplane

import (
	"net/http/httptest"
	"net/netip"
	"slices"
	"testing"
	"time"
)

// admissionClock is a test's clock for an admission.
type admissionClock struct{ t time.Time }

func (c *admissionClock) now() time.Time          { return c.t }
func (c *admissionClock) advance(d time.Duration) { c.t = c.t.Add(d) }
func newTestAdmission(slots int) (*admission, *admissionClock) {
	c := &admissionClock{t: time.Unix(1_000_000, 0)}
	a := newAdmission(slots)
	a.now = c.now
	return a, c
}

// take asks a for a slot as a request from addr.
func take(a *admission, addr string) (*reply, bool) {
	r := httptest.NewRequest("GET", "/sdk/snapshot?ns=app", nil)
	r.RemoteAddr = addr
	return a.admit(httptest.NewRecorder(), r)
}

// TestAdmissionShareAcrossPeers: a peer at its share cannot take the last
// quarter of the slots; a peer under its share can, up to the last slot.
func TestAdmissionShareAcrossPeers(t *testing.T) {
	a, _ := newTestAdmission(8) // a share of 2, a quarter of 2
	var held []*reply
	for i := range 6 {
		rp, ok := take(a, "192.0.2.1:1000")
		if !ok {
			t.Fatalf("peer A's reply %d refused with %d held", i+1, a.held())
		}
		held = append(held, rp)
	}
	if _, ok := take(a, "192.0.2.1:1001"); ok {
		t.Fatal("peer A took the last quarter of the slots")
	}
	// An IPv6 peer by its /64: two addresses of one /64 are one peer.
	for _, addr := range []string{"[2001:db8::1]:1", "[2001:db8::2]:1"} {
		rp, ok := take(a, addr)
		if !ok {
			t.Fatalf("%s under its share refused", addr)
		}
		held = append(held, rp)
	}
	if _, ok := take(a, "198.51.100.1:1"); ok {
		t.Fatal("admitted past every slot")
	}
	for _, rp := range held {
		rp.release()
	}
	if n := a.held(); n != 0 || len(a.peers) != 0 {
		t.Fatalf("after every release: %d held, %d peers", n, len(a.peers))
	}
}

// TestAdmissionStalledStopCounting: a reply without progress for
// stallAfter stops counting; one that progresses keeps its slot; a peer
// with more stalled replies than its share has its oldest cut.
func TestAdmissionStalledStopCounting(t *testing.T) {
	a, clock := newTestAdmission(8)
	var stalled []*reply
	for range 6 {
		rp, ok := take(a, "192.0.2.1:1000")
		if !ok {
			t.Fatal("refused under the bound")
		}
		stalled = append(stalled, rp)
	}
	moving, ok := take(a, "198.51.100.1:1")
	if !ok {
		t.Fatal("refused under the bound")
	}
	clock.advance(stallAfter / 2)
	moving.last.Store(clock.now().UnixNano()) // a chunk accepted
	clock.advance(stallAfter/2 + time.Millisecond)
	// The next request sweeps: A's six are stalled, the moving one is not.
	rp, ok := take(a, "192.0.2.1:1000")
	if !ok {
		t.Fatal("a request refused while the others are stalled")
	}
	if n := a.held(); n != 2 {
		t.Errorf("%d replies count, want 2 (the moving one and the new one)", n)
	}
	// A holds six stalled: its oldest four past its share of two were cut.
	if n := a.cut.Load(); n != 4 {
		t.Errorf("%d stalled replies cut, want 4", n)
	}
	if n := len(a.peers[netip.MustParsePrefix("192.0.2.1/32")].stalled); n != 2 {
		t.Errorf("peer A holds %d stalled, want 2", n)
	}
	// A's two stalled replies left read again; four new ones of A stall:
	// the four are cut, not the two that read.
	reading := slices.Clone(a.peers[netip.MustParsePrefix("192.0.2.1/32")].stalled)
	fresh := []*reply{rp}
	for range 3 {
		more, ok := take(a, "192.0.2.1:1000")
		if !ok {
			t.Fatal("refused under the bound")
		}
		fresh = append(fresh, more)
	}
	clock.advance(stallAfter + time.Millisecond)
	for _, r := range append(reading, moving) {
		r.last.Store(clock.now().UnixNano())
	}
	last, ok := take(a, "198.51.100.1:2")
	if !ok {
		t.Fatal("refused under the bound")
	}
	if n := a.cut.Load(); n != 8 {
		t.Errorf("%d stalled replies cut, want 8", n)
	}
	if left := a.peers[netip.MustParsePrefix("192.0.2.1/32")].stalled; !slices.Equal(left, reading) {
		t.Errorf("peer A's stalled replies left are not the two that read again")
	}
	for _, s := range append(stalled, fresh...) {
		s.release() // a cut one's handler returns as well
	}
	moving.release()
	last.release()
	if n := a.held(); n != 0 || len(a.peers) != 0 {
		t.Fatalf("after every release: %d held, %d peers", n, len(a.peers))
	}
}
