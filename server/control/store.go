package control

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/holdfast-dev/holdfast/controlapi"
	"github.com/holdfast-dev/holdfast/internal/controlplane"
	"github.com/holdfast-dev/holdfast/internal/dataplane"
	"github.com/holdfast-dev/holdfast/internal/rollout/controller"
	"github.com/holdfast-dev/holdfast/schema"
	"github.com/holdfast-dev/holdfast/server/store"
	"github.com/holdfast-dev/holdfast/transport"
)

// etcdStore is the control API's store (controlplane.Store) in etcd: a
// write is one transaction that carries its audit record and its guards
// (the namespace's schema, its rollout's state), through holdfast's etcd
// source; schemas are keys under SchemaRoot, rollouts under RolloutRoot.
type etcdStore struct{ h *Handler }

var _ controlplane.Store = etcdStore{}

func (s etcdStore) Publish(ctx context.Context, ns string, w controlplane.Write) (int64, error) {
	h := s.h
	started := time.Now()
	rev, err := h.write(ctx, ns, w, true, func(opts []store.PublishOption) (int64, error) {
		return h.cfg.Namespaces.Publish(ctx, ns, w.Puts, w.Deletes, opts...)
	})
	h.metrics.committed(ctx, kindPublish, started, err)
	if err != nil {
		return 0, err
	}
	h.cfg.Acks.published(ns, rev)
	h.publishes.Add(1)
	h.trim.published(ns, publishSize(w.Puts, w.Deletes))
	return rev, nil
}

func (s etcdStore) Rollback(ctx context.Context, ns string, to int64, w controlplane.Write) (int64, error) {
	h := s.h
	started := time.Now()
	rev, err := h.write(ctx, ns, w, true, func(opts []store.PublishOption) (int64, error) {
		return h.cfg.Namespaces.Rollback(ctx, ns, to, opts...)
	})
	h.metrics.committed(ctx, kindRollback, started, err)
	if err != nil {
		return 0, err
	}
	h.cfg.Acks.published(ns, rev)
	h.publishes.Add(1)
	h.trim.published(ns, 0) // its record repeats values whose publishes were weighed
	return rev, nil
}

// Check validates ns's content with w applied against ns's schema, as
// the publish that follows an abort would see it (the rollout's reserved
// keys gone); a namespace without a revision is transport.ErrNotFound.
// The publish (or the rollout's promotion) checks again in its
// transaction.
func (s etcdStore) Check(ctx context.Context, ns string, w controlplane.Write) error {
	snap, err := s.h.cfg.Source.Snapshot(ctx, transport.SnapshotRequest{Namespace: ns})
	if err != nil {
		return store.NamespaceNotFound(ns, err)
	}
	sch, _, err := s.h.schemas.get(ctx, s.h.cli, ns)
	if err != nil || sch == nil {
		return err
	}
	var content map[string]json.RawMessage
	if err := json.Unmarshal(snap.Values, &content); err != nil {
		return fmt.Errorf("control: the content of %q: %w", ns, err)
	}
	next := dataplane.WithoutReserved(content)
	if len(next) == len(content) {
		next = maps.Clone(content)
	}
	maps.Copy(next, w.Puts)
	for _, k := range w.Deletes {
		delete(next, k)
	}
	return sch.ValidateValues(next)
}

func (s etcdStore) Schema(ctx context.Context, ns string) ([]byte, error) {
	resp, err := s.h.cli.Get(ctx, SchemaRoot+ns)
	if err != nil {
		return nil, fmt.Errorf("control: schema of %q: %w", ns, err)
	}
	if len(resp.Kvs) == 0 {
		return nil, controlplane.ErrNoSchema
	}
	return resp.Kvs[0].Value, nil
}

func (s etcdStore) SetSchema(ctx context.Context, ns string, raw []byte, _ *schema.Schema) error {
	if _, err := s.h.cli.Put(ctx, SchemaRoot+ns, string(raw)); err != nil {
		return fmt.Errorf("control: schema of %q: %w", ns, err)
	}
	return nil
}

func (s etcdStore) DeleteSchema(ctx context.Context, ns string) error {
	resp, err := s.h.cli.Delete(ctx, SchemaRoot+ns)
	if err != nil {
		return fmt.Errorf("control: schema of %q: %w", ns, err)
	}
	if resp.Deleted == 0 {
		return controlplane.ErrNoSchema
	}
	return nil
}

func (s etcdStore) History(ctx context.Context, ns string, limit int, before int64) (*controlapi.History, error) {
	return s.h.cfg.Namespaces.History(ctx, ns, store.HistoryOptions{Limit: limit, Before: before})
}

func (s etcdStore) ValuesAt(ctx context.Context, ns string, rev int64) (*controlapi.NamespaceValues, error) {
	return s.h.cfg.Namespaces.ValuesAt(ctx, ns, rev)
}

func (s etcdStore) ValuesAtTime(ctx context.Context, ns string, t time.Time) (*controlapi.NamespaceValues, error) {
	return s.h.cfg.Namespaces.ValuesAtTime(ctx, ns, t)
}

func (s etcdStore) Diff(ctx context.Context, ns string, from, to int64) (*controlapi.Diff, error) {
	return s.h.cfg.Namespaces.Diff(ctx, ns, from, to)
}

