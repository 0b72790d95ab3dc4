package config

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"time"

	"github.com/cenkalti/backoff/v4"

	"github.com/holdfast-dev/holdfast/cache"
	"github.com/holdfast-dev/holdfast/schema"
	"github.com/holdfast-dev/holdfast/telemetry"
	"github.com/holdfast-dev/holdfast/transport"
)

// run is the namespace's sync loop, the one goroutine that applies its
// data: snapshot, then watch from the cursor; on a disconnect resume from
// the cursor after a backoff; on compaction, a gap or a new store id,
// resnapshot. It never gives up; it returns when ctx ends.
func (n *Namespace) run(ctx context.Context) {
	bo := n.c.newBackoff()
	needSnapshot, reason := true, telemetry.ResnapshotInitial
	for ctx.Err() == nil {
		if needSnapshot {
			if err := n.resnapshot(ctx, reason); err != nil {
				if ctx.Err() != nil {
					return
				}
				n.failed(err)
				n.c.wait(ctx, bo, err)
				continue
			}
			needSnapshot = false
		}

		delivered := false // an event applied (or confirmed) without error
		started := time.Now()
		// The backstop: after a while even a healthy watch ends, for a
		// conditional snapshot that confirms nothing diverged.
		watchCtx, cancel := context.WithTimeoutCause(ctx, n.c.opts.backstop, errBackstop)
		err := n.c.src.Watch(watchCtx, transport.WatchRequest{Namespace: n.name, Since: n.resumeCursor()},
			func(ev transport.Event) error {
				if err := n.handle(ev); err != nil {
					return err
				}
				delivered = true
				return nil
			})
		cancel()
		if delivered && time.Since(started) >= healthyStream {
			bo.Reset() // a healthy stream: the next failure starts the backoff over
		}
		if ctx.Err() != nil {
			return
		}
		if context.Cause(watchCtx) == errBackstop {
			err = errBackstop
		}
		if needsResnapshot(err) {
			// Compaction, a gap or a new store are normal paths, not
			// trouble: no error in Status, no state change.
			n.log.Info("config: resnapshot", "reason", err)
			needSnapshot, reason = true, resnapshotReason(err)
			if delivered {
				continue // the stream was healthy: resnapshot at once
			}
		} else {
			n.failed(err)
			n.metrics.Reconnect(reconnectReason(err))
			n.log.Warn("config: watch ended; resuming from cursor", "cursor", n.resumeCursor(), "err", err)
		}
		n.c.wait(ctx, bo, err)
	}
}

// needsResnapshot reports whether a watch that ended with err cannot resume
// from its cursor: what the transport says cannot be retried there
// (compaction, a new store id, a refused cursor), a gap, or the backstop.
// healthyStream is how long a watch that delivers must have lived for the
// reconnect backoff to start over: a server that cuts every stream after
// its first event still meets a growing backoff.
const healthyStream = 5 * time.Second

func needsResnapshot(err error) bool {
	return !transport.Retryable(err) || errors.Is(err, errGap) || errors.Is(err, errBackstop)
}

func (n *Namespace) resumeCursor() int64 {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.cursor
}

