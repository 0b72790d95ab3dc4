package dataplane

import (
	"bytes"
	"encoding/json"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/holdfast-dev/holdfast/transport"
)

// appendFrame appends one SSE frame to b (without an id line when id < 0). Data is split on newlines so that
// a frame stays well-formed whatever the payload.
func appendFrame(b []byte, event string, id int64, data []byte) []byte {
	b = append(b, "event: "...)
	b = append(b, event...)
	b = append(b, '\n')
	if id >= 0 { // no id: an event that is no cursor
		b = append(b, "id: "...)
		b = strconv.AppendInt(b, id, 10)
		b = append(b, '\n')
	}
	for {
		line, rest, more := bytes.Cut(data, []byte{'\n'})
		b = append(b, "data: "...)
		b = append(b, line...)
		b = append(b, '\n')
		if !more {
			break
		}
		data = rest
	}
	return append(b, '\n')
}

// mark is how far the hub has fanned out: every change of generation gen up
// to rev is in the queue of every watcher that wants it. seq, on a
// relay's hub, is the Follower's sequence number of the head it marks.
type mark struct {
	gen uint64
	rev int64
	seq uint64
}

// hub fans committed changes out to watchers. Publishes only append to its
// queue (under the store lock, so the queue is in revision order); one
// dispatcher goroutine moves each change into the bounded queue of every
// watcher of its namespace.
type hub struct {
	mu       sync.RWMutex
	byNS     map[string]map[*watcher]struct{}
	streams  int // watchers that are SSE streams
	silenced func() bool
	// multi counts the multi-namespace watchers (streams and long-polls),
	// multiByNS those of each namespace: a change that every one of them
	// carries moves nobody's cursor silently, so it needs no progress.
	multis    map[*watcher]struct{}
	multiByNS map[string]int

	// tick is closed (and replaced) to tell every multi-namespace watcher
	// that the head moved past what it may have been told: at most once
	// per progressEvery, by the ticker goroutine, on a request in moved.
	tick  atomic.Pointer[chan struct{}]
	moved chan struct{}
	// beat, for a relay's hub (startBeats), is closed (and replaced)
	// after its upstream confirmed data: every stream then sends progress,
	// so that what a relay tells is as fresh as what it heard, hop after
	// hop. A stream listens to one of beatShards channels, and a beat
	// closes them one after another over beatSpread: ten thousand
	// streams' progress (and their clients' work on it) then does not
	// land at once, on a publish that happens to come with it. At most
	// one beat per progressEvery, on a request in beatReq. Nil for an
	// origin's.
	beat      [beatShards]atomic.Pointer[chan struct{}]
	beatReq   chan struct{}
	lastFrame atomic.Pointer[progressFrame]

	woken []*watcher // run's, for a relay's hub: the watchers of a batch to wake

	qmu    sync.Mutex
	queue  []HubItem
	spare  []HubItem
	closed bool
	kick   chan struct{}

	dispatched atomic.Pointer[mark]
	// follow: the hub of a relay's Follower, whose namespaces are each
	// complete up to a cursor of their own: a change marks nothing, the
	// Follower's head (the lowest of them) does.
	follow bool
	quit   chan struct{}
	wg     sync.WaitGroup // run and ticker
}

// HubItem is a change to fan out; or (C == nil) a store reset to
// generation Gen, or, with Move set, a follower's head that moved to Head
// (its sequence number Seq), or, with Beat set, a follower's request for
// a beat.
type HubItem struct {
	C    *Change
	Gen  uint64
	Head int64
	Seq  uint64
	Move bool
	Beat bool // a follower's freshness changed (a confirmation, Fail): requestBeat, after the batch
}

// progressEvery is how soon after the head moves a multi-namespace
// watcher that did not carry the change hears of it, and how often at most.
const progressEvery = 250 * time.Millisecond

func newHub(gen uint64, silenced func() bool) *hub {
	h := &hub{
		byNS:      make(map[string]map[*watcher]struct{}),
		multis:    make(map[*watcher]struct{}),
		multiByNS: make(map[string]int),
		silenced:  silenced,
		kick:      make(chan struct{}, 1),
		moved:     make(chan struct{}, 1),
		quit:      make(chan struct{}),
	}
	t := make(chan struct{})
	h.tick.Store(&t)
	h.dispatched.Store(&mark{gen: gen})
	h.wg.Add(2)
	go h.run()
	go h.pace(h.moved, 0, &h.tick)
	return h
}

// beatShards is how many groups of streams a relay's beat reaches one
// after another.
const beatShards = 8