func (s etcdStore) Compact(ctx context.Context, rev int64) (int64, error) {
	point, err := Compact(ctx, s.h.cli, rev)
	if err == nil && s.h.cfg.Compacted != nil {
		s.h.cfg.Compacted()
	}
	return point, err
}

func (s etcdStore) Rollouts() controlplane.Rollouts { return freshStart{s.h.rollouts, s.h.reports} }

// freshStart is the controller, whose Start reads the other servers'
// summaries from the store, not from the last half second's read: the
// first cut covers the clients they wrote last.
type freshStart struct {
	*controller.Controller
	reports *reportSync
}

func (f freshStart) Start(ctx context.Context, ns string, spec controller.Spec, actor, reason string) (controller.Record, error) {
	f.reports.forget(ns)
	return f.Controller.Start(ctx, ns, spec, actor, reason)
}

// write runs a publish or rollback with its audit, condition and the
// namespace's schema, guarded by the schema's revision: a schema set
// meanwhile makes it read the schema again and retry (a few times), so
// that a write never commits against a schema already replaced. A plain
// write is refused while a rollout runs on ns (a
// *controlplane.RolloutRunningError) and guarded by the rollout's state,
// so that a rollout started meanwhile is never bypassed; a rollout's own
// commit (plain false) is guarded by the rollout's commit itself.
func (h *Handler) write(ctx context.Context, ns string, w controlplane.Write, plain bool, commit func([]store.PublishOption) (int64, error)) (int64, error) {
	for attempt := 0; ; attempt++ {
		opts := []store.PublishOption{store.WithActor(w.Actor), store.WithOnBehalfOf(w.OnBehalfOf), store.WithReason(w.Reason)}
		if w.Kind != "" {
			opts = append(opts, store.WithKind(w.Kind), store.WithChange(w.Change))
		}
		if w.IfRevision != nil {
			opts = append(opts, store.WithIfRevision(*w.IfRevision))
		}
		if plain {
			run, version, err := h.runningRollout(ctx, ns)
			if err != nil {
				return 0, err
			}
			if run != nil {
				return 0, &controlplane.RolloutRunningError{Namespace: ns, ID: run.ID}
			}
			opts = append(opts, store.WithGuard(currentKey(ns), version))
		}
		sch, schemaRev, err := h.schemas.get(ctx, h.cli, ns)
		if err != nil {
			return 0, err
		}
		opts = append(opts, store.WithGuard(SchemaRoot+ns, schemaRev))
		if sch != nil {
			opts = append(opts, store.WithSchema(sch))
		}
		rev, err := commit(opts)
		if !errors.Is(err, store.ErrGuardChanged) || attempt == 3 {
			return rev, err
		}
	}
}

// schemaCache keeps each namespace's compiled schema with the revision of
// its key, so that a publish reads the key (one small read) but compiles
// only a schema it has not seen. It compiles outside its lock: a
// namespace's schema being compiled (up to 0.1-0.2 s within the bounds of
// package schema) delays the publishes to that namespace only, which wait
// for it rather than compile it again.
type schemaCache struct {
	mu sync.Mutex
	m  map[string]*compiledSchema
}

// compiledSchema is a namespace's schema at one revision of its key,
// compiled once: schema and err are set when done is closed.
type compiledSchema struct {
	modRevision int64
	done        chan struct{}
	schema      *schema.Schema
	err         error
}

// get returns ns's schema (nil when it has none) and the ModRevision of
// its key (0: none).
func (c *schemaCache) get(ctx context.Context, cli *clientv3.Client, ns string) (*schema.Schema, int64, error) {
	resp, err := cli.Get(ctx, SchemaRoot+ns)
	if err != nil {
		return nil, 0, fmt.Errorf("control: schema of %q: %w", ns, err)
	}
	c.mu.Lock()
	if len(resp.Kvs) == 0 {
		delete(c.m, ns)
		c.mu.Unlock()
		return nil, 0, nil
	}
	kv := resp.Kvs[0]
	e, ok := c.m[ns]
	compile := !ok || e.modRevision != kv.ModRevision
	if compile {
		e = &compiledSchema{modRevision: kv.ModRevision, done: make(chan struct{})}
		if !ok || c.m[ns].modRevision < kv.ModRevision { // never over a newer one
			if c.m == nil {
				c.m = make(map[string]*compiledSchema)
			}
			c.m[ns] = e
		}
	}
	c.mu.Unlock()
	if compile {
		e.schema, e.err = schema.Compile(kv.Value)
		close(e.done)
	}
	select {
	case <-e.done:
	case <-ctx.Done():
		return nil, 0, ctx.Err()
	}
	if e.err != nil {
		// Only PUT writes the key, after compiling it: another writer's,
		// or one stored before the bounds of package schema.
		return nil, 0, fmt.Errorf("control: the stored schema of %q does not compile: %w", ns, errors.Join(e.err, errStoredSchema))
	}
	return e.schema, kv.ModRevision, nil
}

// errStoredSchema marks a stored schema that does not compile: the
// server's trouble, not the caller's.
var errStoredSchema = errors.New("stored schema invalid")

// publishSize is about what a publish adds to its namespace's audit log.
func publishSize(puts map[string]json.RawMessage, deletes []string) int64 {
	var n int64
	for k, v := range puts {
		n += int64(len(k) + len(v))
	}
	for _, k := range deletes {
		n += int64(len(k))
	}
	return n
}
