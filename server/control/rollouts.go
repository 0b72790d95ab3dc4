package control

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/holdfast-dev/holdfast/internal/controlplane"
	"github.com/holdfast-dev/holdfast/internal/rollout/controller"
	"github.com/holdfast-dev/holdfast/server/store"
)

// RolloutRoot is the prefix of the rollouts' state in the store: a
// namespace's current rollout (running, or the last that ended) at
// RolloutRoot+"current/"+ns, the ended ones it keeps under
// RolloutRoot+"ended/"+ns+"/", and each server's summary of its clients'
// reports under RolloutRoot+"reports/"+ns+"/". Outside etcd.KeyRoot: no
// namespace watch sees it.
const RolloutRoot = "/holdfast-rollouts/"

func currentKey(ns string) string  { return RolloutRoot + "current/" + ns }
func endedPrefix(ns string) string { return RolloutRoot + "ended/" + ns + "/" }

// rolloutStore is the rollouts' controller.Store in etcd. A transition
// that changes the namespace is one publish (the change, its meta and
// audit records) with the state written in the same transaction
// (store.WithOps), conditional on the state's ModRevision and on leading
// (store.WithCondition); one that changes the state alone is one
// conditional transaction.
type rolloutStore struct{ h *Handler }

var _ controller.Store = rolloutStore{}

func decodeState(data []byte, modRev int64) (*controller.State, error) {
	var st controller.State
	if err := json.Unmarshal(data, &st); err != nil {
		return nil, fmt.Errorf("control: a stored rollout does not decode: %w", err)
	}
	st.FillRevision(modRev)
	st.Version = modRev
	return &st, nil
}

func (s rolloutStore) Current(ctx context.Context, ns string) (*controller.State, error) {
	resp, err := s.h.cli.Get(ctx, currentKey(ns))
	if err != nil {
		return nil, fmt.Errorf("control: rollout of %q: %w", ns, err)
	}
	if len(resp.Kvs) == 0 {
		return nil, nil
	}
	return decodeState(resp.Kvs[0].Value, resp.Kvs[0].ModRevision)
}

func (s rolloutStore) Running(ctx context.Context) ([]*controller.State, error) {
	if !s.h.active.any() {
		return nil, nil
	}
	resp, err := s.h.cli.Get(ctx, RolloutRoot+"current/", clientv3.WithPrefix())
	if err != nil {
		return nil, fmt.Errorf("control: rollouts: %w", err)
	}
	var out []*controller.State
	for _, kv := range resp.Kvs {
		st, err := decodeState(kv.Value, kv.ModRevision)
		if err != nil {
			return nil, err
		}
		if st.State == controller.Running {
			out = append(out, st)
		}
	}
	return out, nil
}

func (s rolloutStore) List(ctx context.Context, ns string) ([]*controller.State, error) {
	cur, err := s.Current(ctx, ns)
	if err != nil || cur == nil {
		return nil, err
	}
	out := []*controller.State{cur}
	resp, err := s.h.cli.Get(ctx, endedPrefix(ns), clientv3.WithPrefix(),
		clientv3.WithSort(clientv3.SortByKey, clientv3.SortDescend), clientv3.WithLimit(controller.MaxKept))
	if err != nil {
		return nil, fmt.Errorf("control: rollouts of %q: %w", ns, err)
	}
	for _, kv := range resp.Kvs {
		st, err := decodeState(kv.Value, kv.ModRevision)
		if err != nil {
			return nil, err
		}
		out = append(out, st)
	}
	return out, nil
}

