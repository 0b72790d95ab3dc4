package streammux

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/holdfast-dev/holdfast/transport"
)

// Tunables of the multiplexer.
const (
	// streamDebounce batches joins and leaves: a stream restarts once
	// membership has been still this long, or after streamDebounceMax.
	streamDebounce    = 5 * time.Millisecond
	streamDebounceMax = 50 * time.Millisecond
	// memberQueue bounds the events waiting for one namespace's syncer.
	// A namespace whose queue overflows leaves the stream (its Watch ends
	// with errMemberOverflow and it rejoins from its cursor); the others
	// are never held up.
	memberQueue = 1024
	// streamRetryEvery is how long after a source said it has no stream
	// the namespaces watch one by one before the stream is tried again
	// (at their next reconnect).
	streamRetryEvery = 5 * time.Minute
)

// errMemberOverflow ends a namespace's Watch whose queue overflowed: its
// syncer could not keep up with the shared stream. It resumes from its
// cursor.
var errMemberOverflow = errors.New("config: namespace fell behind the shared watch stream")

// errRestart is the cause of a stream attempt cut for a membership change.
var errRestart = errors.New("config: stream membership changed")

// View is the transport.Source a namespace's syncer sees: snapshots go
// to the real source, watches to the client's multiplexer.
type View struct {
	Src transport.Source
	Mux *Mux // nil when Src is no StreamSource
}

func (v View) Snapshot(ctx context.Context, req transport.SnapshotRequest) (*transport.Snapshot, error) {
	return v.Src.Snapshot(ctx, req)
}

func (v View) Watch(ctx context.Context, req transport.WatchRequest, handle func(transport.Event) error) error {
	if v.Mux == nil || v.Mux.fallback() {
		return v.Src.Watch(ctx, req, handle)
	}
	since, err := v.Mux.watch(ctx, req, handle)
	if errors.Is(err, transport.ErrStreamUnsupported) && ctx.Err() == nil {
		// Decided for this attempt: watch alone, from where the stream
		// left the namespace.
		return v.Src.Watch(ctx, transport.WatchRequest{Namespace: req.Namespace, Since: since}, handle)
	}
	return err
}

// Mux owns the client's one shared stream and fans its events out to
// the namespaces in it (members), each through a bounded queue drained by
// that namespace's syncer on its own goroutine, inside its Watch.
type Mux struct {
	src transport.StreamSource
	log *slog.Logger
	ctx context.Context // the client's

	startOnce sync.Once
	wg        sync.WaitGroup
	changed   chan struct{} // cap 1: membership changed

	mu          sync.Mutex
	members     map[string]*member
	ended       map[string]*member      // gone members whose end no Watch has taken yet
	attaches    int64                   // Watch calls so far: a failed attempt waits for the next
	cancel      context.CancelCauseFunc // of the running attempt; nil between attempts
	inStream    map[string]*member      // the members the running attempt carries
	restart     *time.Timer             // a debounced restart of the running attempt
	firstChange time.Time               // of the changes the pending restart batches
	unsupported time.Time               // when the source last said it has no stream
	attempts    int                     // stream attempts opened, for tests
}

// member is one namespace of the stream. Its queue holds the events not
// yet taken by its Watch; cursor is after the last event queued, handled
// after the last taken: between two Watch calls of its syncer (a backoff,
// a backstop snapshot) the stream keeps queueing for it, and a Watch from
// handled or later resumes from the queue without restarting the stream.
type member struct {
	ns string
	// queue holds the events not yet taken, at most memberQueue; it grows
	// as events come (a channel of memberQueue slots cost every namespace
	// of every client 16 KiB). spare is the slice a Watch took last, for
	// the next events. (mux.mu)
	queue, spare []transport.Event
	taken        int           // events a Watch took and has not delivered yet: they count in the bound (mux.mu)
	ready        chan struct{} // cap 1: queue has events
	cursor       int64         // after the last event queued (mux.mu)
	lastRev      int64         // the revision of the last change queued, 0 if none since the member (re)started (mux.mu)
	handled      int64         // after the last event taken by a Watch (mux.mu)
	// ended is closed (and err set) when the stream ends the member's
	// current Watch: its namespace's Ended, an overflow, the stream's
	// failure. Replaced on each attach. (mux.mu)
	ended    chan struct{}
	err      error
	attached bool // a Watch is draining the queue (mux.mu)
	// gone: the member is out of the stream (Ended, overflow): it queues
	// nothing more, and its next Watch starts it afresh. (mux.mu)
	gone bool
	// stale: its syncer refused an event (a gap, a new store): the next
	// Watch starts it afresh from its own since. (mux.mu)
	stale bool
	// undelivered: it was ended (gone) while no Watch drained it: its
	// next Watch returns err at once (a cursor_ahead after a restart
	// must reach the syncer, which resnapshots at once). (mux.mu)
	undelivered bool
}

