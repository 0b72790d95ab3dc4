package config

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"runtime"
	"runtime/debug"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// dispatcher runs a namespace's callbacks on its own goroutine, one at a
// time, in the order the sync loop queued them, so that a slow or panicking
// callback never holds up applying. The queue is bounded: past its limit,
// queued change sets coalesce (see coalesce).
type dispatcher struct {
	log   *slog.Logger
	limit int

	// mu guards queue, registry and seq.
	mu       sync.Mutex
	queue    []item
	registry registry // replaced whole on every subscribe and stop
	seq      uint64   // of the last item queued
	wake     chan struct{}

	panics    atomic.Int64
	coalesced atomic.Int64
	current   atomic.Pointer[subscription] // whose callback runs now
	goroutine atomic.Uint64                // the id of run's goroutine, once it runs
	lastState State                        // the last state delivered; run's goroutine only
	// onCallback, when set before run starts, sees each callback's duration.
	onCallback func(time.Duration)
}

// item is one entry of the queue: a change set, a status transition or a
// rejection.
type item struct {
	changes  *ChangeSet
	status   *Status
	rejected *RejectedError
	seq      uint64 // its place in the queue; a subscription sees the items queued after it
}

// registry is an immutable view of the subscriptions.
type registry struct {
	byKey  map[string][]*subscription
	any    []*subscription
	status []*subscription
	reject []*subscription
}

type subscription struct {
	since    uint64 // the dispatcher's seq when it subscribed: earlier items are not its
	key      string
	onChange func(Change)
	onAny    func(ChangeSet)
	onStatus func(Status)
	onReject func(*RejectedError)
	stopped  atomic.Bool
	calling  sync.Mutex // held while a call of this subscription runs
}

func newDispatcher(log *slog.Logger, limit int) *dispatcher {
	return &dispatcher{log: log, limit: limit, wake: make(chan struct{}, 1)}
}

// enqueue adds it to the queue without blocking.
func (d *dispatcher) enqueue(it item) {
	d.mu.Lock()
	if len(d.queue) >= d.limit {
		d.queue = d.compact(d.queue)
		d.coalesced.Add(1)
	}
	d.seq++
	it.seq = d.seq
	d.queue = append(d.queue, it)
	d.mu.Unlock()
	select {
	case d.wake <- struct{}{}:
	default:
	}
}

// compact folds every queued change set into one and keeps only the newest
// rejection and the newest status, so the queue is back to at most three
// items.
func (d *dispatcher) compact(queue []item) []item {
	var sets []ChangeSet
	var status, rejected item
	var setsSeq uint64
	for _, it := range queue {
		if it.changes != nil {
			sets = append(sets, *it.changes)
			setsSeq = it.seq // a subscription made in between sees all of them
		}
		if it.status != nil {
			status = it
		}
		if it.rejected != nil {
			rejected = it
		}
	}
	out := queue[:0]
	if len(sets) > 0 {
		merged := coalesce(sets)
		out = append(out, item{changes: &merged, seq: setsSeq})
	}
	if rejected.rejected != nil {
		out = append(out, rejected) // the newest rejection
	}
	if status.status != nil {
		out = append(out, status)
	}
	clear(queue[len(out):])
	return out
}

// subscribe registers s and returns the function that stops it.
func (d *dispatcher) subscribe(s *subscription) (stop func()) {
	d.update(func(r *registry) {
		s.since = d.seq // under d.mu, with enqueue
		switch {
		case s.onChange != nil:
			if r.byKey == nil {
				r.byKey = make(map[string][]*subscription)
			}
			r.byKey[s.key] = append(slices.Clip(r.byKey[s.key]), s)
		case s.onAny != nil:
			r.any = append(slices.Clip(r.any), s)
		case s.onStatus != nil:
			r.status = append(slices.Clip(r.status), s)
		case s.onReject != nil:
			r.reject = append(slices.Clip(r.reject), s)
		}
	})
	var once sync.Once
	return func() {
		once.Do(func() {
			s.stopped.Store(true)
			// Wait out a call in flight, so none runs after stop returns,
			// unless stop is called from that very callback: on the
			// dispatcher's goroutine, where waiting would deadlock.
			if d.current.Load() != s || goroutineID() != d.goroutine.Load() {
				s.calling.Lock()
				//lint:ignore SA2001 an empty critical section is a barrier: it waits out the call in flight
				s.calling.Unlock()
			}
			d.update(func(r *registry) {
				remove := func(list []*subscription) []*subscription {
					return slices.DeleteFunc(slices.Clone(list), func(x *subscription) bool { return x == s })
				}
				if s.onChange != nil {
					if l := remove(r.byKey[s.key]); len(l) > 0 {
						r.byKey[s.key] = l
					} else {
						delete(r.byKey, s.key)
					}
				}
				r.any = remove(r.any)
				r.status = remove(r.status)
				r.reject = remove(r.reject)
			})
		})
	}
}