// resnapshot fetches the namespace whole and applies it. When the client
// already holds data of the same store, the request is conditional, and an
// unchanged namespace costs no body.
func (n *Namespace) resnapshot(ctx context.Context, reason string) (err error) {
	ctx, end := n.c.tracer.Start(ctx, telemetry.SpanResnapshot, n.name) // the fetch, the checks, the apply
	defer func() { end(err) }()
	req := transport.SnapshotRequest{Namespace: n.name}
	n.mu.Lock()
	if n.applied != nil {
		req.KnownStoreID, req.KnownRevision = n.applied.StoreID(), n.applied.Revision()
	}
	n.mu.Unlock()

	// A black-holed server must not hold the loop forever.
	ctx, cancel := context.WithTimeout(ctx, 2*n.c.opts.idleTimeout+10*time.Second)
	defer cancel()
	fetchCtx, endFetch := n.c.tracer.Start(ctx, telemetry.SpanSnapshot, n.name)
	snap, err := n.c.src.Snapshot(fetchCtx, req)
	endFetch(err)
	notModified := errors.Is(err, transport.ErrNotModified)
	if err != nil && !notModified {
		return err
	}
	n.metrics.Resnapshot(reason) // fetched; counted before anything is served
	if snap.Namespace != n.name {
		return fmt.Errorf("%w: snapshot of %q for namespace %q", transport.ErrMalformed, snap.Namespace, n.name)
	}

	n.mu.Lock()
	defer n.mu.Unlock()
	cur := n.applied
	switch {
	case notModified:
		if cur == nil || snap.StoreID != cur.StoreID() {
			return fmt.Errorf("%w: 304 for data the client does not hold", transport.ErrMalformed)
		}
		n.cursor = max(n.cursor, snap.Cursor)
		n.confirmed(false)
		return nil
	case cur != nil && snap.StoreID == cur.StoreID() && snap.Revision < cur.Revision():
		// Monotonic: within one store, never go back (a lagging replica).
		return fmt.Errorf("config: server snapshot at revision %d is behind the applied %d", snap.Revision, cur.Revision())
	case cur != nil && snap.StoreID == cur.StoreID() && snap.Revision == cur.Revision():
		n.cursor = max(n.cursor, snap.Cursor)
		n.confirmed(false)
		return nil
	}
	if snap.StoreID != n.storeID {
		n.head = 0
	}
	n.head = max(n.head, snap.Revision)
	if snap.StoreID == n.storeID && snap.Revision == n.rejected {
		n.cursor = max(n.cursor, snap.Cursor)
		n.confirmed(false)
		return nil // rejected already; wait for a later revision
	}
	next, err := cache.BuildJSON(n.name, snap.StoreID, snap.Revision, snap.Values)
	var doc map[string]any
	if err == nil {
		doc, err = n.check(next)
	}
	if cur != nil && snap.StoreID != cur.StoreID() {
		n.log.Warn("config: store id changed; monotonic floor reset", "old", cur.StoreID(), "new", snap.StoreID)
	}
	// Watch on from this snapshot's cursor either way: a rejected snapshot
	// is not fetched again, and the next revision, a gap from what is
	// applied, resnapshots.
	n.storeID, n.cursor = snap.StoreID, snap.Cursor // a new store restarts its revisions: no max
	if err != nil {
		n.rejectUpdate(snap.Revision, err)
		if cur == nil && !n.opts.failClosed && n.serving.Load() == nil {
			n.serve(n.defaults, OriginDefaults) // fail-open: open on the Defaults
		}
		// In touch with the server, serving the newest data that passes:
		// a bad publish must not push fail-closed clients to Defaults.
		n.confirmed(false)
		return nil
	}
	n.rejected = 0
	n.doc = doc
	n.swap(next, diff(n.name, n.serving.Load(), next))
	return nil
}

// check runs the namespace's schema, if it has one, on s: the whole
// namespace. It returns the decoded document, kept to check later changes
// without decoding every value again.
func (n *Namespace) check(s *cache.Snapshot) (map[string]any, error) {
	if n.schema == nil {
		return nil, nil
	}
	doc, err := schema.DecodeSeq(s.RawAll(), s.Len())
	if err != nil {
		return nil, err
	}
	return doc, n.schema.Validate(doc)
}

// checkChange runs the schema on the applied document with one change set:
// only the changed values are decoded.
func (n *Namespace) checkChange(cs *transport.ChangeSet) (map[string]any, error) {
	if n.schema == nil {
		return nil, nil
	}
	puts, err := schema.DecodeValues(cs.Puts)
	if err != nil {
		return nil, err
	}
	doc := maps.Clone(n.doc)
	if doc == nil {
		doc = make(map[string]any, len(puts))
	}
	for _, k := range cs.Deletes {
		delete(doc, k)
	}
	maps.Copy(doc, puts)
	return doc, n.schema.Validate(doc)
}

// rejectUpdate records that revision failed its checks: the last good keeps
// serving; the rejection shows in Status and the logs, is counted, and is
// reported to the server. n.mu must be held.
func (n *Namespace) rejectUpdate(revision int64, err error) {
	rerr := &RejectedError{Namespace: n.name, Revision: revision, Err: err}
	n.rejected = revision
	n.rejects.Add(1)
	n.metrics.Apply(telemetry.ResultRejected)
	n.recordError(rerr)
	n.log.Error("config: update rejected; the last good keeps serving", "revision", revision, "err", err)
	n.acks.report(revision, rerr)
}

