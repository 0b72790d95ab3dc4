package control

import (
	"context"
	"math"
	"sync"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/holdfast-dev/holdfast/controlapi"
	"github.com/holdfast-dev/holdfast/internal/presence"
	"github.com/holdfast-dev/holdfast/internal/wire"
	"github.com/holdfast-dev/holdfast/transport"
)

// The propagation monitor: for each publish (or rollback) this server
// commits, the time until 50%, 95% and 100% of its namespace's clients
// acked the revision or a later one, from the acks the data plane records
// (directly or through relays). The clients counted are those this
// server's ack table knows of the namespace, and its presence has live,
// when the publish commits
// (propagationClients); a client that comes later does not move the
// shares, and one that never acks holds the 100% mark open.
const (
	// maxPropagationWatches bounds the publishes watched per namespace:
	// a newer one past it drops the oldest.
	maxPropagationWatches = 8
	// propagationWatchTTL is how long a publish is watched: one whose
	// clients have not all acked by then stops being measured (the marks
	// it reached stay recorded).
	propagationWatchTTL = 10 * time.Minute
)

// propagationShares are the marks measured, and their attribute values.
var propagationShares = [...]struct {
	share float64
	attr  attribute.Set
}{
	{0.5, attribute.NewSet(attribute.String("share", "0.5"))},
	{0.95, attribute.NewSet(attribute.String("share", "0.95"))},
	{1, attribute.NewSet(attribute.String("share", "1"))},
}

// propagationBuckets are the histogram's bounds, in seconds: the design's
// budgets (10 s for an emergency change, 60 s for a routine one) are
// bounds.
var propagationBuckets = []float64{0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 20, 30, 60, 120, 300, 600}

// propagation is the monitor's state: the publishes watched, by
// namespace, oldest first.
type propagation struct {
	mu      sync.Mutex
	watches map[string][]*publishWatch
	hist    metric.Float64Histogram // nil until measured
}

// publishWatch is one publish watched.
type publishWatch struct {
	rev     int64
	at      time.Time
	pending map[string]bool // the clients known at publish that have not acked
	clients int
	reached [len(propagationShares)]time.Duration // 0: not yet
}

func newPropagation() *propagation { return &propagation{watches: make(map[string][]*publishWatch)} }

// propagationClients returns the clients whose acks the propagation of a
// publish of ns counts: those the ack table knows of ns now that are
// live (a client that left does not hold the marks open).
func propagationClients(a *Acks, ns string) []string {
	var present map[string]presence.Entry
	if a.live != nil {
		present = a.live.Entries()
	}
	reps := a.Of(ns)
	ids := make([]string, 0, len(reps))
	for _, r := range reps {
		if present != nil && present[r.ClientID].State != presence.Live {
			continue
		}
		ids = append(ids, r.ClientID)
	}
	return ids
}

// measure makes the monitor record into hist.
func (p *propagation) measure(hist metric.Float64Histogram) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.hist = hist
}

// published starts watching revision rev of ns, committed at at, over
// clients (none: it does not).
func (p *propagation) published(ns string, rev int64, at time.Time, clients []string) {
	if len(clients) == 0 {
		return // nobody to reach: nothing to measure
	}
	w := &publishWatch{rev: rev, at: at, pending: make(map[string]bool, len(clients)), clients: len(clients)}
	for _, c := range clients {
		w.pending[c] = true
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	ws := p.live(ns, at)
	if len(ws) >= maxPropagationWatches {
		ws = ws[1:]
	}
	p.watches[ns] = append(ws, w)
}

// live returns ns's watches still within their time, dropping the others
// (see expired).
func (p *propagation) live(ns string, now time.Time) []*publishWatch {
	ws := p.watches[ns]
	i := 0
	for i < len(ws) && (ws[i].done() || p.expired(ws[i], now)) {
		i++
	}
	if i == len(ws) {
		delete(p.watches, ns)
		return nil
	}
	p.watches[ns] = ws[i:]
	return ws[i:]
}

// expired reports whether w's time is up; then it records the marks w did
// not reach at the time it was watched, so that a publish that never
// reached its clients shows in the histogram's top buckets instead of not
// at all.
func (p *propagation) expired(w *publishWatch, now time.Time) bool {
	if now.Sub(w.at) <= propagationWatchTTL {
		return false
	}
	if p.hist != nil {
		for i, s := range propagationShares {
			if w.reached[i] == 0 {
				p.hist.Record(context.Background(), propagationWatchTTL.Seconds(), metric.WithAttributeSet(s.attr))
			}
		}
	}
	w.pending = nil
	return true
}

// expire drops every namespace's watches whose time is up.
func (p *propagation) expire(now time.Time) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for ns := range p.watches {
		p.live(ns, now)
	}
}

func (w *publishWatch) done() bool { return len(w.pending) == 0 }

// observe counts acks, heard at now.
func (p *propagation) observe(acks []transport.Ack, now time.Time) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.watches) == 0 {
		return
	}
	for i := range acks {
		a := &acks[i]
		if a.Status != wire.AckApplied || a.Rollout != "" {
			continue
		}
		for _, w := range p.live(a.Namespace, now) {
			if a.Revision < w.rev || !w.pending[a.ClientID] {
				continue
			}
			delete(w.pending, a.ClientID)
			p.reach(w, now)
		}
	}
}

// reach records the marks w's acks passed.
func (p *propagation) reach(w *publishWatch, now time.Time) {
	acked := w.clients - len(w.pending)
	took := max(now.Sub(w.at), time.Nanosecond)
	for i, s := range propagationShares {
		if w.reached[i] > 0 || acked < int(math.Ceil(s.share*float64(w.clients))) {
			continue
		}
		w.reached[i] = took
		if p.hist != nil {
			p.hist.Record(context.Background(), took.Seconds(), metric.WithAttributeSet(s.attr))
		}
	}
}

// status returns the propagation of ns's revision rev, if this server
// watched its publish.
func (p *propagation) status(ns string, rev int64) *controlapi.Propagation {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, w := range p.watches[ns] {
		if w.rev != rev {
			continue
		}
		st := &controlapi.Propagation{Revision: w.rev, PublishedAt: w.at, Clients: w.clients, Acked: w.clients - len(w.pending)}
		marks := [...]**float64{&st.P50, &st.P95, &st.P100}
		for i, d := range w.reached {
			if d > 0 {
				sec := d.Seconds()
				*marks[i] = &sec
			}
		}
		return st
	}
	return nil
}
