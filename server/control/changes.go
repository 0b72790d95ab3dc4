package control

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/holdfast-dev/holdfast/controlapi"
	"github.com/holdfast-dev/holdfast/internal/controlplane"
	"github.com/holdfast-dev/holdfast/internal/dataplane"
	"github.com/holdfast-dev/holdfast/server/store"
	"github.com/holdfast-dev/holdfast/transport"
)

// ChangeRoot is the key prefix of the change workflow's records: change
// ID's is ChangeRoot+"changes/"+ID, policy N's ChangeRoot+"policies/"+N.
// Outside etcd.KeyRoot, so no namespace watch sees them. A change's
// version is its key's ModRevision.
const ChangeRoot = "/holdfast-change/"

func changeKey(id string) string   { return ChangeRoot + "changes/" + id }
func policyKey(name string) string { return ChangeRoot + "policies/" + name }

// retroKey is the retro review index's entry of change id: an emergency
// publish whose review is open, its value the due time (RFC 3339). It is
// written with the change's record and deleted with the record's write
// that records the review, so the overdue gauge reads these alone.
func retroKey(id string) string { return ChangeRoot + "retro/" + id }

// retroOps are the ops that keep c's retro review index entry with its
// record.
func retroOps(c *controlapi.Change) []clientv3.Op {
	if controlplane.RetroOpen(c) {
		return []clientv3.Op{clientv3.OpPut(retroKey(c.ID), c.RetroReview.Due.UTC().Format(time.RFC3339Nano))}
	}
	if c.Emergency {
		return []clientv3.Op{clientv3.OpDelete(retroKey(c.ID))}
	}
	return nil
}

// OpenRetroReviews reads the retro review index.
func (s etcdStore) OpenRetroReviews(ctx context.Context) ([]time.Time, error) {
	resp, err := s.h.cli.Get(ctx, retroKey(""), clientv3.WithPrefix())
	if err != nil {
		return nil, fmt.Errorf("control: retro reviews: %w", err)
	}
	out := make([]time.Time, 0, len(resp.Kvs))
	for _, kv := range resp.Kvs {
		t, err := time.Parse(time.RFC3339Nano, string(kv.Value))
		if err != nil {
			return nil, fmt.Errorf("control: retro review %q: %w", kv.Key, err)
		}
		out = append(out, t)
	}
	return out, nil
}

var _ controlplane.ChangeStore = etcdStore{}

func (s etcdStore) PutPolicy(ctx context.Context, name string, p controlapi.Policy) error {
	data, err := json.Marshal(p)
	if err != nil {
		return err
	}
	if _, err := s.h.cli.Put(ctx, policyKey(name), string(data)); err != nil {
		return fmt.Errorf("control: policy %q: %w", name, err)
	}
	return nil
}

func (s etcdStore) GetPolicy(ctx context.Context, name string) (controlapi.Policy, error) {
	var p controlapi.Policy
	resp, err := s.h.cli.Get(ctx, policyKey(name))
	if err != nil {
		return p, fmt.Errorf("control: policy %q: %w", name, err)
	}
	if len(resp.Kvs) == 0 {
		return p, fmt.Errorf("%w: no policy %q", controlplane.ErrNotFound, name)
	}
	return p, json.Unmarshal(resp.Kvs[0].Value, &p)
}

func (s etcdStore) DeletePolicy(ctx context.Context, name string) error {
	resp, err := s.h.cli.Delete(ctx, policyKey(name))
	if err != nil {
		return fmt.Errorf("control: policy %q: %w", name, err)
	}
	if resp.Deleted == 0 {
		return fmt.Errorf("%w: no policy %q", controlplane.ErrNotFound, name)
	}
	return nil
}

