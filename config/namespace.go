package config

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/holdfast-dev/holdfast/internal/acks"
	"github.com/holdfast-dev/holdfast/internal/cachedir"
	"github.com/holdfast-dev/holdfast/internal/instrument"
	"github.com/holdfast-dev/holdfast/internal/snapshot"
	"github.com/holdfast-dev/holdfast/internal/syncer"
	"github.com/holdfast-dev/holdfast/transport"
)

// Namespace is an open namespace: a local, always-readable copy of its
// config, kept current by a sync loop. Its getters never touch the network,
// never block, and do not allocate. It is safe for concurrent use.
//
// A Namespace is the public handle: what readers load, the callbacks and
// the Status. Syncing is an internal/syncer.Syncer's, on its own goroutine;
// it reports through nsSink, and derive decides from those reports what is
// served and the State.
type Namespace struct {
	// Read-only after construction (prepare, start).
	name     string
	c        *Client
	opts     nsOptions
	log      *slog.Logger
	defaults *snapshot.Snapshot // served past MaxStaleness (fail-closed) or instead of a rejected first snapshot (fail-open); never nil
	// freshWindow: past it without a confirmation, data is not Fresh (the
	// source's QuietLimit, or the idle timeout). Only the clock calls it,
	// without n.mu: a source may take its own lock in QuietLimit and hold
	// it while it hands the syncer an event, whose report takes n.mu.
	freshWindow func() time.Duration
	syncer      *syncer.Syncer
	disp        *dispatcher
	acks        *acks.Queue                  // nil when the source cannot take acks
	persister   *cachedir.Persister          // nil without a cache directory
	metrics     *instrument.NamespaceMetrics // nil-safe
	ready       chan struct{}                // closed once data is served
	done        chan struct{}                // closed when every goroutine of the namespace has exited
	kick        chan struct{}                // wakes the clock after a report
	cancel      context.CancelFunc

	// Lock-free.
	running         atomic.Int32 // goroutines of the namespace still running; the last to exit finishes it
	closeOnce       sync.Once
	confirmedCursor atomic.Int64    // the cursor last confirmed, for the global revision
	serving         snapshot.Holder // what getters read
	mismatches      atomic.Int64
	rejects         atomic.Int64

	// mu guards what follows. The syncer's reports and the clock take it
	// to record a fact and settle; Status, WaitFor* and metric collection
	// take it to read. Nothing is built or checked under it.
	mu            sync.Mutex
	applied       *snapshot.Snapshot // the last good data, as served (a staged rollout evaluated); nil before any
	appliedWire   *snapshot.Snapshot // applied as it came (rollout key and all): what the last-good file keeps
	appliedOrigin Origin
	firstRejected bool      // no applied data, and the first snapshot was rejected
	confirm       time.Time // last confirmed current, with a monotonic reading; zero: never or unknown
	ageKnown      bool      // false for a file confirmed in the future
	healthy       bool      // the last sync attempt succeeded and no failure followed
	unconfirmed   bool      // the server's last report said its upstream is not confirming the data
	appliedAt     time.Time // when data from the network was last applied
	cursor        int64
	head          int64         // the newest namespace revision the server told of
	headAt        time.Time     // when the server last told of its head; zero: never, in this process
	window        time.Duration // freshWindow's latest answer, as the clock last asked it
	status        Status
	revWait       chan struct{} // closed at the next swap of what is served; nil until WaitForRevision waits (n.mu)
	stateWait     chan struct{} // closed and replaced at every state change
	waiters       int           // Client.Namespace calls waiting for ready
	lastPersist   time.Time
	// newHistory: the applied data is of history rewritten under its store
	// id; records persisted may replace the file's higher revision, until
	// one is written.
	newHistory bool
	// persistedConfirm is the confirmation time of the last record handed
	// to the persister.
	persistedConfirm  time.Time
	failedClosedTotal time.Duration // time spent in StateFailedClosed, before the current stint
	// What this client last reported, told again while a rollout runs
	// (rereport): when, and its newest nack and would-nack.
	reportedAt time.Time
	nack       nackReport
	would      transport.Ack
}

