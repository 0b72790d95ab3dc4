package config

import (
	"context"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/holdfast-dev/holdfast/cache"
	"github.com/holdfast-dev/holdfast/schema"
	"github.com/holdfast-dev/holdfast/telemetry"
)

// Namespace is an open namespace: a local, always-readable copy of its
// config, kept current by a sync loop. Its getters never touch the network,
// never block, and do not allocate. It is safe for concurrent use.
type Namespace struct {
	name string
	c    *Client
	opts nsOptions
	log  *slog.Logger

	// serving is what getters read: the last good data, or the Defaults
	// of a fail-closed namespace past its MaxStaleness.
	serving    cache.Holder
	mismatches atomic.Int64
	disp       *dispatcher

	ready     chan struct{} // closed once data is served
	readyOnce sync.Once
	cancel    context.CancelFunc
	done      chan struct{} // closed when every goroutine of the namespace has exited

	// mu guards what follows. The sync loop holds it while it applies;
	// readers never take it.
	mu        sync.Mutex
	applied   *cache.Snapshot // the last good data; nil before any
	doc       map[string]any  // applied as generic JSON, kept only with a schema
	storeID   string          // the store the cursor belongs to
	cursor    int64           // where a watch resumes
	rejected  int64           // the namespace revision last rejected, if any
	status    Status          // Staleness is computed by Status()
	confirm   time.Time       // last confirmed current, with a monotonic reading
	revWait   chan struct{}   // closed and replaced at every swap
	stateWait chan struct{}   // closed and replaced at every state change
	waiters   int             // Client.Namespace calls waiting for ready
	live      bool            // the last sync attempt succeeded and no error followed

	schema      *schema.Schema // nil: no checks beyond decoding
	acks        *acker         // nil when the source cannot take acks
	rejects     atomic.Int64
	defaults    *cache.Snapshot // served past MaxStaleness (fail-closed) or instead of a rejected first snapshot (fail-open)
	persister   *cache.Persister
	lastPersist time.Time
	// persistedConfirm is the confirmation time of the last record handed
	// to the persister.
	persistedConfirm time.Time
	kick             chan struct{} // wakes the staleness enforcer after a confirmation

	metrics           *telemetry.NamespaceMetrics // nil-safe
	head              int64                       // the newest namespace revision the server told of
	failedClosedTotal time.Duration               // time spent in StateFailedClosed, before the current stint
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
// WithSchema check.
func (n *Namespace) Rejected() int64 { return n.rejects.Load() }

// CallbackPanics counts callbacks of this namespace that panicked.
func (n *Namespace) CallbackPanics() int64 { return n.disp.panics.Load() }

// OnChange calls fn after each change of key's value, that is of what Get
// returns, with the old and new value. Callbacks of a namespace run one at a
// time on a goroutine of their own, in the order of the updates, after the
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

// WaitForRevision blocks until the served revision is at least rev, ctx
// ends (its error is returned) or the client closes (ErrClosed). Revisions
// compare within one store: after the server's store is reset (Status
// shows a new StoreID) its revisions start again from 1, and a wait for a
// revision of the old store may never end; use a context deadline.
func (n *Namespace) WaitForRevision(ctx context.Context, rev int64) error {
	for {
		n.mu.Lock()
		reached, wait := n.Revision() >= rev, n.revWait
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
	st := n.status
	if !n.confirm.IsZero() {
		st.Staleness = time.Since(n.confirm)
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
	st := n.status
	if !n.confirm.IsZero() {
		st.Staleness = time.Since(n.confirm)
	}
	n.disp.enqueue(item{status: &st})
}

// refreshState derives the state from the data held, the connection and
// the staleness policy, and switches a fail-closed namespace between its
// data and its Defaults. n.mu must be held.
func (n *Namespace) refreshState() {
	breached := n.opts.maxStaleness > 0 && !n.confirm.IsZero() && time.Since(n.confirm) > n.opts.maxStaleness
	servingDefaults := n.serving.Load() == n.defaults && n.defaults != nil
	switch {
	case n.applied == nil && servingDefaults:
		n.setState(StateStale) // a rejected first snapshot, fail-open
	case n.applied == nil:
		n.setState(StateSyncing)
	case breached && n.opts.failClosed:
		if !servingDefaults {
			n.switchTo(n.defaults, OriginDefaults)
			n.log.Warn("config: stale past MaxStaleness; failing closed to defaults", "max_staleness", n.opts.maxStaleness)
		}
		n.setState(StateFailedClosed)
	default:
		if servingDefaults {
			n.switchTo(n.applied, OriginNetwork)
			n.log.Info("config: fresh data again; leaving defaults")
		}
		switch {
		case breached:
			n.setState(StateBreached)
		case n.live:
			n.setState(StateFresh)
		default:
			n.setState(StateStale)
		}
	}
}

// switchTo serves snap instead of what is served now, and tells the
// callbacks what that changes for Get. n.mu must be held.
func (n *Namespace) switchTo(snap *cache.Snapshot, origin Origin) {
	old := n.serving.Load()
	n.serve(snap, origin)
	if changes := diff(n.name, old, snap); len(changes) > 0 {
		cs := ChangeSet{Namespace: n.name, Revision: snap.Revision(), Changes: changes}
		if old != nil {
			cs.PrevRevision = old.Revision()
		}
		n.disp.enqueue(item{changes: &cs})
	}
}

// enforceStaleness moves the namespace into its breach state when its data
// grows older than MaxStaleness while nothing else happens; confirmations
// move it out (refreshState, from the sync loop). It returns when ctx ends.
func (n *Namespace) enforceStaleness(ctx context.Context) {
	t := time.NewTimer(n.opts.maxStaleness)
	defer t.Stop()
	for {
		n.mu.Lock()
		n.refreshState()
		wait := n.opts.maxStaleness
		if !n.confirm.IsZero() {
			wait = time.Until(n.confirm.Add(n.opts.maxStaleness)) + time.Millisecond
		}
		n.mu.Unlock()
		if wait > 0 {
			t.Reset(wait)
		} else {
			t.Stop() // breached: only a confirmation can change that
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
func (n *Namespace) serve(snap *cache.Snapshot, origin Origin) {
	n.serving.Store(snap)
	n.status.Origin = origin
	close(n.revWait)
	n.revWait = make(chan struct{})
	n.readyOnce.Do(func() { close(n.ready) })
}
