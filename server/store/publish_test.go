package store_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/holdfast-dev/holdfast/schema"
	"github.com/holdfast-dev/holdfast/server/store"
	"github.com/holdfast-dev/holdfast/transport"
	"github.com/holdfast-dev/holdfast/transport/etcd"
)

func TestPublishSchemaAndLimits(t *testing.T) {
	cl := sharedCluster(t)
	src := newWriter(t, cl.endpoints(), withMaxValueBytes(64))
	ctx := context.Background()
	sch, err := schema.Compile([]byte(`{"type":"object","properties":{"limit":{"type":"integer","maximum":100}},"required":["limit"]}`))
	if err != nil {
		t.Fatal(err)
	}
	rev, err := src.Publish(ctx, "schema", map[string]json.RawMessage{"limit": json.RawMessage("10")}, nil, store.WithSchema(sch))
	if err != nil {
		t.Fatal(err)
	}
	_, err = src.Publish(ctx, "schema", map[string]json.RawMessage{"limit": json.RawMessage("1000")}, nil, store.WithSchema(sch))
	var ve *schema.ValidationError
	if !errors.As(err, &ve) {
		t.Fatalf("invalid publish = %v; want a *schema.ValidationError", err)
	}
	if _, err := src.Publish(ctx, "schema", nil, []string{"limit"}, store.WithSchema(sch)); !errors.As(err, &ve) {
		t.Fatalf("deleting a required key = %v; want a *schema.ValidationError", err)
	}
	snap, err := src.Snapshot(ctx, transport.SnapshotRequest{Namespace: "schema"})
	if err != nil || snap.Revision != rev {
		t.Fatalf("after refused publishes: %+v, %v; want revision %d", snap, err, rev)
	}
	if _, err := src.Publish(ctx, "schema", map[string]json.RawMessage{"x": json.RawMessage("{")}, nil); !errors.Is(err, schema.ErrInvalidValue) {
		t.Errorf("non-JSON value: %v", err)
	}
	if _, err := src.Publish(ctx, "schema", map[string]json.RawMessage{"x": json.RawMessage("1")}, []string{"x"}); !errors.Is(err, store.ErrConflict) {
		t.Errorf("put and delete of one key: %v", err)
	}
	if _, err := src.Publish(ctx, "schema", map[string]json.RawMessage{"bad key": json.RawMessage("1")}, nil); !errors.Is(err, transport.ErrInvalidKey) {
		t.Errorf("invalid key: %v", err)
	}
	big := json.RawMessage(`"` + strings.Repeat("x", 100) + `"`)
	if _, err := src.Publish(ctx, "schema", map[string]json.RawMessage{"big": big}, nil); !errors.Is(err, transport.ErrTooLarge) {
		t.Errorf("value over the limit: %v", err)
	}
	// A value over the limit written past Publish: the audit's queries
	// refuse it, as snapshots do.
	put, err := cl.client(t).Put(ctx, etcd.Prefix("schema")+"big", string(big))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := src.ValuesAt(ctx, "schema", put.Header.Revision); !errors.Is(err, transport.ErrTooLarge) {
		t.Errorf("values with a value over the limit: %v", err)
	}
}

func TestRollback(t *testing.T) {
	cl := sharedCluster(t)
	src := newWriter(t, cl.endpoints())
	ctx := context.Background()
	good := publish(t, src, "rb", map[string]any{"a": 1, "b": 2})
	publish(t, src, "rb", map[string]any{"a": 5, "c": 3}, "b")
	rev, err := src.Rollback(ctx, "rb", good)
	if err != nil {
		t.Fatal(err)
	}
	snap, err := src.Snapshot(ctx, transport.SnapshotRequest{Namespace: "rb"})
	if err != nil {
		t.Fatal(err)
	}
	if snap.Revision != rev || rev <= good || string(snap.Values) != `{"a":1,"b":2}` {
		t.Fatalf("after rollback to %d: %+v (rollback revision %d)", good, snap, rev)
	}
	if _, err := cl.client(t).Compact(ctx, rev); err != nil {
		t.Fatal(err)
	}
	// Below etcd's compaction point, the audit log still holds the
	// content: the rollback goes through. Once the log is trimmed past it,
	// it is compacted.
	again, err := src.Rollback(ctx, "rb", good)
	if err != nil {
		t.Fatalf("rollback below etcd's compaction, from the audit log: %v", err)
	}
	if snap, err := src.Snapshot(ctx, transport.SnapshotRequest{Namespace: "rb"}); err != nil || snap.Revision != again || string(snap.Values) != `{"a":1,"b":2}` {
		t.Fatalf("after the rollback from the audit log: %+v, %v", snap, err)
	}
	if _, err := src.TrimAudit(ctx, "rb", store.AuditLimit{Records: 1}); err != nil {
		t.Fatal(err)
	}
	_, err = src.Rollback(ctx, "rb", good)
	var ce *transport.CompactedError
	if !errors.As(err, &ce) {
		t.Fatalf("rollback below compaction and the audit's base = %v; want CompactedError", err)
	}
	if _, err := src.Rollback(ctx, "rb.none", rev); !errors.Is(err, transport.ErrNotFound) {
		t.Errorf("rollback of an empty namespace = %v", err)
	}
}