// handle applies one watch event. An error ends the watch: the loop then
// resumes or resnapshots.
func (n *Namespace) handle(ev transport.Event) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	cur := n.applied
	if cur != nil && cur.StoreID() != n.storeID {
		cur = nil // the last good is of another store: nothing chains on it
	}
	var applied int64 // 0 when nothing of this store is applied
	if cur != nil {
		applied = cur.Revision()
	}
	switch {
	case ev.Change != nil:
		cs := ev.Change
		if cs.StoreID != n.storeID {
			return fmt.Errorf("%w: %q, watching %q", transport.ErrStoreChanged, cs.StoreID, n.storeID)
		}
		n.head = max(n.head, cs.Revision)
		if cs.Revision <= applied || cs.Revision == n.rejected {
			n.metrics.Apply(telemetry.ResultDuplicate)
			n.cursor = max(n.cursor, cs.Revision)
			n.confirmed(false)
			return nil // a duplicate, or a revision already rejected
		}
		if cur == nil || cs.PrevRevision != applied {
			return fmt.Errorf("%w: change %d follows %d, applied %d", errGap, cs.Revision, cs.PrevRevision, applied)
		}
		next, err := cur.Apply(cs.Revision, cs.CommittedAt, cs.Puts, cs.Deletes)
		var doc map[string]any
		if err == nil {
			doc, err = n.checkChange(cs)
		}
		if err != nil {
			// Keep the stream: later changes chain on the rejected
			// revision, so the next one is a gap and resnapshots, and
			// is checked whole.
			n.rejectUpdate(cs.Revision, err)
			n.confirmed(false)
			return nil
		}
		n.cursor = max(n.cursor, cs.Revision)
		n.doc = doc
		n.swap(next, changedKeys(n.name, cur, next, cs.Puts, cs.Deletes))
		return nil
	case ev.Progress != nil:
		p := ev.Progress
		if p.StoreID != n.storeID {
			return fmt.Errorf("%w: %q, watching %q", transport.ErrStoreChanged, p.StoreID, n.storeID)
		}
		n.head = max(n.head, p.Revision)
		if p.Revision > applied && p.Revision != n.rejected {
			return fmt.Errorf("%w: progress at namespace revision %d, applied %d", errGap, p.Revision, applied)
		}
		n.cursor = max(n.cursor, p.Cursor)
		n.confirmed(false)
		return nil
	}
	return fmt.Errorf("%w: empty watch event", transport.ErrMalformed)
}

// swap makes next the applied data from the network, serves it (unless a
// fail-closed namespace keeps serving its Defaults: refreshState decides),
// queues its changes for the callbacks and persists it. n.mu must be held.
func (n *Namespace) swap(next *cache.Snapshot, changes []Change) {
	prev := n.applied
	n.applied = next
	n.status.Revision, n.status.StoreID = next.Revision(), next.StoreID()
	old := n.serving.Load()
	servingDefaults := n.defaults != nil && old == n.defaults
	// A fail-closed namespace past MaxStaleness keeps its Defaults here;
	// refreshState (from confirmed, below) switches back. Defaults served
	// instead of a rejected first snapshot give way at once.
	if !servingDefaults || prev == nil {
		n.serve(next, OriginNetwork)
		// The first data is no change: callbacks report changes of what
		// Get returns once the namespace is open.
		if len(changes) > 0 && old != nil {
			n.disp.enqueue(item{changes: &ChangeSet{Namespace: n.name, Revision: next.Revision(), PrevRevision: old.Revision(), Changes: changes}})
		}
	}
	n.confirmed(true)
	n.acks.report(next.Revision(), nil)
	n.metrics.Apply(telemetry.ResultApplied)
	if t := next.CommittedAt(); !t.IsZero() {
		n.metrics.PropagationDelay(time.Since(t))
	}
}

// confirmed records that the data is current as of now, from the network,
// and persists it (changed: the data itself changed). n.mu must be held.
func (n *Namespace) confirmed(changed bool) {
	n.confirm = time.Now()
	n.live = true
	n.status.LastConfirmed = n.confirm
	n.status.Cursor = n.cursor
	if n.applied != nil && n.serving.Load() == n.applied {
		n.status.Origin = OriginNetwork // data from disk, now confirmed
	}
	n.refreshState()
	n.persist(changed)
	select {
	case n.kick <- struct{}{}:
	default:
	}
}

// failed records an error that interrupted syncing.
func (n *Namespace) failed(err error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.recordError(err)
	n.live = false
	n.refreshState()
}

// recordError keeps err as the last error. n.mu must be held.
func (n *Namespace) recordError(err error) {
	n.status.LastError = errorInfo(err, time.Now())
}

// newBackoff returns the reconnect backoff of one sync loop: exponential,
// jittered, never giving up.
func (c *Client) newBackoff() backoff.BackOff {
	return backoff.NewExponentialBackOff(
		backoff.WithInitialInterval(c.opts.backoffInitial),
		backoff.WithMaxInterval(c.opts.backoffMax),
		backoff.WithRandomizationFactor(0.5),
		backoff.WithMultiplier(2),
		backoff.WithMaxElapsedTime(0),
	)
}

// wait sleeps before the next attempt: the backoff's delay, at least the
// server's Retry-After, and at least the unauthorized wait after a 401/403.
func (c *Client) wait(ctx context.Context, bo backoff.BackOff, err error) {
	d := bo.NextBackOff()
	var se *transport.StatusError
	if errors.As(err, &se) && se.RetryAfter > d {
		d = se.RetryAfter
	}
	if errors.Is(err, transport.ErrUnauthorized) {
		d = max(d, c.opts.unauthorizedWait)
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}
