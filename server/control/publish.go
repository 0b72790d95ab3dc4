package control

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/holdfast-dev/holdfast/controlapi"
	"github.com/holdfast-dev/holdfast/internal/rollout/controller"
	"github.com/holdfast-dev/holdfast/schema"
	"github.com/holdfast-dev/holdfast/server/store"
	"github.com/holdfast-dev/holdfast/transport"
)

// reservedPrefix begins the keys reserved to holdfast itself (a staged
// rollout's): no publish writes them.
const reservedPrefix = "$holdfast/"

func (h *Handler) publish(w http.ResponseWriter, r *http.Request) error {
	ns, err := pathNamespace(r)
	if err != nil {
		return err
	}
	var body controlapi.PublishRequest
	if err := readJSON(w, r, h.cfg.MaxPublishBytes, &body, false); err != nil {
		return err
	}
	for k := range body.Puts {
		if err := checkKey(k); err != nil {
			return err
		}
	}
	for _, k := range body.Deletes {
		if err := checkKey(k); err != nil {
			return err
		}
	}
	actor, onBehalfOf := actors(r, body.Actor)
	rev, err := h.write(r.Context(), ns, actor, onBehalfOf, body.Reason, body.IfRevision, body.AbortRollout, func(opts []store.PublishOption) (int64, error) {
		return h.cfg.Namespaces.Publish(r.Context(), ns, body.Puts, body.Deletes, opts...)
	})
	if err != nil {
		return err
	}
	h.publishes.Add(1)
	h.trim.published(ns, publishSize(body.Puts, body.Deletes))
	h.log.Info("control: published", "ns", ns, "revision", rev, "actor", actor, "on_behalf_of", onBehalfOf)
	writeJSON(w, http.StatusOK, controlapi.RevisionReply{Revision: rev})
	return nil
}

func (h *Handler) rollback(w http.ResponseWriter, r *http.Request) error {
	ns, err := pathNamespace(r)
	if err != nil {
		return err
	}
	var body controlapi.RollbackRequest
	if err := readJSON(w, r, maxControlBytes, &body, false); err != nil {
		return err
	}
	if body.To == nil {
		return badRequest("to_revision is required")
	}
	actor, onBehalfOf := actors(r, body.Actor)
	rev, err := h.write(r.Context(), ns, actor, onBehalfOf, body.Reason, body.IfRevision, false, func(opts []store.PublishOption) (int64, error) {
		return h.cfg.Namespaces.Rollback(r.Context(), ns, *body.To, opts...)
	})
	if err != nil {
		return err
	}
	h.publishes.Add(1)
	h.trim.published(ns, 0) // its record repeats values whose publishes were weighed
	h.log.Info("control: rolled back", "ns", ns, "to", *body.To, "revision", rev, "actor", actor, "on_behalf_of", onBehalfOf)
	writeJSON(w, http.StatusOK, controlapi.RevisionReply{Revision: rev})
	return nil
}