func (s etcdStore) Policies(ctx context.Context) (map[string]controlapi.Policy, error) {
	prefix := policyKey("")
	resp, err := s.h.cli.Get(ctx, prefix, clientv3.WithPrefix())
	if err != nil {
		return nil, fmt.Errorf("control: policies: %w", err)
	}
	out := make(map[string]controlapi.Policy, len(resp.Kvs))
	for _, kv := range resp.Kvs {
		var p controlapi.Policy
		if err := json.Unmarshal(kv.Value, &p); err != nil {
			return nil, fmt.Errorf("control: policy %q: %w", kv.Key, err)
		}
		out[string(kv.Key[len(prefix):])] = p
	}
	return out, nil
}

func (s etcdStore) Current(ctx context.Context, ns string) (map[string]json.RawMessage, int64, error) {
	snap, err := s.h.cfg.Source.Snapshot(ctx, transport.SnapshotRequest{Namespace: ns})
	if err != nil {
		return nil, 0, err
	}
	var content map[string]json.RawMessage
	if err := json.Unmarshal(snap.Values, &content); err != nil {
		return nil, 0, fmt.Errorf("control: the content of %q: %w", ns, err)
	}
	return dataplane.WithoutReserved(content), snap.Revision, nil
}

func (s etcdStore) CreateChange(ctx context.Context, c controlapi.Change) error {
	data, err := json.Marshal(c)
	if err != nil {
		return err
	}
	key := changeKey(c.ID)
	tr, err := s.h.cli.Txn(ctx).If(clientv3.Compare(clientv3.CreateRevision(key), "=", 0)).Then(clientv3.OpPut(key, string(data))).Commit()
	switch {
	case err != nil:
		return fmt.Errorf("control: change %q: %w", c.ID, err)
	case !tr.Succeeded:
		return fmt.Errorf("%w: change %q", controlplane.ErrExists, c.ID)
	}
	return nil
}

func (s etcdStore) GetChange(ctx context.Context, id string) (controlapi.Change, int64, error) {
	var c controlapi.Change
	resp, err := s.h.cli.Get(ctx, changeKey(id))
	if err != nil {
		return c, 0, fmt.Errorf("control: change %q: %w", id, err)
	}
	if len(resp.Kvs) == 0 {
		return c, 0, fmt.Errorf("%w: no change %q", controlplane.ErrNotFound, id)
	}
	kv := resp.Kvs[0]
	if err := json.Unmarshal(kv.Value, &c); err != nil {
		return c, 0, err
	}
	committed(&c, kv.ModRevision)
	return c, kv.ModRevision, nil
}

// committed fills in the revisions of a change CommitChange published:
// its record was written in the commit's transaction, so its key's
// ModRevision is the commit revision (a published change's record is
// never written again, save an emergency's, which has its revisions, and
// a rollout's, whose revisions are its first stage's, written apart).
func committed(c *controlapi.Change, modRev int64) {
	if c.State != controlapi.ChangePublished || c.Revision != 0 || c.Staged {
		return
	}
	c.Revision, c.Revisions = modRev, make(map[string]int64, len(c.Namespaces))
	for ns := range c.Namespaces {
		c.Revisions[ns] = modRev
	}
}

func (s etcdStore) Changes(ctx context.Context) ([]controlapi.Change, error) {
	resp, err := s.h.cli.Get(ctx, changeKey(""), clientv3.WithPrefix())
	if err != nil {
		return nil, fmt.Errorf("control: changes: %w", err)
	}
	out := make([]controlapi.Change, 0, len(resp.Kvs))
	for _, kv := range resp.Kvs {
		var c controlapi.Change
		if err := json.Unmarshal(kv.Value, &c); err != nil {
			return nil, fmt.Errorf("control: change %q: %w", kv.Key, err)
		}
		committed(&c, kv.ModRevision)
		out = append(out, c)
	}
	return out, nil
}

func (s etcdStore) UpdateChange(ctx context.Context, c controlapi.Change, version int64) error {
	data, err := json.Marshal(c)
	if err != nil {
		return err
	}
	key := changeKey(c.ID)
	ops := append([]clientv3.Op{clientv3.OpPut(key, string(data))}, retroOps(&c)...)
	tr, err := s.h.cli.Txn(ctx).If(clientv3.Compare(clientv3.ModRevision(key), "=", version)).Then(ops...).Commit()
	switch {
	case err != nil:
		return fmt.Errorf("control: change %q: %w", c.ID, err)
	case !tr.Succeeded:
		return controlplane.ErrChangeMoved
	}
	return nil
}

