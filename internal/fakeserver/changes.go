package fakeserver

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/holdfast-dev/holdfast/controlapi"
	"github.com/holdfast-dev/holdfast/internal/controlplane"
	"github.com/holdfast-dev/holdfast/internal/dataplane"
	"github.com/holdfast-dev/holdfast/internal/rollout"
	"github.com/holdfast-dev/holdfast/internal/rollout/controller"
)

// changeBook keeps the change workflow's records in memory: the
// policies, and the changes with their versions. Records are copied in
// and out, so that no caller shares them.
type changeBook struct {
	mu       sync.Mutex
	policies map[string]controlapi.Policy
	changes  map[string]bookedChange
	// retro indexes the open retro reviews: change id to due time.
	retro map[string]time.Time
}

type bookedChange struct {
	data    []byte // the change, encoded: a copy no caller holds
	version int64
}

// changeStore is the control API's ChangeStore over the server's
// change book and store.
type changeStore struct{ s *Server }

var _ controlplane.ChangeStore = changeStore{}

func (c changeStore) PutPolicy(_ context.Context, name string, p controlapi.Policy) error {
	b := &c.s.book
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.policies == nil {
		b.policies = make(map[string]controlapi.Policy)
	}
	p.Approvers, p.Emergency = slices.Clone(p.Approvers), slices.Clone(p.Emergency)
	b.policies[name] = p
	return nil
}

func (c changeStore) GetPolicy(_ context.Context, name string) (controlapi.Policy, error) {
	b := &c.s.book
	b.mu.Lock()
	defer b.mu.Unlock()
	p, ok := b.policies[name]
	if !ok {
		return p, fmt.Errorf("%w: no policy %q", controlplane.ErrNotFound, name)
	}
	p.Approvers, p.Emergency = slices.Clone(p.Approvers), slices.Clone(p.Emergency)
	return p, nil
}

func (c changeStore) DeletePolicy(_ context.Context, name string) error {
	b := &c.s.book
	b.mu.Lock()
	defer b.mu.Unlock()
	if _, ok := b.policies[name]; !ok {
		return fmt.Errorf("%w: no policy %q", controlplane.ErrNotFound, name)
	}
	delete(b.policies, name)
	return nil
}

func (c changeStore) Policies(context.Context) (map[string]controlapi.Policy, error) {
	b := &c.s.book
	b.mu.Lock()
	defer b.mu.Unlock()
	out := make(map[string]controlapi.Policy, len(b.policies))
	for k, p := range b.policies {
		p.Approvers, p.Emergency = slices.Clone(p.Approvers), slices.Clone(p.Emergency)
		out[k] = p
	}
	return out, nil
}

func (c changeStore) Current(_ context.Context, ns string) (map[string]json.RawMessage, int64, error) {
	snap, err := c.s.store.Snapshot(ns)
	if err != nil {
		return nil, 0, err
	}
	return dataplane.WithoutReserved(snap.Values), snap.Rev, nil
}

func (c changeStore) CreateChange(_ context.Context, ch controlapi.Change) error {
	data, err := json.Marshal(ch)
	if err != nil {
		return err
	}
	b := &c.s.book
	b.mu.Lock()
	defer b.mu.Unlock()
	if _, ok := b.changes[ch.ID]; ok {
		return fmt.Errorf("%w: change %q", controlplane.ErrExists, ch.ID)
	}
	if b.changes == nil {
		b.changes = make(map[string]bookedChange)
	}
	b.changes[ch.ID] = bookedChange{data: data, version: 1}
	return nil
}

func (c changeStore) GetChange(_ context.Context, id string) (controlapi.Change, int64, error) {
	b := &c.s.book
	b.mu.Lock()
	bc, ok := b.changes[id]
	b.mu.Unlock()
	var ch controlapi.Change
	if !ok {
		return ch, 0, fmt.Errorf("%w: no change %q", controlplane.ErrNotFound, id)
	}
	err := json.Unmarshal(bc.data, &ch)
	return ch, bc.version, err
}

func (c changeStore) Changes(context.Context) ([]controlapi.Change, error) {
	b := &c.s.book
	b.mu.Lock()
	all := slices.Collect(maps.Values(b.changes))
	b.mu.Unlock()
	out := make([]controlapi.Change, 0, len(all))
	for _, bc := range all {
		var ch controlapi.Change
		if err := json.Unmarshal(bc.data, &ch); err != nil {
			return nil, err
		}
		out = append(out, ch)
	}
	return out, nil
}