// write runs a publish or rollback with its audit, condition and the
// namespace's schema, guarded by the schema's revision: a schema set
// meanwhile makes it read the schema again and retry (a few times), so
// that a write never commits against a schema already replaced. A plain
// write (abort false or true; nil for a rollout's own commit) is refused
// while a rollout runs on ns, or reverts it first when abort, and is
// guarded by the rollout's state, so that a rollout started meanwhile is
// never bypassed.
func (h *Handler) write(ctx context.Context, ns, actor, onBehalfOf, reason string, ifRevision *int64, abort any, commit func([]store.PublishOption) (int64, error)) (int64, error) {
	for attempt := 0; ; attempt++ {
		opts := []store.PublishOption{store.WithActor(actor), store.WithOnBehalfOf(onBehalfOf), store.WithReason(reason)}
		if ifRevision != nil {
			opts = append(opts, store.WithIfRevision(*ifRevision))
		}
		if abort, plain := abort.(bool); plain {
			run, version, err := h.runningRollout(ctx, ns)
			if err != nil {
				return 0, err
			}
			if run != nil && !abort {
				return 0, &httpError{status: http.StatusConflict, code: transport.CodeConflict,
					msg: fmt.Sprintf("namespace %q: rollout %q is running; abort it first (or publish with abort_rollout)", ns, run.ID)}
			}
			if run != nil {
				rec, err := h.rollouts.Abort(ctx, ns, run.ID, actor, "aborted by a publish")
				if err != nil && !errors.Is(err, controller.ErrEnded) {
					return 0, rolloutError(err)
				}
				if err == nil {
					h.log.Info("control: rollout aborted by a publish", "ns", ns, "rollout", run.ID, "revision", rec.Revisions[len(rec.Revisions)-1])
				}
				continue
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

// checkKey checks a key a publish writes: valid, and not reserved.
func checkKey(k string) error {
	if err := transport.ValidateKey(k); err != nil {
		return badRequest("%v", err)
	}
	if strings.HasPrefix(k, reservedPrefix) {
		return badRequest("key %q is reserved to holdfast (prefix %q)", k, reservedPrefix)
	}
	return nil
}

func (h *Handler) putSchema(w http.ResponseWriter, r *http.Request) error {
	ns, err := pathNamespace(r)
	if err != nil {
		return err
	}
	data, err := io.ReadAll(http.MaxBytesReader(w, r.Body, h.cfg.MaxPublishBytes))
	if err != nil {
		return err
	}
	if _, err := schema.Compile(data); err != nil {
		return err
	}
	if _, err := h.cli.Put(r.Context(), SchemaRoot+ns, string(data)); err != nil {
		return fmt.Errorf("control: schema of %q: %w", ns, err)
	}
	h.log.Info("control: schema set", "ns", ns)
	w.WriteHeader(http.StatusNoContent)
	return nil
}

func (h *Handler) getSchema(w http.ResponseWriter, r *http.Request) error {
	ns, err := pathNamespace(r)
	if err != nil {
		return err
	}
	resp, err := h.cli.Get(r.Context(), SchemaRoot+ns)
	if err != nil {
		return fmt.Errorf("control: schema of %q: %w", ns, err)
	}
	if len(resp.Kvs) == 0 {
		return &httpError{status: http.StatusNotFound, code: transport.CodeNotFound, msg: fmt.Sprintf("namespace %q has no schema", ns)}
	}
	w.Header().Set("Content-Type", "application/schema+json")
	_, _ = w.Write(resp.Kvs[0].Value)
	return nil
}

func (h *Handler) deleteSchema(w http.ResponseWriter, r *http.Request) error {
	ns, err := pathNamespace(r)
	if err != nil {
		return err
	}
	resp, err := h.cli.Delete(r.Context(), SchemaRoot+ns)
	if err != nil {
		return fmt.Errorf("control: schema of %q: %w", ns, err)
	}
	if resp.Deleted == 0 {
		return &httpError{status: http.StatusNotFound, code: transport.CodeNotFound, msg: fmt.Sprintf("namespace %q has no schema", ns)}
	}
	h.log.Info("control: schema deleted", "ns", ns)
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// schemaCache keeps each namespace's compiled schema with the revision of
// its key, so that a publish reads the key (one small read) but compiles
// only a schema it has not seen.
type schemaCache struct {
	mu sync.Mutex
	m  map[string]compiledSchema
}

type compiledSchema struct {
	modRevision int64
	schema      *schema.Schema
}

// get returns ns's schema (nil when it has none) and the ModRevision of
// its key (0: none).
func (c *schemaCache) get(ctx context.Context, cli *clientv3.Client, ns string) (*schema.Schema, int64, error) {
	resp, err := cli.Get(ctx, SchemaRoot+ns)
	if err != nil {
		return nil, 0, fmt.Errorf("control: schema of %q: %w", ns, err)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(resp.Kvs) == 0 {
		delete(c.m, ns)
		return nil, 0, nil
	}
	kv := resp.Kvs[0]
	if had, ok := c.m[ns]; ok && had.modRevision == kv.ModRevision {
		return had.schema, kv.ModRevision, nil
	}
	sch, err := schema.Compile(kv.Value)
	if err != nil {
		// Only PUT writes the key, after compiling it: another writer's.
		return nil, 0, fmt.Errorf("control: the stored schema of %q does not compile: %w", ns, errors.Join(err, errStoredSchema))
	}
	if c.m == nil {
		c.m = make(map[string]compiledSchema)
	}
	c.m[ns] = compiledSchema{modRevision: kv.ModRevision, schema: sch}
	return sch, kv.ModRevision, nil
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