// CommitChange commits the namespaces' writes and the change's record
// (created, version 0: a key's ModRevision is 0 when it has none; with
// its retro review index entry) in one transaction (store.PublishMany), each namespace guarded as a plain
// publish is (its schema, no rollout running), the record by its version.
func (s etcdStore) CommitChange(ctx context.Context, c controlapi.Change, version int64, writes map[string]controlplane.Write) (int64, map[string]int64, error) {
	h := s.h
	data, err := json.Marshal(c)
	if err != nil {
		return 0, nil, err
	}
	key := changeKey(c.ID)
	names := slices.Sorted(maps.Keys(writes))
	for attempt := 0; ; attempt++ {
		ws := make([]store.NamespaceWrite, 0, len(names))
		ops := append([]clientv3.Op{clientv3.OpPut(key, string(data))}, retroOps(&c)...)
		for _, ns := range names {
			w := writes[ns]
			opts := []store.PublishOption{store.WithActor(w.Actor), store.WithOnBehalfOf(w.OnBehalfOf), store.WithReason(w.Reason),
				store.WithKind(w.Kind), store.WithChange(w.Change)}
			if w.IfRevision != nil {
				opts = append(opts, store.WithIfRevision(*w.IfRevision))
			}
			run, rv, err := h.runningRollout(ctx, ns)
			if err != nil {
				return 0, nil, err
			}
			if run != nil {
				return 0, nil, &controlplane.RolloutRunningError{Namespace: ns, ID: run.ID}
			}
			sch, schemaRev, err := h.schemas.get(ctx, h.cli, ns)
			if err != nil {
				return 0, nil, err
			}
			opts = append(opts, store.WithGuard(currentKey(ns), rv), store.WithGuard(SchemaRoot+ns, schemaRev))
			// A change's schema commits with its values, which it checks
			// in the old schema's stead (a dropped schema checks nothing).
			switch {
			case w.CompiledSchema != nil:
				sch = w.CompiledSchema
				ops = append(ops, clientv3.OpPut(SchemaRoot+ns, string(w.Schema)))
			case w.DropSchema:
				sch = nil
				ops = append(ops, clientv3.OpDelete(SchemaRoot+ns))
			}
			if sch != nil {
				opts = append(opts, store.WithSchema(sch))
			}
			ws = append(ws, store.NamespaceWrite{Namespace: ns, Puts: w.Puts, Deletes: w.Deletes, Options: opts})
		}
		rev, err := h.cfg.Namespaces.PublishMany(ctx, ws,
			store.WithCondition(clientv3.Compare(clientv3.ModRevision(key), "=", version)),
			store.WithOps(ops...))
		var conflict *store.ConflictError
		switch {
		case errors.As(err, &conflict):
			return 0, nil, &controlplane.ConflictError{Namespace: conflict.Namespace, Revision: conflict.Revision, IfRevision: conflict.IfRevision}
		case errors.Is(err, store.ErrGuardChanged) && attempt < 3:
			continue
		case errors.Is(err, store.ErrConditionFailed):
			return 0, nil, controlplane.ErrChangeMoved
		case err != nil:
			return 0, nil, err
		}
		revs := make(map[string]int64, len(names))
		for _, ns := range names {
			revs[ns] = rev
			h.cfg.Acks.published(ns, rev) // as a publish's: the propagation's clock
			h.publishes.Add(1)
			h.trim.published(ns, publishSize(writes[ns].Puts, writes[ns].Deletes))
		}
		return rev, revs, nil
	}
}

// OverdueReviews counts the emergency publishes whose retro review is
// overdue now.
func (h *Handler) OverdueReviews(ctx context.Context) (int, error) {
	return controlplane.OverdueReviews(ctx, etcdStore{h}, time.Now())
}
