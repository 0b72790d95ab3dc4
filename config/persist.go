package config

import (
	"errors"
	"fmt"
	"io/fs"
	"time"

	"github.com/holdfast-dev/holdfast/internal/cachedir"
)

// clockTolerance is how far in the future a last-good file's confirmation
// time may be and still count as now: clocks of one host step a little.
const clockTolerance = 5 * time.Second

// loadFromDisk reads the namespace's last-good file, if it has a usable
// one, before the network is dialed. Its store id and revision become the
// syncer's monotonic floor (and its cursor where the watch resumes)
// whether or not its data is served: a fail-closed namespace does not
// serve a file older than its MaxStaleness, or of unknown age, but does
// not take older data for it either. Staleness carries across the
// restart: the file's confirmation time. n.mu must be held.
func (n *Namespace) loadFromDisk(dir *cachedir.Dir) {
	rec, err := dir.Load(n.name)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return
	case errors.Is(err, cachedir.ErrCorrupt):
		n.log.Error("config: last-good file is corrupt; ignoring it", "err", err)
		return
	case err != nil:
		n.log.Error("config: cannot read last-good file; ignoring it", "err", err)
		return
	}
	if err := n.syncer.Seed(rec.Snapshot, rec.Cursor); err != nil {
		n.log.Error("config: last-good file fails this build's checks; not serving it", "revision", rec.Revision, "err", err)
		return
	}
	// The file holds the content as it came; what this client serves of a
	// staged rollout in it is worked out again (its id may have changed).
	served, ro := n.syncer.Served()
	n.applied, n.appliedWire, n.appliedOrigin = served, rec.Snapshot, OriginDisk
	n.status.Rollout = rolloutStatus(ro)
	n.cursor = rec.Cursor
	n.status.Revision, n.status.StoreID, n.status.Cursor = rec.Revision, rec.StoreID, rec.Cursor
	age := time.Since(rec.ConfirmedAt)
	if age < -clockTolerance {
		err := fmt.Errorf("%w: confirmed at %s, %v in the future (the clock stepped back?)",
			ErrAgeUnknown, rec.ConfirmedAt.Format(time.RFC3339), (-age).Round(time.Second))
		n.recordError(err)
		n.log.Warn("config: last-good file's age is unknown; it counts as older than any MaxStaleness", "err", err)
	} else {
		n.ageKnown = true
		n.confirm = time.Now().Add(-max(age, 0)) // with a monotonic reading
		n.status.LastConfirmed = n.confirm
		n.persistedConfirm = n.confirm // on disk already: Close has nothing to flush
	}
	n.settle(nil)
	if n.serving.Load() == n.applied {
		n.log.Info("config: serving last good data from disk", "revision", rec.Revision, "age", age)
	} else {
		n.log.Warn("config: last-good file is too old to serve; keeping its revision as the floor", "revision", rec.Revision, "age", age, "max_staleness", n.opts.maxStaleness)
	}
}

// backdateTolerance is how far a confirmation may move back before it is
// written at once: a relay's ages jitter by the network's delay.
const backdateTolerance = time.Second

// persist hands the applied data to the persister, if there is one. A
// change is always written; a confirmation alone (a progress event) at
// most every persistConfirmEvery, so a quiet namespace does not rewrite its
// file on every heartbeat yet its file's age stays honest; but one that
// moved back (backdated) at once. n.mu must be held.
func (n *Namespace) persist(changed bool) {
	if n.persister == nil || n.appliedWire == nil {
		return
	}
	now := time.Now()
	if !changed && !n.backdated() && now.Sub(n.lastPersist) < n.persistConfirmEvery() {
		return
	}
	n.lastPersist, n.persistedConfirm = now, n.confirm
	n.persister.Submit(&cachedir.Record{
		Namespace:   n.name,
		StoreID:     n.appliedWire.StoreID(),
		Revision:    n.appliedWire.Revision(),
		Cursor:      n.cursor,
		ConfirmedAt: n.confirm.Round(0), // the wall clock: it must mean something after a restart
		Snapshot:    n.appliedWire,      // rollout key and all: a restart evaluates its membership again
		NewHistory:  n.newHistory,
	})
}

// flushConfirmation persists the latest confirmation if a throttled one is
// not on disk yet, so that a clean restart reads an honest age. n.mu must
// be held.
func (n *Namespace) flushConfirmation() {
	if n.confirm.After(n.persistedConfirm) || n.backdated() {
		n.persist(true)
	}
}

// backdated reports whether the confirmation moved back, past
// backdateTolerance, from the one last handed to the persister: a relay
// said its data is older than a change made it look, and the file must
// not claim a later confirmation than that. n.mu must be held.
func (n *Namespace) backdated() bool {
	return n.confirm.Before(n.persistedConfirm.Add(-backdateTolerance))
}

func (n *Namespace) persistConfirmEvery() time.Duration {
	if n.opts.maxStaleness > 0 {
		return min(time.Minute, max(time.Second, n.opts.maxStaleness/4))
	}
	return time.Minute
}

// persisted records the outcome of one write, on the persister's goroutine.
func (n *Namespace) persisted(rec *cachedir.Record, err error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	var superseded *cachedir.SupersededError
	if errors.As(err, &superseded) && superseded.Revision == superseded.DiskRevision {
		// The file confirms the same data later (ours, written before a
		// relay said the data is older; or another process's): the file
		// keeps its time.
		n.log.Debug("config: last-good file keeps its later confirmation of the same revision",
			"revision", superseded.Revision, "confirmed_at", superseded.ConfirmedAt, "file_confirmed_at", superseded.DiskConfirmedAt)
		return
	}
	if errors.As(err, &superseded) {
		// Another process sharing the directory holds newer data: the
		// file stays as it is, which is no failure.
		n.log.Info("config: last-good file holds newer data from another process; left as it is",
			"revision", superseded.Revision, "file_revision", superseded.DiskRevision)
		return
	}
	if err == nil && rec.NewHistory {
		n.newHistory = false // on disk: from now on, the ordinary rule
	}
	if err != nil {
		n.metrics.PersistError()
		n.status.PersistError = ErrorInfo{Kind: ErrorPersist, Message: err.Error(), Time: time.Now(), Err: err}
		n.log.Error("config: cannot write last-good file; serving goes on", "err", err)
		return
	}
	n.status.PersistError = ErrorInfo{}
}
