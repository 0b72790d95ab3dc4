package dataplane

import (
	"io"
	"net/http"
	"net/netip"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/holdfast-dev/holdfast/internal/authlimit"
	"github.com/holdfast-dev/holdfast/internal/listen"
)

// The snapshot admission's bounds (docs/SECURITY.md, "Snapshot
// admission"), of WithMaxSnapshotsInFlight's n slots.
const (
	// stallAfter is how long a reply may make no progress (no byte
	// accepted by its connection) and still count against the slots: past
	// it the reply is stalled, and its slot goes to the requests that
	// wait. Its memory is bounded apart: the encoded snapshot is shared,
	// and the connection's send buffer grows only as its peer reads
	// (listen's send pacing).
	stallAfter = time.Second
	// replyChunk is the most a snapshot reply hands its connection at
	// once: its progress is seen at least every replyChunk.
	replyChunk = 32 << 10
)

// admission counts the snapshot replies being written, by their work:
// a reply holds one of the slots while it makes progress; one stalled
// (stallAfter without progress) stops counting, and is cut at its write
// deadline, or sooner when its peer holds more stalled replies than its
// share. The slots are fair across peers (authlimit.Peer: an address, an
// IPv6 /64, the client a -trusted-proxy forwards): a peer holding its
// share (a quarter of the slots, at least one) or more cannot take the
// last quarter, which is left to peers under their share; and one
// connection holds its share at most (an HTTP/2 connection of many
// streams).
type admission struct {
	slots      int
	share      int // a peer's, and a connection's
	stallAfter time.Duration
	now        func() time.Time

	mu      sync.Mutex
	active  map[*reply]struct{}
	peers   map[netip.Prefix]*peerReplies
	stalled atomic.Int64 // replies demoted since the start (tests)
	cut     atomic.Int64 // stalled replies cut for their peer's share (tests)
}

// peerReplies is what one peer holds: its replies that count, and its
// stalled ones, oldest first.
type peerReplies struct {
	active  int
	stalled []*reply
}

func newAdmission(slots int) *admission {
	return &admission{
		slots: slots, share: max(slots/4, 1), stallAfter: stallAfter, now: time.Now,
		active: make(map[*reply]struct{}), peers: make(map[netip.Prefix]*peerReplies),
	}
}

// reply is one admitted snapshot reply.
type reply struct {
	a      *admission
	peer   netip.Prefix
	unconn func() // gives back the connection's place
	last   atomic.Int64
	rc     *http.ResponseController
	r      *http.Request

	// Under a.mu: its state; written, the handler is writing (a cut may
	// set its write deadline: not once the handler has returned).
	stalled, done bool
}

// admit takes a slot for r's reply, or reports false: then the request
// is to be refused.
func (a *admission) admit(w http.ResponseWriter, r *http.Request) (*reply, bool) {
	unconn, ok := listen.ConnLimit(r.Context(), a.share)
	if !ok {
		return nil, false
	}
	p, _ := authlimit.Peer(r)
	now := a.now()
	a.mu.Lock()
	defer a.mu.Unlock()
	a.sweep(now)
	pr := a.peers[p]
	held := 0
	if pr != nil {
		held = pr.active
	}
	free := a.slots - len(a.active)
	if free <= 0 || (held >= a.share && free <= a.slots/4) {
		unconn()
		return nil, false
	}
	if pr == nil {
		pr = &peerReplies{}
		a.peers[p] = pr
	}
	pr.active++
	rp := &reply{a: a, peer: p, unconn: unconn, rc: http.NewResponseController(w), r: r}
	rp.last.Store(now.UnixNano())
	a.active[rp] = struct{}{}
	return rp, true
}

// sweep demotes the replies that made no progress for stallAfter: they
// stop counting, and a peer with more stalled replies than its share
// has its oldest still without progress cut. a.mu is held.
func (a *admission) sweep(now time.Time) {
	before := now.Add(-a.stallAfter).UnixNano()
	for rp := range a.active {
		if rp.last.Load() > before {
			continue
		}
		delete(a.active, rp)
		rp.stalled = true
		rp.unconn()
		a.stalled.Add(1)
		pr := a.peers[rp.peer]
		pr.active--
		pr.stalled = append(pr.stalled, rp)
		for len(pr.stalled) > a.share {
			// The oldest still without progress: one that reads again,
			// however slowly, is let be.
			i := slices.IndexFunc(pr.stalled, func(s *reply) bool { return s.last.Load() <= before })
			if i < 0 {
				break
			}
			victim := pr.stalled[i]
			pr.stalled = slices.Delete(pr.stalled, i, i+1)
			victim.done = true // no longer the admission's: its handler releases nothing
			// A write deadline in the past: the blocked write returns, an
			// HTTP/1.1 connection is closed (reset: what its peer did
			// not read leaves the kernel with it), an HTTP/2 stream
			// reset.
			listen.ResetOnClose(victim.r)
			_ = victim.rc.SetWriteDeadline(time.Now().Add(-time.Second))
			a.cut.Add(1)
		}
	}
}

// release ends the reply's count, as its handler returns.
func (rp *reply) release() {
	a := rp.a
	a.mu.Lock()
	defer a.mu.Unlock()
	if rp.done {
		return
	}
	rp.done = true
	pr := a.peers[rp.peer]
	if rp.stalled {
		if i := slices.Index(pr.stalled, rp); i >= 0 {
			pr.stalled = slices.Delete(pr.stalled, i, i+1)
		}
	} else {
		delete(a.active, rp)
		rp.unconn()
		pr.active--
	}
	if pr.active == 0 && len(pr.stalled) == 0 {
		delete(a.peers, rp.peer)
	}
}

// held is how many replies count against the slots.
func (a *admission) held() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return len(a.active)
}

// progressWriter writes a reply in chunks of replyChunk, marking its
// progress after each.
type progressWriter struct {
	w  io.Writer
	rp *reply
}

func (p progressWriter) Write(b []byte) (int, error) {
	n := 0
	for len(b) > 0 {
		c := b[:min(len(b), replyChunk)]
		m, err := p.w.Write(c)
		n += m
		if m > 0 {
			p.rp.last.Store(p.rp.a.now().UnixNano())
		}
		if err != nil {
			// Past its write deadline, or cut: the connection closes
			// with what its peer did not read, which the kernel need
			// not keep.
			listen.ResetOnClose(p.rp.r)
			return n, err
		}
		b = b[len(c):]
	}
	return n, nil
}