func (c changeStore) UpdateChange(_ context.Context, ch controlapi.Change, version int64) error {
	data, err := json.Marshal(ch)
	if err != nil {
		return err
	}
	b := &c.s.book
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.updateLocked(&ch, data, version)
}

// updateLocked replaces change ch (encoded as data) if it is at version,
// or, version 0, creates it; and keeps the retro review index with it.
func (b *changeBook) updateLocked(ch *controlapi.Change, data []byte, version int64) error {
	bc, ok := b.changes[ch.ID]
	switch {
	case !ok && version != 0:
		return fmt.Errorf("%w: no change %q", controlplane.ErrNotFound, ch.ID)
	case ok && bc.version != version:
		return controlplane.ErrChangeMoved
	}
	if b.changes == nil {
		b.changes = make(map[string]bookedChange)
	}
	b.changes[ch.ID] = bookedChange{data: data, version: version + 1}
	if controlplane.RetroOpen(ch) {
		if b.retro == nil {
			b.retro = make(map[string]time.Time)
		}
		b.retro[ch.ID] = ch.RetroReview.Due
	} else {
		delete(b.retro, ch.ID)
	}
	return nil
}

// OpenRetroReviews reads the book's retro review index.
func (c changeStore) OpenRetroReviews(context.Context) ([]time.Time, error) {
	b := &c.s.book
	b.mu.Lock()
	defer b.mu.Unlock()
	return slices.Collect(maps.Values(b.retro)), nil
}

// CommitChange commits the namespaces' writes as one revision of the
// store and the change's record with it (created, version 0: an
// emergency publish's, with its retro review), under the book's lock (so
// that a change publishes once). A rollout running on a namespace refuses it;
// one that starts after that check moves the namespace's revision, which
// the commit's condition catches.
func (c changeStore) CommitChange(_ context.Context, ch controlapi.Change, version int64, writes map[string]controlplane.Write) (int64, map[string]int64, error) {
	var ws []nsWrite
	for _, ns := range slices.Sorted(maps.Keys(writes)) {
		w := writes[ns]
		puts, deletes, err := checkPublish(ns, w.Puts, w.Deletes)
		if err != nil {
			return 0, nil, err
		}
		if w.IfRevision == nil {
			return 0, nil, fmt.Errorf("%w: a change's write of %q without its base revision", ErrInvalid, ns)
		}
		if r := c.s.rollouts; r != nil {
			if err := r.mem.Guard(ns, func(cur *controller.State) error {
				if cur != nil && cur.State == controller.Running {
					return &controlplane.RolloutRunningError{Namespace: ns, ID: cur.ID, Err: ErrRolloutRunning}
				}
				return nil
			}); err != nil {
				return 0, nil, err
			}
		}
		nw := nsWrite{ns: ns, puts: puts, deletes: append(deletes, rollout.Key), ifRev: *w.IfRevision,
			meta: commitMeta{Actor: w.Actor, OnBehalfOf: w.OnBehalfOf, Reason: w.Reason, Kind: w.Kind, Change: w.Change}, dropSchema: w.DropSchema}
		if w.CompiledSchema != nil {
			nw.schema = newChecker(w.Schema, w.CompiledSchema)
		}
		ws = append(ws, nw)
	}
	b := &c.s.book
	b.mu.Lock()
	defer b.mu.Unlock()
	rev, revs, err := c.s.store.commitMany(ws, func() error {
		if bc, ok := b.changes[ch.ID]; ok != (version != 0) || ok && bc.version != version {
			return controlplane.ErrChangeMoved
		}
		return nil
	})
	if err != nil {
		return 0, nil, err
	}
	ch.Revision, ch.Revisions = rev, revs
	data, err := json.Marshal(ch)
	if err != nil {
		return 0, nil, err
	}
	c.s.stats.publishes.Add(int64(len(ws)))
	return rev, revs, b.updateLocked(&ch, data, version)
}

// OverdueReviews counts the emergency publishes whose retro review is
// overdue now (the server's holdfast_changes_overdue_review gauge), from
// the book's retro review index.
func (s *Server) OverdueReviews(ctx context.Context) (int, error) {
	return controlplane.OverdueReviews(ctx, changeStore{s}, time.Now())
}
