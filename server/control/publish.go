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
	"github.com/holdfast-dev/holdfast/schema"
	"github.com/holdfast-dev/holdfast/transport"
	"github.com/holdfast-dev/holdfast/transport/etcd"
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
	body.Actor = actor(r, body.Actor)
	rev, err := h.write(r.Context(), ns, body.Actor, body.Reason, body.IfRevision, func(opts []etcd.PublishOption) (int64, error) {
		return h.cfg.Source.Publish(r.Context(), ns, body.Puts, body.Deletes, opts...)
	})
	if err != nil {
		return err
	}
	h.publishes.Add(1)
	h.trim.published(ns, publishSize(body.Puts, body.Deletes))
	h.log.Info("control: published", "ns", ns, "revision", rev, "actor", body.Actor)
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
	body.Actor = actor(r, body.Actor)
	rev, err := h.write(r.Context(), ns, body.Actor, body.Reason, body.IfRevision, func(opts []etcd.PublishOption) (int64, error) {
		return h.cfg.Source.Rollback(r.Context(), ns, *body.To, opts...)
	})
	if err != nil {
		return err
	}
	h.publishes.Add(1)
	h.trim.published(ns, 0) // its record repeats values whose publishes were weighed
	h.log.Info("control: rolled back", "ns", ns, "to", *body.To, "revision", rev, "actor", body.Actor)
	writeJSON(w, http.StatusOK, controlapi.RevisionReply{Revision: rev})
	return nil
}

// write runs a publish or rollback with its audit, condition and the
// namespace's schema, guarded by the schema's revision: a schema set
// meanwhile makes it read the schema again and retry (a few times), so
// that a write never commits against a schema already replaced.
func (h *Handler) write(ctx context.Context, ns, actor, reason string, ifRevision *int64, commit func([]etcd.PublishOption) (int64, error)) (int64, error) {
	for attempt := 0; ; attempt++ {
		opts := []etcd.PublishOption{etcd.WithActor(actor), etcd.WithReason(reason)}
		if ifRevision != nil {
			opts = append(opts, etcd.WithIfRevision(*ifRevision))
		}
		sch, schemaRev, err := h.schemas.get(ctx, h.cli, ns)
		if err != nil {
			return 0, err
		}
		opts = append(opts, etcd.WithGuard(SchemaRoot+ns, schemaRev))
		if sch != nil {
			opts = append(opts, etcd.WithSchema(sch))
		}
		rev, err := commit(opts)
		if !errors.Is(err, etcd.ErrGuardChanged) || attempt == 3 {
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