// update changes a copy of the registry, so the dispatcher goroutine can
// keep using the old one without a lock.
func (d *dispatcher) update(fn func(*registry)) {
	d.mu.Lock()
	defer d.mu.Unlock()
	r := d.registry
	r.byKey = make(map[string][]*subscription, len(d.registry.byKey))
	for k, v := range d.registry.byKey {
		r.byKey[k] = v
	}
	fn(&r)
	d.registry = r
}

// run delivers queued items until ctx ends. Items still queued then are
// dropped: the client is closing.
func (d *dispatcher) run(ctx context.Context) {
	d.goroutine.Store(goroutineID())
	for {
		select {
		case <-ctx.Done():
			return
		case <-d.wake:
		}
		for {
			d.mu.Lock()
			if len(d.queue) == 0 || ctx.Err() != nil {
				d.mu.Unlock()
				break
			}
			it := d.queue[0]
			d.queue[0] = item{}
			d.queue = d.queue[1:]
			reg := d.registry
			d.mu.Unlock()
			d.deliver(reg, it)
		}
	}
}

func (d *dispatcher) deliver(reg registry, it item) {
	if cs := it.changes; cs != nil {
		for _, ch := range cs.Changes {
			for _, s := range reg.byKey[ch.Key] {
				d.call(s, it, func() { s.onChange(ch) })
			}
		}
		for _, s := range reg.any {
			d.call(s, it, func() { s.onAny(*cs) })
		}
	}
	if rerr := it.rejected; rerr != nil {
		for _, s := range reg.reject {
			d.call(s, it, func() { s.onReject(rerr) })
		}
	}
	if st := it.status; st != nil {
		if st.State == d.lastState {
			return // coalescing dropped the transitions in between
		}
		d.lastState = st.State
		for _, s := range reg.status {
			d.call(s, it, func() { s.onStatus(*st) })
		}
	}
}

// call runs one callback of it, recovering and counting a panic. An item
// queued before s subscribed is not s's: it tells of what happened before
// (the first data, a change the caller could already read).
func (d *dispatcher) call(s *subscription, it item, fn func()) {
	if it.seq <= s.since {
		return
	}
	s.calling.Lock()
	defer s.calling.Unlock()
	if s.stopped.Load() {
		return
	}
	d.current.Store(s)
	defer d.current.Store(nil)
	start := time.Now()
	defer func() {
		if d.onCallback != nil {
			d.onCallback(time.Since(start))
		}
		if r := recover(); r != nil {
			d.panics.Add(1)
			d.log.Error("config: callback panicked", "key", s.key, "panic", fmt.Sprint(r), "stack", string(debug.Stack()))
		}
	}()
	fn()
}

// goroutineID is the id of the calling goroutine, from the first line of
// its stack ("goroutine 123 [running]:"). Only stop calls it, to tell the
// dispatcher's goroutine from any other: Go has no cheaper way, and a stop
// is rare.
func goroutineID() uint64 {
	var buf [64]byte
	b := buf[:runtime.Stack(buf[:], false)]
	b = bytes.TrimPrefix(b, []byte("goroutine "))
	if i := bytes.IndexByte(b, ' '); i > 0 {
		b = b[:i]
	}
	id, _ := strconv.ParseUint(string(b), 10, 64)
	return id
}
