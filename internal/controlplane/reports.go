package controlplane

import (
	"container/list"
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/holdfast-dev/holdfast/internal/rollout/controller"
	"github.com/holdfast-dev/holdfast/transport"
)

// Reports is the table of what clients reported on each namespace, each
// (client, namespace) pair folded by controller.Report.Observe: the soft
// state the rollouts count and /control/clients shows, rebuilt from the
// clients' next reports after a restart. It holds at most max pairs; when
// full, the pair heard from longest ago makes room at once (a list in the
// order heard). A namespace's reports are one slice, so that reading
// them is one copy. It is safe for concurrent use.
type Reports struct {
	mu     sync.Mutex
	max    int
	maxErr int // bytes of a nack's error kept
	byNS   map[string]*nsReports
	order  *list.List // of reportKey, most recently heard first
	// evicted counts the pairs dropped to make room (Evicted); byNSEvicted
	// the same per namespace, with the last time (EvictedOf): a rollout
	// whose namespace lost a pair knows it is missing a report.
	evicted     int64
	byNSEvicted map[string]Evictions
}

// Evictions is how many of a namespace's pairs the table dropped to make
// room, and when it last did.
type Evictions struct {
	N    int64     `json:"n"`
	Last time.Time `json:"last"`
}

type reportKey struct{ ns, client string }

type nsReports struct {
	reps []controller.Report
	els  []*list.Element // reps[i]'s in order
	at   map[string]int  // client → its place in reps
}

// NewReports returns an empty table of at most max pairs, keeping at
// most maxNackError bytes of each nack's error.
func NewReports(max, maxNackError int) *Reports {
	t := &Reports{max: max, maxErr: maxNackError}
	t.init()
	return t
}

func (t *Reports) init() {
	t.byNS, t.order, t.byNSEvicted = make(map[string]*nsReports), list.New(), make(map[string]Evictions)
}

// Observe folds acks, heard at now, into the table.
func (t *Reports) Observe(acks []transport.Ack, now time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for i := range acks {
		a := &acks[i]
		n := t.byNS[a.Namespace]
		if n == nil {
			n = &nsReports{at: make(map[string]int)}
			t.byNS[a.Namespace] = n
		}
		j, ok := n.at[a.ClientID]
		if ok {
			t.order.MoveToFront(n.els[j])
		} else {
			if t.order.Len() >= t.max {
				gone := t.remove(t.order.Back())
				t.evicted++
				e := t.byNSEvicted[gone.ns]
				t.byNSEvicted[gone.ns] = Evictions{N: e.N + 1, Last: now}
				if t.byNS[a.Namespace] != n { // the eviction emptied it
					t.byNS[a.Namespace] = n
				}
			}
			j = len(n.reps)
			n.at[a.ClientID] = j
			n.reps = append(n.reps, controller.Report{ClientID: a.ClientID})
			n.els = append(n.els, t.order.PushFront(reportKey{a.Namespace, a.ClientID}))
		}
		n.reps[j].Observe(a, now, t.maxErr)
	}
}

// remove drops el's entry, and returns its key: the last of its
// namespace takes its place.
func (t *Reports) remove(el *list.Element) reportKey {
	k := t.order.Remove(el).(reportKey)
	n := t.byNS[k.ns]
	j := n.at[k.client]
	last := len(n.reps) - 1
	if j != last {
		n.reps[j], n.els[j] = n.reps[last], n.els[last]
		n.at[n.reps[j].ClientID] = j
	}
	n.reps, n.els = n.reps[:last], n.els[:last]
	delete(n.at, k.client)
	if last == 0 {
		delete(t.byNS, k.ns)
	}
	return k
}

// Of returns the reports of ns, in no order.
func (t *Reports) Of(ns string) []controller.Report {
	t.mu.Lock()
	defer t.mu.Unlock()
	if n := t.byNS[ns]; n != nil {
		return slices.Clone(n.reps)
	}
	return nil
}

// ByNamespace returns every namespace's reports, each namespace's newest
// heard first.
func (t *Reports) ByNamespace() map[string][]controller.Report {
	t.mu.Lock()
	out := make(map[string][]controller.Report, len(t.byNS))
	for ns, n := range t.byNS {
		out[ns] = slices.Clone(n.reps)
	}
	t.mu.Unlock()
	for _, reps := range out {
		slices.SortFunc(reps, func(x, y controller.Report) int { return y.Seen.Compare(x.Seen) })
	}
	return out
}

// Expire drops the pairs heard before now minus minAge for which drop
// (their namespace, client, how long ago they were heard) says so, and
// returns how many it dropped. It visits only the pairs heard before
// now-minAge.
func (t *Reports) Expire(now time.Time, minAge time.Duration, drop func(ns, client string, age time.Duration) bool) int {
	t.mu.Lock()
	defer t.mu.Unlock()
	dropped := 0
	for el := t.order.Back(); el != nil; {
		k := el.Value.(reportKey)
		n := t.byNS[k.ns]
		age := now.Sub(n.reps[n.at[k.client]].Seen)
		if age <= minAge {
			break
		}
		prev := el.Prev()
		if drop(k.ns, k.client, age) {
			t.remove(el)
			dropped++
		}
		el = prev
	}
	return dropped
}

// Reset forgets every report (a new store).
func (t *Reports) Reset() {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.init()
}

// Rewind forgets the reports of revisions after rev (a store restored to
// rev).
func (t *Reports) Rewind(rev int64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for el := t.order.Front(); el != nil; {
		next := el.Next()
		k := el.Value.(reportKey)
		n := t.byNS[k.ns]
		if r := &n.reps[n.at[k.client]]; max(r.Acked, r.Nacked, r.Served, r.Would) > rev {
			t.remove(el)
		}
		el = next
	}
}

// Len returns how many pairs the table holds.
func (t *Reports) Len() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.order.Len()
}

// Evicted counts the pairs dropped to make room since NewReports: the
// clients heard longest ago, missing from the table until they report
// again.
func (t *Reports) Evicted() int64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.evicted
}

// EvictedOf returns how many of ns's pairs were dropped to make room
// since NewReports (or Reset), and when the last was.
func (t *Reports) EvictedOf(ns string) Evictions {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.byNSEvicted[ns]
}

// Missing is controller.Config.Missing over the table: the pairs of ns
// dropped to make room, when the last was dropped at or after since.
func (t *Reports) Missing(_ context.Context, ns string, since time.Time) (int64, string) {
	e := t.EvictedOf(ns)
	if e.N == 0 || e.Last.Before(since) {
		return 0, ""
	}
	return e.N, fmt.Sprintf("%d client report(s) of %q left the full report table of %d, the last at %s", e.N, ns, t.max, e.Last.UTC().Format(time.RFC3339))
}

// Equal reports whether e and o say the same (nil: none).
func (e *Evictions) Equal(o *Evictions) bool {
	if e == nil || o == nil {
		return e == o
	}
	return e.N == o.N && e.Last.Equal(o.Last)
}