// nackReport is a rejection as the client reported it.
type nackReport struct {
	revision int64
	rollout  string
	err      error
}

// Name is the namespace's name.
func (n *Namespace) Name() string { return n.name }

// Snapshot returns the data currently served, at one revision.
func (n *Namespace) Snapshot() Snapshot {
	return Snapshot{s: n.serving.Load(), ns: n}
}

// Get returns key's value in the data currently served. It does not block
// or allocate.
func (n *Namespace) Get(key string) (Value, bool) { return n.Snapshot().Get(key) }

// String returns key's string, or def; see Snapshot.String.
func (n *Namespace) String(key, def string) string { return n.Snapshot().String(key, def) }

// Int returns key's integer, or def; see Snapshot.Int.
func (n *Namespace) Int(key string, def int) int { return n.Snapshot().Int(key, def) }

// Float returns key's number, or def; see Snapshot.Float.
func (n *Namespace) Float(key string, def float64) float64 { return n.Snapshot().Float(key, def) }

// Bool returns key's boolean, or def; see Snapshot.Bool.
func (n *Namespace) Bool(key string, def bool) bool { return n.Snapshot().Bool(key, def) }

// Duration returns key's duration, or def; see Snapshot.Duration.
func (n *Namespace) Duration(key string, def time.Duration) time.Duration {
	return n.Snapshot().Duration(key, def)
}

// Revision is the revision of the data currently served.
func (n *Namespace) Revision() int64 { return n.Snapshot().Revision() }

// TypeMismatches counts getter calls that found a value of another type
// than asked and returned the default.
func (n *Namespace) TypeMismatches() int64 { return n.mismatches.Load() }

// Rejected counts updates rejected whole: undecodable values, or a failed
// Schema check.
func (n *Namespace) Rejected() int64 { return n.rejects.Load() }

// CallbackPanics counts callbacks of this namespace that panicked.
func (n *Namespace) CallbackPanics() int64 { return n.disp.panics.Load() }

// OnChange calls fn after each change of key's value, that is of what Get
// returns, with the old and new value: each change made after OnChange is
// called, never one before it (nor the first data served). Callbacks of a
// namespace run one at a time on a goroutine of their own, in the order of
// the updates, after the
// new data is served (inside fn, Revision() >= ch.Revision, within one store
// and while no Defaults are served); a slow callback delays only later
// callbacks of the namespace, never applying or reading; a panic is
// recovered, logged and counted. Callbacks must not call Client.Close. The
// returned function stops the subscription: no call starts after it
// returns, and one running is waited for (unless stop is called from it).
func (n *Namespace) OnChange(key string, fn func(Change)) (stop func()) {
	return n.disp.subscribe(&subscription{key: key, onChange: fn})
}

// OnAnyChange calls fn with every key's change of each update, as one
// ChangeSet, under the same contract as OnChange.
func (n *Namespace) OnAnyChange(fn func(ChangeSet)) (stop func()) {
	return n.disp.subscribe(&subscription{onAny: fn})
}

// OnStatusChange calls fn with the namespace's Status at each change of
// State, in order, on the callback goroutine (see OnChange).
func (n *Namespace) OnStatusChange(fn func(Status)) (stop func()) {
	return n.disp.subscribe(&subscription{onStatus: fn})
}

// OnReject calls fn with each update the namespace rejects whole (it
// failed to decode, or failed Schema), under the same contract as
// OnChange. The last good keeps serving; Status().LastError and Rejected
// show the same.
func (n *Namespace) OnReject(fn func(*RejectedError)) (stop func()) {
	return n.disp.subscribe(&subscription{onReject: fn})
}

// WaitForRevision blocks until the served revision is at least rev, ctx
// ends (its error is returned) or the client closes (ErrClosed). Revisions
// compare within one store: after the server's store is reset (Status
// shows a new StoreID) its revisions start again from 1, and a wait for a
// revision of the old store may never end; use a context deadline.
func (n *Namespace) WaitForRevision(ctx context.Context, rev int64) error {
	for {
		n.mu.Lock()
		reached := n.Revision() >= rev
		if !reached && n.revWait == nil {
			n.revWait = make(chan struct{})
		}
		wait := n.revWait
		n.mu.Unlock()
		if reached {
			return nil
		}
		select {
		case <-wait:
		case <-ctx.Done():
			return ctx.Err()
		case <-n.done:
			return ErrClosed
		}
	}
}

