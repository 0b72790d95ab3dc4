package config

import (
	"errors"
	"io/fs"
	"time"

	"github.com/holdfast-dev/holdfast/cache"
)

// loadFromDisk serves the namespace's last-good file, if it has a usable
// one, before the network is dialed. Its revision becomes the monotonic
// floor for its store id. A fail-closed namespace does not serve a file
// older than its MaxStaleness. n.mu must be held.
func (n *Namespace) loadFromDisk(dir *cache.Dir) {
	rec, err := dir.Load(n.name)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return
	case errors.Is(err, cache.ErrCorrupt):
		n.c.corruptFiles.Add(1)
		n.log.Error("config: last-good file is corrupt; ignoring it", "err", err)
		return
	case err != nil:
		n.log.Error("config: cannot read last-good file; ignoring it", "err", err)
		return
	}
	age := max(time.Since(rec.ConfirmedAt), 0)
	if n.opts.failClosed && n.opts.maxStaleness > 0 && age > n.opts.maxStaleness {
		n.log.Warn("config: last-good file is older than MaxStaleness; not serving it", "age", age, "max_staleness", n.opts.maxStaleness)
		return
	}
	doc, err := n.check(rec.Snapshot)
	if err != nil {
		n.log.Error("config: last-good file fails this build's checks; not serving it", "revision", rec.Revision, "err", err)
		return
	}
	n.applied, n.doc = rec.Snapshot, doc
	n.storeID, n.cursor = rec.StoreID, rec.Cursor
	n.status.Revision, n.status.StoreID, n.status.Cursor = rec.Revision, rec.StoreID, rec.Cursor
	// Staleness carries across the restart: the file's wall-clock time,
	// turned into a time with a monotonic reading.
	n.confirm = time.Now().Add(-age)
	n.status.LastConfirmed = n.confirm
	n.serve(rec.Snapshot, OriginDisk)
	n.refreshState()
	n.log.Info("config: serving last good data from disk", "revision", rec.Revision, "age", age)
}

// persist hands the applied data to the persister, if there is one. A
// change is always written; a confirmation alone (a progress event) at
// most every persistConfirmEvery, so a quiet namespace does not rewrite its
// file on every heartbeat yet its file's age stays honest. n.mu must be held.
func (n *Namespace) persist(changed bool) {
	if n.persister == nil || n.applied == nil {
		return
	}
	now := time.Now()
	if !changed && now.Sub(n.lastPersist) < n.persistConfirmEvery() {
		return
	}
	n.lastPersist, n.persistedConfirm = now, n.confirm
	n.persister.Submit(&cache.Record{
		Namespace:   n.name,
		StoreID:     n.applied.StoreID(),
		Revision:    n.applied.Revision(),
		Cursor:      n.cursor,
		ConfirmedAt: n.confirm.Round(0), // the wall clock: it must mean something after a restart
		Snapshot:    n.applied,
	})
}

// flushConfirmation persists the latest confirmation if a throttled one is
// not on disk yet, so that a clean restart reads an honest age. n.mu must
// be held.
func (n *Namespace) flushConfirmation() {
	if n.confirm.After(n.persistedConfirm) {
		n.persist(true)
	}
}

func (n *Namespace) persistConfirmEvery() time.Duration {
	if n.opts.maxStaleness > 0 {
		return min(time.Minute, max(time.Second, n.opts.maxStaleness/4))
	}
	return time.Minute
}

// persisted records the outcome of one write, on the persister's goroutine.
func (n *Namespace) persisted(_ *cache.Record, err error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if err != nil {
		n.c.persistErrors.Add(1)
		n.metrics.PersistError()
		n.status.PersistError = ErrorInfo{Kind: ErrorPersist, Message: err.Error(), Time: time.Now(), Err: err}
		n.log.Error("config: cannot write last-good file; serving goes on", "err", err)
		return
	}
	n.status.PersistError = ErrorInfo{}
}
