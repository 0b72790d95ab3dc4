package controlapi_test

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/holdfast-dev/holdfast/controlapi"
	"github.com/holdfast-dev/holdfast/internal/fakeserver"
	"github.com/holdfast-dev/holdfast/transport"
)

// startServer starts a reference server closed with the test.
func startServer(t *testing.T, opts ...fakeserver.Option) *fakeserver.Server {
	t.Helper()
	srv, err := fakeserver.Start(opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Close() })
	return srv
}

// TestAgainstTheReferenceServer: every call the reference server serves,
// over HTTP, and its errors by their codes.
func TestAgainstTheReferenceServer(t *testing.T) {
	srv := startServer(t)
	c := newClient(t, srv.URL())
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	r1, err := c.Publish(ctx, "ns.a", controlapi.PublishRequest{Puts: map[string]json.RawMessage{"a": json.RawMessage(`1`), "b": json.RawMessage(`"x"`)}, Actor: "alice", Reason: "first"})
	if err != nil {
		t.Fatal(err)
	}
	zero := int64(0)
	_, err = c.Publish(ctx, "ns.a", controlapi.PublishRequest{Puts: map[string]json.RawMessage{"a": json.RawMessage(`2`)}, IfRevision: &zero})
	var ae *controlapi.Error
	if !errors.Is(err, controlapi.ErrConflict) || !errors.As(err, &ae) || ae.Revision != r1 {
		t.Fatalf("a stale IfRevision: %v", err)
	}
	r2, err := c.Publish(ctx, "ns.a", controlapi.PublishRequest{Puts: map[string]json.RawMessage{"a": json.RawMessage(`2`)}, Deletes: []string{"b"}, IfRevision: &r1})
	if err != nil {
		t.Fatal(err)
	}
	r3, err := c.Rollback(ctx, "ns.a", controlapi.RollbackRequest{To: &r1, Actor: "carol", Reason: "undo"})
	if err != nil {
		t.Fatal(err)
	}

	h, err := c.History(ctx, "ns.a", controlapi.HistoryOptions{})
	if err != nil || len(h.Revisions) != 3 || h.Revisions[0].Revision != r3 || h.Revisions[0].RollbackOf != r1 || h.Revisions[2].Actor != "alice" {
		t.Fatalf("History: %+v, %v", h, err)
	}
	if h, err := c.History(ctx, "ns.a", controlapi.HistoryOptions{Limit: 1, Before: r3}); err != nil || len(h.Revisions) != 1 || h.Revisions[0].Revision != r2 {
		t.Errorf("History, a page: %+v, %v", h, err)
	}
	v, err := c.ValuesAt(ctx, "ns.a", r2)
	if err != nil || v.Revision != r2 || string(v.Values["a"]) != "2" || v.Values["b"] != nil {
		t.Errorf("ValuesAt: %+v, %v", v, err)
	}
	if v, err := c.ValuesAtTime(ctx, "ns.a", time.Now()); err != nil || v.Revision != r3 || string(v.Values["b"]) != `"x"` {
		t.Errorf("ValuesAtTime: %+v, %v", v, err)
	}
	d, err := c.Diff(ctx, "ns.a", r1, r2)
	if err != nil || d.From != r1 || d.To != r2 || len(d.Changes) != 2 {
		t.Errorf("Diff: %+v, %v", d, err)
	}
	st, err := c.Status(ctx, "ns.a")
	if err != nil || st.Revision != r3 || st.Head != srv.Head() || st.StoreID != srv.StoreID() {
		t.Errorf("Status: %+v, %v", st, err)
	}
	if _, err := c.Status(ctx, "no.such"); !errors.Is(err, transport.ErrNotFound) {
		t.Errorf("Status of no namespace: %v", err)
	}
	if cs, err := c.Clients(ctx); err != nil || cs.Head != srv.Head() || len(cs.Clients) != 0 {
		t.Errorf("Clients: %+v, %v", cs, err)
	}

	if err := c.PutSchema(ctx, "ns.a", json.RawMessage(`{"type":"object","properties":{"a":{"type":"integer"}}}`)); err != nil {
		t.Fatal(err)
	}
	_, err = c.Publish(ctx, "ns.a", controlapi.PublishRequest{Puts: map[string]json.RawMessage{"a": json.RawMessage(`"text"`)}})
	if !errors.Is(err, controlapi.ErrSchemaViolation) || !errors.As(err, &ae) || len(ae.Details) == 0 {
		t.Errorf("a publish that fails the schema: %v", err)
	}
	if err := c.PutSchema(ctx, "ns.a", json.RawMessage(`{"type":"no-such-type"}`)); !errors.Is(err, transport.ErrBadRequest) {
		t.Errorf("an invalid schema: %v", err)
	}
	if _, err := c.History(ctx, "ns.a", controlapi.HistoryOptions{Limit: 100000}); !errors.Is(err, transport.ErrBadRequest) {
		t.Errorf("History past the limit: %v", err)
	}

	k, err := c.Compact(ctx, r3)
	if err != nil || k != r3 {
		t.Fatalf("Compact: %d, %v", k, err)
	}
	_, err = c.ValuesAt(ctx, "ns.a", r1)
	var ce *transport.CompactedError
	if !errors.As(err, &ce) || ce.CompactRevision != r3 {
		t.Errorf("ValuesAt below the compaction point: %v", err)
	}

	old := srv.StoreID()
	id, err := c.Faults(ctx, controlapi.FaultsRequest{ResetStore: true})
	if err != nil || id == old || id != srv.StoreID() {
		t.Errorf("Faults reset_store: %q, %v (was %q)", id, err, old)
	}
	if _, err := c.Faults(ctx, controlapi.FaultsRequest{Fail: &controlapi.FailFault{Count: 1, Status: 200}}); !errors.Is(err, transport.ErrBadRequest) {
		t.Errorf("Faults with a bad status: %v", err)
	}
}