// WaitForState blocks until the namespace is in one of states, ctx ends
// (its error is returned) or the client closes (ErrClosed, unless
// StateClosed is among states).
func (n *Namespace) WaitForState(ctx context.Context, states ...State) error {
	for {
		n.mu.Lock()
		st, wait := n.status.State, n.stateWait
		n.mu.Unlock()
		if slices.Contains(states, st) {
			return nil
		}
		select {
		case <-wait:
		case <-ctx.Done():
			return ctx.Err()
		case <-n.done:
			if slices.Contains(states, StateClosed) {
				return nil
			}
			return ErrClosed
		}
	}
}

// Status returns the namespace's current status.
func (n *Namespace) Status() Status {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.statusLocked()
}

// statusLocked is Status with n.mu held.
func (n *Namespace) statusLocked() Status {
	st := n.status
	if !n.confirm.IsZero() {
		st.Staleness = time.Since(n.confirm)
	}
	if er := n.c.endpoints; er != nil {
		st.Endpoint = er.Endpoint()
	}
	if wr := n.c.watchModes; wr != nil {
		st.WatchMode = wr.WatchMode().String()
	}
	// The last error is past once data was confirmed after it; a
	// rejection, once a later revision applied.
	le := &st.LastError
	since := n.confirm
	if errors.Is(le.Err, ErrRejected) { // not a malformed stream: it rejected no revision
		since = n.appliedAt
	}
	if le.Kind != ErrorBind { // a Binding says when its error is past
		le.Recovered = !le.Time.IsZero() && since.After(le.Time)
	}
	return st
}

// setState moves to state and queues the transition for OnStatusChange.
// n.mu must be held.
func (n *Namespace) setState(state State) {
	prev := n.status.State
	if prev == state {
		return
	}
	now := time.Now()
	if prev == StateFailedClosed {
		n.failedClosedTotal += now.Sub(n.status.Since)
	}
	if (state == StateBreached || state == StateFailedClosed) && prev != StateBreached && prev != StateFailedClosed {
		n.metrics.Breach()
	}
	n.status.State = state
	n.status.Since = now
	close(n.stateWait)
	n.stateWait = make(chan struct{})
	st := n.statusLocked()
	n.disp.enqueue(item{status: &st})
}

// facts gathers what derive decides from. n.mu must be held.
func (n *Namespace) facts(now time.Time) facts {
	return facts{
		applied: n.applied, appliedOrigin: n.appliedOrigin, defaults: n.defaults,
		firstRejected: n.firstRejected, confirmed: n.confirm, ageKnown: n.ageKnown,
		healthy: n.healthy, unconfirmed: n.unconfirmed, now: now,
		maxStaleness: n.opts.maxStaleness, failClosed: n.opts.failClosed, freshWindow: n.window,
	}
}

// settle makes what derive says so: serves its snapshot (telling the
// callbacks what that changes for Get), sets the State, and closes ready
// once the namespace may open. u, when set, is the update that led here,
// with the changes it makes to what was served, worked out before n.mu
// was taken. n.mu must be held.
func (n *Namespace) settle(u *update) {
	out := derive(n.facts(time.Now()))
	if old := n.serving.Load(); out.snap != old {
		n.serve(out.snap)
		switch {
		case out.origin == OriginDefaults && old != nil:
			n.log.Warn("config: stale past MaxStaleness; failing closed to defaults", "max_staleness", n.opts.maxStaleness)
		case old != nil && old == n.defaults:
			n.log.Info("config: fresh data again; leaving defaults")
		}
		n.notifyChanges(old, out.snap, u)
	}
	n.status.Origin = out.origin
	n.setState(out.state)
	// Open on data, or on the Defaults of a rejected first snapshot
	// (fail-open); never on the Defaults of a fail-closed namespace.
	if out.state == StateFresh || out.state == StateStale || out.state == StateBreached {
		n.readyOnce()
	}
}

