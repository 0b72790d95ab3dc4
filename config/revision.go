package config

import (
	"context"
	"sync"
)

// revision tracks the client's global revision: the store revision up to
// which every open namespace is complete (Client.Revision).
type revision struct {
	mu   sync.Mutex // a leaf: taken under c.mu or a namespace's mu, never before them
	open map[*Namespace]struct{}
	high int64 // the revision, never going back
	// wait is closed when high advances; nil until someone waits (load),
	// so that an advance nobody waits for allocates nothing: one per
	// change per client otherwise.
	wait chan struct{}
}

func (r *revision) init() {
	r.open = make(map[*Namespace]struct{})
}

func (r *revision) add(n *Namespace) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.open[n] = struct{}{}
}

func (r *revision) remove(n *Namespace) {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.open, n)
	r.advanceLocked()
}

// confirmed records that n is complete up to cursor (prev before).
func (r *revision) confirmed(n *Namespace, prev, cursor int64) {
	if cursor <= prev {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if prev <= r.high { // n may have held the minimum back
		r.advanceLocked()
	}
}

// advanceLocked raises high to the minimum over the open namespaces, if
// that is higher. r.mu must be held.
func (r *revision) advanceLocked() {
	if len(r.open) == 0 {
		return
	}
	low := int64(-1)
	for n := range r.open {
		if c := n.confirmedCursor.Load(); low < 0 || c < low {
			low = c
		}
	}
	if low > r.high {
		r.high = low
		if r.wait != nil {
			close(r.wait)
			r.wait = nil
		}
	}
}

func (r *revision) load() (int64, <-chan struct{}) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.wait == nil {
		r.wait = make(chan struct{})
	}
	return r.high, r.wait
}

// Revision is the client's global revision: the store revision up to which
// every namespace the client has open is complete (each namespace's
// confirmed cursor; the minimum over them). A sender that tags a message
// with the revision it acted on lets a receiver wait, with
// WaitForRevision, until its own config is at least that current.
//
// It never goes backwards: it is 0 until a namespace is open and
// confirmed, stays where it was when namespaces close (with none open it is
// the last value reached, 0 if none ever was), and a namespace opened later
// holds it back only from then on (its first snapshot is complete up to the
// head it was fetched at). Revisions compare within one store: after the
// server's store is reset, its revisions start again and Revision waits for
// the new store to pass the old value.
func (c *Client) Revision() int64 {
	c.rev.mu.Lock()
	defer c.rev.mu.Unlock()
	return c.rev.high
}

// WaitForRevision returns nil once Revision() >= rev, or ctx's error if it
// ends first, or ErrClosed once the client is closed. It wakes on each
// advance, not by polling. A publish to a namespace the client does not
// watch still advances it (the stream's progress says every open namespace
// is complete up to it).
//
// A revision beyond the store's head is never reached, so a receiver that
// waits for a revision taken from a message it does not trust (which can
// name any number) must wait with a deadline: otherwise a sender can hold
// it forever.
func (c *Client) WaitForRevision(ctx context.Context, rev int64) error {
	for {
		high, wait := c.rev.load()
		if high >= rev {
			return nil
		}
		select {
		case <-wait:
		case <-ctx.Done():
			return ctx.Err()
		case <-c.ctx.Done():
			return ErrClosed
		}
	}
}