// TestRolloutsAgainstTheReferenceServer: start, list, read and end a
// rollout; its errors by their codes.
func TestRolloutsAgainstTheReferenceServer(t *testing.T) {
	srv := startServer(t)
	c := newClient(t, srv.URL())
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := c.Publish(ctx, "ns.a", controlapi.PublishRequest{Puts: map[string]json.RawMessage{"a": json.RawMessage(`1`)}}); err != nil {
		t.Fatal(err)
	}
	req := controlapi.NewRolloutRequest(controlapi.RolloutSpec{Puts: map[string]json.RawMessage{"a": json.RawMessage(`2`)}, Stages: []float64{50, 100}, Bake: time.Hour}, "alice", "canary")
	started, err := c.StartRollout(ctx, "ns.a", req)
	if err != nil || started.ID == "" || started.Revision == 0 {
		t.Fatalf("StartRollout: %+v, %v", started, err)
	}
	if _, err := c.StartRollout(ctx, "ns.a", req); !errors.Is(err, controlapi.ErrConflict) {
		t.Errorf("a second rollout: %v", err)
	}
	if _, err := c.Publish(ctx, "ns.a", controlapi.PublishRequest{Puts: map[string]json.RawMessage{"a": json.RawMessage(`3`)}}); !errors.Is(err, controlapi.ErrConflict) {
		t.Errorf("a publish during a rollout: %v", err)
	}
	rs, err := c.ListRollouts(ctx, "ns.a")
	if err != nil || len(rs) != 1 || rs[0].ID != started.ID || rs[0].State != controlapi.RolloutRunning {
		t.Errorf("ListRollouts: %+v, %v", rs, err)
	}
	r, err := c.GetRollout(ctx, "ns.a", started.ID)
	if err != nil || r.ID != started.ID || r.Revisions[0] != started.Revision {
		t.Errorf("GetRollout: %+v, %v", r, err)
	}
	if _, err := c.GetRollout(ctx, "ns.a", "no-such"); !errors.Is(err, transport.ErrNotFound) {
		t.Errorf("GetRollout of no rollout: %v", err)
	}
	r, err = c.AbortRollout(ctx, "ns.a", started.ID, controlapi.RolloutActionRequest{Reason: "enough"})
	if err != nil || r.State != controlapi.RolloutReverted {
		t.Errorf("AbortRollout: %+v, %v", r, err)
	}
	if _, err := c.PromoteRollout(ctx, "ns.a", started.ID, controlapi.RolloutActionRequest{}); !errors.Is(err, controlapi.ErrConflict) {
		t.Errorf("PromoteRollout of an ended rollout: %v", err)
	}
}