// update is an Applied report with what it changes for Get.
type update struct {
	syncer.Update
	// served is what was served when changes were worked out; changes
	// are from it to Snapshot.
	served  *snapshot.Snapshot
	changes []Change
}

// newUpdate works out what u changes from served, the data served now:
// O(keys in the change) when u is a change set on it, else a full diff.
// It takes no lock: the snapshots are immutable.
func (n *Namespace) newUpdate(u syncer.Update, served *snapshot.Snapshot) *update {
	up := &update{Update: u, served: served}
	if served != nil {
		up.changes = n.changes(served, u.Snapshot, &u)
	}
	return up
}

func (n *Namespace) changes(old, next *snapshot.Snapshot, u *syncer.Update) []Change {
	if u != nil && u.Change != nil && old == u.Prev && next == u.Snapshot {
		return changedKeys(n.name, old, next, u.Change.Puts, u.Change.Deletes)
	}
	return diff(n.name, old, next)
}

// notifyChanges queues for the callbacks what a swap from old to next
// changes for Get. The first data is no change: callbacks report changes
// of what Get returns once the namespace is open. n.mu must be held.
func (n *Namespace) notifyChanges(old, next *snapshot.Snapshot, u *update) {
	if old == nil || next == nil {
		return
	}
	var changes []Change
	if u != nil && u.served == old && u.Snapshot == next {
		changes = u.changes // worked out before the lock
	} else {
		var su *syncer.Update
		if u != nil {
			su = &u.Update
		}
		changes = n.changes(old, next, su)
	}
	if len(changes) > 0 {
		n.disp.enqueue(item{changes: &ChangeSet{Namespace: n.name, Revision: next.Revision(), PrevRevision: old.Revision(), Changes: changes}})
	}
}

// runClock settles the namespace when time alone changes its state (Fresh
// to Stale without confirmations; into a breach past MaxStaleness); the
// syncer's reports settle it otherwise. It returns when ctx ends.
func (n *Namespace) runClock(ctx context.Context) {
	t := time.NewTimer(time.Hour)
	defer t.Stop()
	for {
		window := n.freshWindow() // outside n.mu: see freshWindow
		n.mu.Lock()
		n.window = window
		n.settle(nil)
		next := nextChange(n.facts(time.Now()), n.status.State)
		n.mu.Unlock()
		t.Stop()
		if !next.IsZero() {
			t.Reset(time.Until(next) + time.Millisecond)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-n.kick:
		}
	}
}

// serve makes snap the served data and wakes WaitForRevision. n.mu must be
// held.
func (n *Namespace) serve(snap *snapshot.Snapshot) {
	n.serving.Store(snap)
	if n.revWait != nil { // made by a waiter: a swap with nobody waiting makes none
		close(n.revWait)
		n.revWait = nil
	}
}

// readyOnce closes ready, once. n.mu must be held.
func (n *Namespace) readyOnce() {
	if !isClosed(n.ready) {
		close(n.ready)
	}
}

// Close stops the namespace's sync loop, clock and callbacks and waits for
// them to return (a callback that is running is waited for); it takes the
// namespace out of the client's shared watch stream without disturbing
// the others. The namespace keeps serving its last data to readers, in
// StateClosed; a later Client.Namespace of the same name opens it anew.
// Its last confirmation is handed to the client's last-good writer, which
// writes it in the background (Client.Close waits for it). Close is
// idempotent and safe to call concurrently; it must not be called from a
// callback of the namespace.
func (n *Namespace) Close() error {
	c := n.c
	n.closeOnce.Do(func() {
		c.mu.Lock()
		if c.namespaces[n.name] == n {
			delete(c.namespaces, n.name)
			// Until it has finished, a new open of the name waits: its
			// metrics and file are this one's until then.
			c.closing[n.name] = n.done
		}
		c.mu.Unlock()
		if n.cancel != nil {
			n.cancel()
		}
	})
	<-n.done
	return nil
}