// beatSpread is how long a relay's beat takes to reach all its streams:
// a quarter of a heartbeat, at most a second (what a hop adds to the age
// a client learns).
func beatSpread(heartbeat time.Duration) time.Duration {
	return min(heartbeat/4, time.Second)
}

// recentProgress is how recent a stream's last progress makes a routine
// beat (a confirmation that changes no flag) redundant: a beat can reach
// a stream as late as the round under way, the pacing, and its own round
// after the confirmation.
func recentProgress(heartbeat time.Duration) time.Duration {
	return 2*beatSpread(heartbeat) + progressEvery
}

// startBeats makes a relay's hub beat (see hub.beat), each beat spread
// over spread. Call it before the hub is used.
func (h *hub) startBeats(spread time.Duration) {
	chs := make([]*atomic.Pointer[chan struct{}], len(h.beat))
	for i := range h.beat {
		ch := make(chan struct{})
		h.beat[i].Store(&ch)
		chs[i] = &h.beat[i]
	}
	h.beatReq = make(chan struct{}, 1)
	h.wg.Add(1)
	go h.pace(h.beatReq, spread, chs...)
}

// ticks returns the channel that the next progress tick closes.
func (h *hub) ticks() <-chan struct{} { return *h.tick.Load() }

// beats returns the channel that the next beat closes for the streams of
// shard (any int: it is taken modulo beatShards); nil (never) for an
// origin's hub.
func (h *hub) beats(shard int) <-chan struct{} {
	if p := h.beat[uint(shard)%beatShards].Load(); p != nil {
		return *p
	}
	return nil
}

// requestBeat asks for a beat; it never blocks.
func (h *hub) requestBeat() {
	select {
	case h.beatReq <- struct{}{}:
	default:
	}
}

// pace closes the channels in chs once after each request in req, but
// never twice within progressEvery: however many publishes (or
// confirmations), a watcher wakes for progress at most four times a
// second. It closes them one after another, evenly over spread.
func (h *hub) pace(req <-chan struct{}, spread time.Duration, chs ...*atomic.Pointer[chan struct{}]) {
	defer h.wg.Done()
	var last time.Time
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	sleep := func(d time.Duration) bool {
		if d <= 0 {
			return true
		}
		timer.Reset(d)
		select {
		case <-timer.C:
			return true
		case <-h.quit:
			timer.Stop()
			return false
		}
	}
	for {
		select {
		case <-req:
		case <-h.quit:
			return
		}
		if !sleep(progressEvery - time.Since(last)) {
			return
		}
		last = time.Now()
		for i, ch := range chs {
			if i > 0 && !sleep(spread/time.Duration(len(chs))) {
				return
			}
			next := make(chan struct{})
			old := ch.Swap(&next)
			close(*old)
		}
	}
}

// progressFrame is the SSE progress frame of a multi-namespace stream at
// one cursor (and, a relay's, one age): the same bytes for every stream
// that writes it, so encoded once.
type progressFrame struct {
	p transport.StreamProgress
	b []byte
}

// streamProgress returns the progress frame of p. A relay's streams tell
// ages in whole milliseconds, so a fan-out's streams share a frame for
// every millisecond it takes.
func (h *hub) streamProgress(p transport.StreamProgress) []byte {
	if f := h.lastFrame.Load(); f != nil && f.p == p {
		return f.b
	}
	data, _ := json.Marshal(p)
	f := &progressFrame{p: p, b: appendFrame(nil, transport.EventProgress, p.Cursor, data)}
	h.lastFrame.Store(f)
	return f.b
}

// enqueue hands a change (or a reset) to the dispatcher. It never blocks.
func (h *hub) enqueue(items ...HubItem) {
	h.qmu.Lock()
	if !h.closed {
		h.queue = append(h.queue, items...)
	}
	h.qmu.Unlock()
	select {
	case h.kick <- struct{}{}:
	default:
	}
}