func (s rolloutStore) Commit(ctx context.Context, c controller.Commit) (int64, error) {
	ns := c.Next.Namespace
	var prevVersion int64
	if c.Prev != nil {
		prevVersion = c.Prev.Version
	}
	conds := []clientv3.Cmp{clientv3.Compare(clientv3.ModRevision(currentKey(ns)), "=", prevVersion)}
	if c.Leading != nil {
		cmp, ok := c.Leading.(clientv3.Cmp)
		if !ok {
			return 0, fmt.Errorf("control: a rollout's leading condition is a %T, not a clientv3.Cmp", c.Leading)
		}
		conds = append(conds, cmp)
	}
	next, err := json.Marshal(c.Next)
	if err != nil {
		return 0, err
	}
	ops := []clientv3.Op{clientv3.OpPut(currentKey(ns), string(next))}
	archived := false
	if c.Prev != nil && c.Prev.ID != c.Next.ID {
		prev, err := json.Marshal(c.Prev)
		if err != nil {
			return 0, err
		}
		ops = append(ops, clientv3.OpPut(fmt.Sprintf("%s%016x-%s", endedPrefix(ns), c.Prev.Version, c.Prev.ID), string(prev)))
		archived = true
	}
	var rev int64
	if c.Change == nil {
		resp, err := s.h.cli.Txn(ctx).If(conds...).Then(ops...).Commit()
		if err != nil {
			return 0, fmt.Errorf("control: rollout of %q: %w", ns, err)
		}
		if !resp.Succeeded {
			return 0, controller.ErrConflict
		}
		rev = resp.Header.Revision
	} else {
		opts := []store.PublishOption{store.WithKind(c.Change.Kind), store.WithActor(c.Change.Actor), store.WithReason(c.Change.Reason),
			store.WithCondition(conds...), store.WithOps(ops...)}
		puts, deletes := c.Change.Puts, c.Change.Deletes
		started := time.Now()
		if c.Change.Check {
			rev, err = s.h.write(ctx, ns, controlplane.Write{Actor: c.Change.Actor, Reason: c.Change.Reason}, false, func(more []store.PublishOption) (int64, error) {
				return s.h.cfg.Namespaces.Publish(ctx, ns, puts, deletes, append(more, opts...)...)
			})
		} else {
			rev, err = s.h.cfg.Namespaces.Publish(ctx, ns, puts, deletes, opts...)
		}
		s.h.metrics.committed(ctx, kindRollout, started, err)
		if errors.Is(err, store.ErrConditionFailed) {
			return 0, controller.ErrConflict
		}
		if err != nil {
			return 0, err
		}
		s.h.publishes.Add(1)
		s.h.trim.published(ns, publishSize(puts, deletes))
		c.Next.FillRevision(rev)
	}
	if archived {
		s.trimEnded(ctx, ns)
	}
	return rev, nil
}

// trimEnded keeps the newest MaxKept ended rollouts of ns (best effort:
// an extra one left is dropped at the next end).
func (s rolloutStore) trimEnded(ctx context.Context, ns string) {
	resp, err := s.h.cli.Get(ctx, endedPrefix(ns), clientv3.WithPrefix(), clientv3.WithKeysOnly(), clientv3.WithSort(clientv3.SortByKey, clientv3.SortAscend))
	if err != nil || len(resp.Kvs) <= controller.MaxKept {
		return
	}
	for _, kv := range resp.Kvs[:len(resp.Kvs)-controller.MaxKept] {
		if _, err := s.h.cli.Delete(ctx, string(kv.Key)); err != nil {
			s.h.log.Warn("control: trimming the ended rollouts", "ns", ns, "err", err)
			return
		}
	}
}

// runningRollout returns the rollout running on ns (nil: none) and the
// ModRevision of ns's rollout state, which a publish is guarded by.
func (h *Handler) runningRollout(ctx context.Context, ns string) (*controller.State, int64, error) {
	cur, err := rolloutStore{h}.Current(ctx, ns)
	if err != nil || cur == nil {
		return nil, 0, err
	}
	if cur.State != controller.Running {
		return nil, cur.Version, nil
	}
	return cur, cur.Version, nil
}

// Rollouts is the handler's rollout controller: holdfast server runs it
// (Run) on its leader.
func (h *Handler) Rollouts() *controller.Controller { return h.rollouts }