// New returns the multiplexer of src's one stream; it stops when ctx ends
// (then Wait waits for its goroutine). It opens nothing before a View's
// first Watch.
func New(ctx context.Context, src transport.StreamSource, log *slog.Logger) *Mux {
	return &Mux{src: src, log: log, ctx: ctx, changed: make(chan struct{}, 1), members: make(map[string]*member), ended: make(map[string]*member)}
}

// fallback reports whether watches go one per namespace for now: the
// source said it has no stream, less than streamRetryEvery ago.
func (m *Mux) fallback() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return !m.unsupported.IsZero() && time.Since(m.unsupported) < streamRetryEvery
}

// watch is a namespace's Watch over the shared stream. It returns the
// cursor the namespace's events were taken up to (for a fallback to the
// source's own Watch) and the error that ended it.
func (m *Mux) watch(ctx context.Context, req transport.WatchRequest, handle func(transport.Event) error) (int64, error) {
	m.startOnce.Do(func() {
		m.wg.Add(1)
		go func() { defer m.wg.Done(); m.run() }()
	})
	mb := m.attach(req)
	for {
		// What waits first (a Watch that resumes from the queue finds it
		// there), and what came while it was delivered.
		if err := m.drain(ctx, mb, handle); err != nil {
			return m.detach(mb, ctx.Err() == nil), err
		}
		select {
		case <-mb.ready:
		case <-mb.ended:
			// Events queued before the end are delivered first (this
			// Watch is the queue's one reader).
			if err := m.drain(ctx, mb, handle); err != nil {
				return m.detach(mb, ctx.Err() == nil), err
			}
			m.mu.Lock()
			err, since := mb.err, mb.handled
			m.mu.Unlock()
			m.detach(mb, false)
			return since, err
		case <-ctx.Done():
			return m.detach(mb, false), ctx.Err()
		}
	}
}

// drain delivers mb's queued events in order, taken at once. It stops at
// handle's error, or when ctx ends, and puts back what it did not
// deliver, in front of what came meanwhile.
func (m *Mux) drain(ctx context.Context, mb *member, handle func(transport.Event) error) error {
	m.mu.Lock()
	evs := mb.queue
	mb.queue, mb.spare, mb.taken = mb.spare[:0], nil, len(evs)
	m.mu.Unlock()
	for i, ev := range evs {
		err := ctx.Err()
		if err == nil {
			err = m.deliver(mb, ev, handle)
		}
		if err != nil {
			m.mu.Lock()
			mb.queue, mb.taken = append(evs[i+1:len(evs):len(evs)], mb.queue...), 0
			m.mu.Unlock()
			return err
		}
	}
	clear(evs)
	m.mu.Lock()
	if mb.spare == nil && cap(evs) <= 64 { // a burst's big slice goes back to the heap
		mb.spare = evs[:0]
	}
	m.mu.Unlock()
	return nil
}

func (m *Mux) deliver(mb *member, ev transport.Event, handle func(transport.Event) error) error {
	if err := handle(ev); err != nil {
		return err
	}
	m.mu.Lock()
	mb.taken--
	switch {
	case ev.Change != nil:
		mb.handled = max(mb.handled, ev.Change.Revision)
	case ev.Progress != nil:
		mb.handled = max(mb.handled, ev.Progress.Cursor)
	}
	m.mu.Unlock()
	return nil
}

// attach makes the namespace's Watch the one draining its member, joining
// the stream if it is not in it (or must start afresh).
func (m *Mux) attach(req transport.WatchRequest) *member {
	m.mu.Lock()
	defer m.mu.Unlock()
	if !m.unsupported.IsZero() && time.Since(m.unsupported) < streamRetryEvery {
		ended := make(chan struct{})
		close(ended)
		return &member{ns: req.Namespace, handled: req.Since, ended: ended, err: transport.ErrStreamUnsupported, gone: true}
	}
	m.attaches++
	mb := m.members[req.Namespace]
	if mb == nil {
		mb = m.ended[req.Namespace]
	}
	if mb != nil && mb.undelivered {
		// Ended while its syncer was away: this Watch takes the end.
		delete(m.ended, req.Namespace)
		mb.undelivered, mb.attached = false, true
		return mb
	}
	if m.cancel == nil {
		m.wakeLocked() // a syncer back from its backoff: the stream may reopen
	}
	if mb != nil && (mb.gone || mb.stale || req.Since < mb.handled) {
		// Not to be resumed from its queue: out of the stream, refused by
		// its syncer, or the syncer's cursor went back (a new store).
		m.dropLocked(mb)
		mb = nil
	}
	if mb == nil {
		mb = &member{ns: req.Namespace, ready: make(chan struct{}, 1), cursor: req.Since, handled: req.Since}
		m.members[req.Namespace] = mb
		m.changedLocked()
	}
	// A Since at or past handled resumes from the queue: the stream is
	// complete for it from handled on, and the syncer skips what it
	// already holds.
	mb.handled = max(mb.handled, req.Since)
	mb.ended, mb.err, mb.attached = make(chan struct{}), nil, true
	return mb
}