func (h *hub) run() {
	defer h.wg.Done()
	for {
		select {
		case <-h.kick:
		case <-h.quit:
			return
		}
		h.qmu.Lock()
		items := h.queue
		h.queue = h.spare[:0]
		h.qmu.Unlock()
		var last *Change // the newest change handed over, marked once per batch
		silent := false  // a change some multi-namespace watcher does not carry
		// A relay's watchers wake once the whole batch is in, the head
		// moves that cover its changes included (Follower.unlock hands
		// a change and its move over together).
		woken := h.woken[:0]
		beat := false
		for _, it := range items {
			if it.Beat {
				beat = true
				continue
			}
			if it.Move {
				// A follower's head, down as well as up: a namespace that
				// joins below it (a last-good file's cursor, an upstream
				// behind) lowers it, and the mark must not speak for
				// changes of it that are still to come.
				if m := h.dispatched.Load(); m.gen == it.Gen {
					h.dispatched.Store(&mark{gen: it.Gen, rev: it.Head, seq: it.Seq})
					silent = silent || it.Head > m.rev
				}
				continue
			}
			if it.C == nil {
				h.kill(func(w *watcher) bool { return w.gen < it.Gen })
				h.dispatched.Store(&mark{gen: it.Gen})
				last = nil
				continue
			}
			h.mu.RLock()
			set := h.byNS[it.C.CS.Namespace]
			if len(set) > 0 {
				it.C.frame() // encode once, before the first watcher needs it
			}
			for w := range set {
				if !h.follow {
					w.push(it.C, h.silenced)
				} else if w.queued(it.C, h.silenced) {
					woken = append(woken, w)
				}
			}
			if h.multiByNS[it.C.CS.Namespace] < len(h.multis) {
				silent = true
			}
			h.mu.RUnlock()
			if !h.follow {
				last = it.C
			}
		}
		if last != nil {
			h.dispatched.Store(&mark{gen: last.Gen, rev: last.CS.Revision})
		}
		for _, w := range woken {
			w.signal()
		}
		clear(woken)
		h.woken = woken
		if beat {
			h.requestBeat()
		}
		if silent {
			select {
			case h.moved <- struct{}{}:
			default:
			}
		}
		clear(items)
		h.qmu.Lock()
		h.spare = items
		h.qmu.Unlock()
	}
}

// close stops the dispatcher and waits for it. Later enqueues are dropped.
func (h *hub) close() {
	h.qmu.Lock()
	already := h.closed
	h.closed = true
	h.qmu.Unlock()
	if !already {
		close(h.quit)
	}
	h.wg.Wait()
}

// cursor returns the cursor watcher w may report: every change up to it
// has been handed to w. On a relay's hub only a head marked at or after
// w's subscription speaks for w (an older one may predate a namespace of
// w that joined below it).
func (h *hub) cursor(w *watcher, own int64) int64 {
	if m := h.dispatched.Load(); m.gen == w.gen && m.seq >= w.headSeq && m.rev > own {
		return m.rev
	}
	return own
}

func (h *hub) add(w *watcher) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if w.added {
		return
	}
	w.added = true
	for _, ns := range w.names() {
		set := h.byNS[ns]
		if set == nil {
			set = make(map[*watcher]struct{})
			h.byNS[ns] = set
		}
		set[w] = struct{}{}
		if w.multi {
			h.multiByNS[ns]++
		}
	}
	if w.multi {
		h.multis[w] = struct{}{}
	}
	if w.stream {
		h.streams++
	}
}

func (h *hub) remove(w *watcher) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if !w.added {
		return
	}
	w.added = false
	for _, ns := range w.names() {
		set := h.byNS[ns]
		delete(set, w)
		if len(set) == 0 {
			delete(h.byNS, ns)
		}
		if w.multi {
			if h.multiByNS[ns]--; h.multiByNS[ns] == 0 {
				delete(h.multiByNS, ns)
			}
		}
	}
	if w.multi {
		delete(h.multis, w)
	}
	if w.stream {
		h.streams--
	}
}

// kill ends every watcher for which match reports true.
func (h *hub) kill(match func(*watcher) bool) {
	h.mu.RLock()
	defer h.mu.RUnlock()
	for _, set := range h.byNS {
		for w := range set {
			if !w.multi && match(w) {
				w.kill()
			}
		}
	}
	for w := range h.multis { // carried by several sets, or (all ended) by none
		if match(w) {
			w.kill()
		}
	}
}

func (h *hub) openStreams() int {
	h.mu.RLock()
	defer h.mu.RUnlock()
	return h.streams
}

// since records what w's subscription read (see watcher.seq); it returns w.
func (w *watcher) since(sub Subscription) *watcher {
	w.seq, w.headSeq = sub.Seq, sub.HeadSeq
	return w
}

// fresh reports whether c came after w's subscription: one before is in
// its backlog (or older than its cursor), however late the hub hands it.
func (w *watcher) fresh(c *Change) bool { return c.Seq == 0 || c.Seq > w.seq }

