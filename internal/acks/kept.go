package acks

import (
	"github.com/holdfast-dev/holdfast/transport"
)

// maxKept bounds the reports a relay keeps (Keep): one of each kind (ack,
// nack, would-nack) per client and namespace. Past it, keeping one more
// evicts another, counted (Evicted): the evicted client's report is not
// told again to a new upstream until it reports again, and the upstream's
// rollout holds, waiting for it, up to the stage's timeout.
const maxKept = 1 << 18

// keptKey is a report kept of one client of a namespace, by kind.
type keptKey struct{ client, status string }

// kept is a relay's table of its clients' last reports, by namespace
// (Queue.mu).
type kept struct {
	ns      map[string]map[keptKey]transport.Ack
	n       int   // reports kept, over every namespace
	evicted int64 // reports evicted past maxKept
}

// Keep makes the Queue keep each client's last report of each namespace
// (of each kind), to tell them again (Resend) to an upstream that may not
// have heard them: a relay's, whose clients report once per connection
// (transport.CapabilityReportsKept). Call it before the first report.
func (a *Queue) Keep() {
	a.mu.Lock()
	a.kept = &kept{ns: make(map[string]map[keptKey]transport.Ack)}
	a.mu.Unlock()
}

// keepLocked keeps ack as its client's last of its kind. a.mu must be
// held.
func (a *Queue) keepLocked(ack transport.Ack) {
	k := a.kept
	if k == nil {
		return
	}
	m := k.ns[ack.Namespace]
	key := keptKey{ack.ClientID, ack.Status}
	if _, ok := m[key]; !ok && k.n >= maxKept {
		k.evictLocked(ack.Namespace)
		if k.evicted == 1 {
			a.log.Warn("acks: too many clients' reports to keep; evicting some (a new upstream hears them at their next report)", "max", maxKept)
		}
	}
	if m == nil {
		m = make(map[keptKey]transport.Ack)
		k.ns[ack.Namespace] = m
	}
	if _, ok := m[key]; !ok {
		k.n++
	}
	m[key] = ack
}

// evictLocked drops one report, of ns when it has one (its newest
// report takes the place), else of any namespace.
func (k *kept) evictLocked(ns string) {
	drop := func(name string, m map[keptKey]transport.Ack) bool {
		for key := range m {
			delete(m, key)
			if len(m) == 0 {
				delete(k.ns, name)
			}
			k.n--
			k.evicted++
			return true
		}
		return false
	}
	if drop(ns, k.ns[ns]) {
		return
	}
	for name, m := range k.ns {
		if drop(name, m) {
			return
		}
	}
}

// Resend queues again every report kept of ns (those not waiting
// already: what waits is newer), prompt or not as Forward says, but those
// of clients gone says left (they are forgotten; gone may be nil). A
// relay calls it when its upstream connection for ns is new: the upstream
// it now talks to may not have heard them. It returns how many it queued.
func (a *Queue) Resend(ns string, prompt bool, gone func(client string) bool) int {
	if a == nil {
		return 0
	}
	a.mu.Lock()
	k := a.kept
	if k == nil {
		a.mu.Unlock()
		return 0
	}
	var again []transport.Ack
	for key, ack := range k.ns[ns] {
		if gone != nil && gone(key.client) {
			delete(k.ns[ns], key)
			k.n--
			continue
		}
		if _, waiting := a.pending[ackKey{ack.ClientID, ack.Namespace, ack.Status}]; !waiting {
			again = append(again, ack)
		}
	}
	if len(k.ns[ns]) == 0 {
		delete(k.ns, ns)
	}
	a.mu.Unlock()
	for _, ack := range again {
		a.Forward(ack, prompt)
	}
	return len(again)
}

// Kept returns how many reports the Queue keeps, and how many it evicted
// past its bound.
func (a *Queue) Kept() (n int, evicted int64) {
	if a == nil {
		return 0, 0
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.kept == nil {
		return 0, 0
	}
	return a.kept.n, a.kept.evicted
}