// detach ends a Watch's hold on its member; refused marks it stale (its
// syncer refused an event). It returns the cursor its events were taken
// up to.
func (m *Mux) detach(mb *member, refused bool) int64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	mb.attached = false
	if refused {
		mb.stale = true
	}
	return mb.handled
}

// Leave takes a closed namespace out of the stream.
func (m *Mux) Leave(ns string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.ended, ns)
	if mb := m.members[ns]; mb != nil {
		m.dropLocked(mb)
		m.changedLocked()
	}
}

// dropLocked removes mb from the members. m.mu must be held.
func (m *Mux) dropLocked(mb *member) {
	if m.members[mb.ns] == mb {
		delete(m.members, mb.ns)
	}
	mb.gone = true
}

// changedLocked notes a membership change: the running attempt restarts
// once joins and leaves have been quiet for streamDebounce (at most
// streamDebounceMax after the first), or the next one starts. m.mu must be
// held.
func (m *Mux) changedLocked() {
	m.wakeLocked()
	if m.cancel == nil {
		return
	}
	now := time.Now()
	if m.restart == nil {
		m.firstChange = now
		cancel := m.cancel
		m.restart = time.AfterFunc(streamDebounce, func() { cancel(errRestart) })
		return
	}
	if now.Sub(m.firstChange) < streamDebounceMax {
		m.restart.Reset(streamDebounce)
	}
}

// endLocked ends mb's current Watch with err; gone takes it out of the
// stream. m.mu must be held.
func (m *Mux) endLocked(mb *member, err error, gone bool) {
	if gone {
		m.dropLocked(mb)
	}
	if mb.ended != nil && mb.err == nil {
		mb.err = err
		close(mb.ended)
		if gone && !mb.attached {
			mb.undelivered = true
			m.ended[mb.ns] = mb
		}
	}
}

// wakeLocked signals the stream goroutine (membership, or a member back).
// m.mu must be held.
func (m *Mux) wakeLocked() {
	select {
	case m.changed <- struct{}{}:
	default:
	}
}

// run opens the stream with every member's cursor, restarts it on
// membership changes and, after a failure, once a namespace's syncer
// watches again (the syncers' backoff paces it), until the client closes.
func (m *Mux) run() {
	for {
		if !m.waitMembers() {
			return
		}
		attemptCtx, cancel := context.WithCancelCause(m.ctx)
		req, carried := m.open(cancel)

		err := m.src.WatchStream(attemptCtx, req, func(ev transport.StreamEvent) error {
			return m.dispatch(ev)
		})
		cause := context.Cause(attemptCtx)
		cancel(nil)
		m.mu.Lock()
		m.cancel, m.inStream = nil, nil
		if m.restart != nil {
			m.restart.Stop()
			m.restart = nil
		}
		m.mu.Unlock()
		if m.ctx.Err() != nil {
			return
		}
		if errors.Is(cause, errRestart) {
			continue // membership changed: at once, with every cursor
		}
		unsupported := errors.Is(err, transport.ErrStreamUnsupported)
		m.mu.Lock()
		if unsupported {
			m.unsupported = time.Now()
			m.log.Info("config: the source has no multi-namespace watch; watching each namespace alone")
		}
		// Every member's Watch ends with the stream's error (its syncer
		// reports it and backs off); members stay, queueing from their
		// cursors once the stream is back. Without a stream, every member
		// leaves it and watches alone.
		if unsupported {
			for _, mb := range m.members {
				m.endLocked(mb, err, true)
			}
		}
		for _, mb := range carried {
			m.endLocked(mb, err, unsupported)
		}
		attaches := m.attaches // the Watches back after this are the syncers' retries
		m.mu.Unlock()
		if unsupported {
			continue // its members watch alone; a later join tries again
		}
		m.log.Debug("config: shared watch stream ended; reopening once a namespace's watch is back", "err", err)
		// The syncers back off (each its own, jittered, Retry-After
		// and all): the stream reopens when the first of them watches
		// again, so that its first answer reaches a watching syncer
		// (a new store resnapshots at once), and no second backoff
		// adds to theirs.
		if !m.awaitAttach(attaches) {
			return
		}
	}
}