// watcher is one reader of a namespace's changes: an SSE stream or a
// waiting long-poll. Its queue is bounded; on overflow the watcher is ended
// (never skipped) and its client resumes from its cursor.
type watcher struct {
	ns     string   // the namespace of a single-namespace watcher
	nss    []string // those of a multi-namespace one (multi)
	multi  bool
	gen    uint64
	max    int
	stream bool
	added  bool // in the hub; guarded by hub.mu
	// seq and headSeq are, on a relay's hub, the Follower's sequence
	// numbers at the subscription: of the last change (those up to it are
	// in the backlog, or not wanted) and of the last head.
	seq, headSeq uint64

	mu         sync.Mutex
	queue      []*Change
	spare      []*Change // a drained queue, kept for reuse
	overflow   bool
	killed     bool
	finished   bool
	deadline   func(time.Time) error // the stream's write deadline; set by SSE handlers
	armedUntil time.Time             // the deadline last set by arm
	revoked    *revocation           // why its credentials ended it (guard.check)

	ident string // the identity that opened it, while the guard tracks it; guarded by guard.mu

	wake chan struct{} // capacity 1: "look at your queue"
	done chan struct{} // closed by kill
}

func newWatcher(ns string, gen uint64, max int, stream bool) *watcher {
	return &watcher{
		ns:     ns,
		gen:    gen,
		max:    max,
		stream: stream,
		wake:   make(chan struct{}, 1),
		done:   make(chan struct{}),
	}
}

// newMultiWatcher is the one watcher of a multi-namespace stream or
// long-poll, however many namespaces it carries: one bounded queue.
func newMultiWatcher(nss []string, gen uint64, max int, stream bool) *watcher {
	w := newWatcher("", gen, max, stream)
	w.nss, w.multi = nss, true
	return w
}

// names returns the namespaces the watcher carries.
func (w *watcher) names() []string {
	if w.multi {
		return w.nss
	}
	return []string{w.ns}
}

// push queues c. A watcher whose queue is full is ended, unless silenced
// (black-holed) streams must not even see a disconnect: then it ends once
// the black hole heals.
func (w *watcher) push(c *Change, silenced func() bool) {
	if w.queued(c, silenced) {
		w.signal()
	}
}

// queued is push without the signal: it reports whether w needs one.
func (w *watcher) queued(c *Change, silenced func() bool) bool {
	if c.Gen != w.gen {
		return false
	}
	w.mu.Lock()
	if w.overflow || w.killed {
		w.mu.Unlock()
		return false
	}
	if len(w.queue) >= w.max {
		w.overflow = true
		w.queue = nil
		w.mu.Unlock()
		if silenced == nil || !silenced() {
			w.kill()
		}
		return true
	}
	w.queue = append(w.queue, c)
	w.mu.Unlock()
	return true
}

func (w *watcher) signal() {
	select {
	case w.wake <- struct{}{}:
	default:
	}
}

// take empties the queue. Hand items back with recycle when done.
func (w *watcher) take() (items []*Change, overflow bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	items, w.queue, w.spare = w.queue, w.spare, nil
	return items, w.overflow
}

// recycle keeps a small drained queue for reuse, so that a steady stream
// of publishes does not allocate per watcher.
func (w *watcher) recycle(items []*Change) {
	if cap(items) == 0 || cap(items) > 64 {
		return
	}
	clear(items)
	w.mu.Lock()
	if w.spare == nil && !w.overflow {
		w.spare = items[:0]
	}
	w.mu.Unlock()
}

// kill ends the watcher: its handler returns, and a stream's pending write
// is broken so that a stalled reader cannot hold its handler.
func (w *watcher) kill() {
	w.mu.Lock()
	if w.killed {
		w.mu.Unlock()
		return
	}
	w.killed = true
	close(w.done)
	if w.deadline != nil && !w.finished {
		_ = w.deadline(time.Unix(1, 0)) // in the past: a blocked write fails now
	}
	w.mu.Unlock()
}

// attach gives a stream watcher its connection's write deadline.
func (w *watcher) attach(deadline func(time.Time) error) {
	w.mu.Lock()
	w.deadline = deadline
	w.mu.Unlock()
}

// arm sets the write deadline for the next batch, unless the watcher was
// killed (whose past deadline must stay). It reports whether to write.
func (w *watcher) arm(d time.Duration) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.killed {
		return false
	}
	// Move the deadline only when half of it is used up: a busy stream
	// then touches its connection's timer rarely, not on every batch.
	if now := time.Now(); w.deadline != nil && w.armedUntil.Sub(now) < d/2 {
		w.armedUntil = now.Add(d)
		_ = w.deadline(w.armedUntil)
	}
	return true
}

// finish marks the handler as returned: kill must not touch the
// connection any more (it may serve another request).
func (w *watcher) finish() {
	w.mu.Lock()
	w.finished = true
	w.mu.Unlock()
}

// watchers counts the watchers that carry ns.
func (h *hub) watchers(ns string) int {
	h.mu.RLock()
	defer h.mu.RUnlock()
	return len(h.byNS[ns])
}