// awaitAttach waits, after a failed attempt, until a namespace's Watch
// comes back (a Watch call after since: attach wakes the stream
// goroutine), or the client closes (false).
func (m *Mux) awaitAttach(since int64) bool {
	for {
		m.mu.Lock()
		back := m.attaches > since
		for _, mb := range m.members {
			back = back || mb.attached && mb.err == nil // joined after the attempt opened: watching now
		}
		m.mu.Unlock()
		if back {
			return true
		}
		select {
		case <-m.ctx.Done():
			return false
		case <-m.changed:
		}
	}
}

// waitMembers waits until there are members and membership has been still
// for streamDebounce (batching joins), or the client closes (false).
func (m *Mux) waitMembers() bool {
	for {
		m.mu.Lock()
		n := len(m.members)
		fb := !m.unsupported.IsZero() && time.Since(m.unsupported) < streamRetryEvery
		m.mu.Unlock()
		if n > 0 && !fb {
			break
		}
		select {
		case <-m.ctx.Done():
			return false
		case <-m.changed:
		}
	}
	t := time.NewTimer(streamDebounce)
	defer t.Stop()
	deadline := time.Now().Add(streamDebounceMax)
	for {
		select {
		case <-m.ctx.Done():
			return false
		case <-m.changed:
			if time.Now().Before(deadline) {
				t.Reset(streamDebounce)
			}
		case <-t.C:
			return true
		}
	}
}

// open makes the request of the next attempt, whose cancel it records:
// every member, each from its cursor. A change after it restarts the
// attempt.
func (m *Mux) open(cancel context.CancelCauseFunc) (transport.StreamRequest, map[string]*member) {
	m.mu.Lock()
	defer m.mu.Unlock()
	select {
	case <-m.changed: // this attempt carries every change so far
	default:
	}
	req := transport.StreamRequest{Namespaces: make([]transport.WatchRequest, 0, len(m.members))}
	carried := make(map[string]*member, len(m.members))
	for ns, mb := range m.members {
		req.Namespaces = append(req.Namespaces, transport.WatchRequest{Namespace: ns, Since: mb.cursor})
		carried[ns] = mb
	}
	m.cancel, m.inStream, m.attempts = cancel, carried, m.attempts+1
	return req, carried
}

// dispatch queues one stream event for the members it concerns. It never
// blocks: a member whose queue is full leaves the stream.
func (m *Mux) dispatch(ev transport.StreamEvent) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	switch {
	case ev.Change != nil:
		mb := m.inStream[ev.Change.Namespace]
		if mb == nil || mb.gone {
			return nil // left the stream since it opened
		}
		if ev.Change.Revision <= mb.cursor {
			return nil // queued already (a stream resumed from an older cursor)
		}
		if m.queueLocked(mb, transport.Event{Change: ev.Change}) {
			mb.cursor, mb.lastRev = ev.Change.Revision, ev.Change.Revision
		}
	case ev.Progress != nil:
		p := ev.Progress
		for _, mb := range m.inStream {
			// A progress at the cursor already reached still counts: it
			// confirms the namespace current (a heartbeat, the progress
			// at the head a reopened stream starts with).
			if mb.gone || p.Cursor < mb.cursor {
				continue
			}
			// The namespace revision is the last change of it the stream
			// delivered: nothing of it changed since, so the syncer's
			// gap check holds (0 when none: at or below anything applied).
			// The stream's age of relayed data is every member's.
			prog := &transport.Progress{Namespace: mb.ns, StoreID: p.StoreID, Revision: mb.lastRev, Cursor: p.Cursor,
				AgeMillis: p.AgeMillis, Unconfirmed: p.Unconfirmed}
			if m.queueLocked(mb, transport.Event{Progress: prog}) {
				mb.cursor = p.Cursor
			}
		}
	case ev.Ended != nil:
		mb := m.inStream[ev.Ended.Namespace]
		if mb == nil || mb.gone {
			return nil
		}
		err := ev.Ended.Err
		if err == nil {
			err = fmt.Errorf("%w: namespace %q ended without an error", transport.ErrMalformed, ev.Ended.Namespace)
		}
		m.endLocked(mb, err, true)
	default:
		return fmt.Errorf("%w: empty stream event", transport.ErrMalformed)
	}
	return nil
}

// queueLocked queues ev for mb, or, if its queue is full, takes mb out of
// the stream. m.mu must be held.
func (m *Mux) queueLocked(mb *member, ev transport.Event) bool {
	if len(mb.queue)+mb.taken >= memberQueue {
		m.log.Warn("config: namespace fell behind the shared watch stream; it resumes from its cursor", "ns", mb.ns)
		m.endLocked(mb, errMemberOverflow, true)
		return false
	}
	mb.queue = append(mb.queue, ev)
	select {
	case mb.ready <- struct{}{}:
	default:
	}
	return true
}

// Wait waits for the stream goroutine, once the context given to New ended.
func (m *Mux) Wait() { m.wg.Wait() }
