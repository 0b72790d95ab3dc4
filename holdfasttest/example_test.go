package holdfasttest_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/holdfast-dev/holdfast/access"
	"github.com/holdfast-dev/holdfast/config"
	"github.com/holdfast-dev/holdfast/controlapi"
	"github.com/holdfast-dev/holdfast/holdfasttest"
)

// An application's test: publish, read, take the config plane down, and
// check the application keeps its last good config.
func Example() {
	srv, err := holdfasttest.Start(holdfasttest.WithHeartbeat(100 * time.Millisecond))
	if err != nil {
		panic(err)
	}
	defer srv.Close()
	if _, err := srv.Publish("payments.prod", map[string]any{"retry-timeout-ms": 50}); err != nil {
		panic(err)
	}

	c, err := config.New(config.WithEndpoint(srv.URL()))
	if err != nil {
		panic(err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ns, err := c.Namespace(ctx, "payments.prod")
	if err != nil {
		panic(err)
	}
	fmt.Println("timeout:", ns.Int("retry-timeout-ms", 200))

	_ = srv.Stop() // the config plane goes down
	if err := ns.WaitForState(ctx, config.StateStale); err != nil {
		panic(err)
	}
	fmt.Println("still:", ns.Int("retry-timeout-ms", 200), ns.Status().State)
	// Output:
	// timeout: 50
	// still: 50 Stale
}

func TestNewServerClosesWithTheTest(t *testing.T) {
	var srv *holdfasttest.Server
	t.Run("inner", func(t *testing.T) {
		srv = holdfasttest.NewServer(t)
		if _, err := srv.Publish("a", map[string]any{"k": 1}); err != nil {
			t.Fatal(err)
		}
	})
	tr := &http.Transport{}
	defer tr.CloseIdleConnections()
	if resp, err := (&http.Client{Transport: tr}).Get(srv.URL() + "/sdk/snapshot?ns=a"); err == nil {
		resp.Body.Close()
		t.Fatal("the server still answers after its test ended")
	}
}

// The Go API's errors and results are this package's types, so a user's
// test can name them.
func TestServerTypes(t *testing.T) {
	srv := holdfasttest.NewServer(t)
	if err := srv.SetSchema("a", []byte(`{"type":"object","properties":{"k":{"type":"integer"}}}`)); err != nil {
		t.Fatal(err)
	}
	_, err := srv.Publish("a", map[string]any{"k": "not a number"})
	var se *holdfasttest.SchemaError
	if !errors.As(err, &se) || se.Namespace != "a" || len(se.Failures) != 1 || se.Error() == "" {
		t.Fatalf("Publish failing the schema = %v; want a *holdfasttest.SchemaError", err)
	}
	rev, err := srv.Publish("a", map[string]any{"k": 1, "j": 2})
	if err != nil {
		t.Fatal(err)
	}
	del, err := srv.Delete("a", "j")
	if err != nil || del <= rev {
		t.Fatalf("Delete = %d, %v", del, err)
	}
	var st holdfasttest.NamespaceStatus
	if st, err = srv.Status("a"); err != nil || st.Revision != del || st.StoreID != srv.StoreID() {
		t.Fatalf("Status = %+v, %v", st, err)
	}
	if _, err := srv.Status("nope"); !errors.Is(err, holdfasttest.ErrUnknownNamespace) {
		t.Fatalf("Status of an unknown namespace = %v", err)
	}
	var stats holdfasttest.Stats = srv.Stats()
	if stats.Publishes != 2 {
		t.Errorf("Stats = %+v; want 2 publishes", stats)
	}
	var clients []holdfasttest.ClientState = srv.Clients()
	if len(clients) != 0 {
		t.Errorf("Clients = %+v", clients)
	}
}

// The audit's Go API: records, values then, diffs and a conflicting
// publish, each in this package's types.
func TestAuditTypes(t *testing.T) {
	srv := holdfasttest.NewServer(t)
	none := int64(0)
	r1, err := srv.PublishWith("a", map[string]any{"retry-timeout-ms": 200}, nil,
		holdfasttest.PublishOptions{Actor: "alice", Reason: "first", IfRevision: &none})
	if err != nil {
		t.Fatal(err)
	}
	_, err = srv.PublishWith("a", map[string]any{"retry-timeout-ms": 1}, nil, holdfasttest.PublishOptions{IfRevision: &none})
	var ce *holdfasttest.ConflictError
	if !errors.As(err, &ce) || ce.Namespace != "a" || ce.Revision != r1 || ce.IfRevision != 0 || ce.Error() == "" {
		t.Fatalf("a conflicting PublishWith = %v; want a *holdfasttest.ConflictError", err)
	}
	r2, err := srv.PublishWith("a", map[string]any{"retry-timeout-ms": 50}, nil, holdfasttest.PublishOptions{Actor: "bob", IfRevision: &r1})
	if err != nil {
		t.Fatal(err)
	}
	r3, err := srv.RollbackWith("a", r1, holdfasttest.RollbackOptions{Actor: "carol", Reason: "too aggressive"})
	if err != nil {
		t.Fatal(err)
	}
	var h *holdfasttest.History
	if h, err = srv.History("a", 0, 0); err != nil || len(h.Revisions) != 3 {
		t.Fatalf("History = %+v, %v", h, err)
	}
	if r := h.Revisions[0]; r.Revision != r3 || r.Kind != holdfasttest.KindRollback || r.RollbackOf != r1 || r.Actor != "carol" {
		t.Fatalf("newest record %+v", r)
	}
	var v *holdfasttest.NamespaceValues
	if v, err = srv.ValuesAt("a", r2); err != nil || string(v.Values["retry-timeout-ms"]) != "50" {
		t.Fatalf("ValuesAt = %+v, %v", v, err)
	}
	if v, err = srv.ValuesAtTime("a", time.Now()); err != nil || v.Revision != r3 {
		t.Fatalf("ValuesAtTime(now) = %+v, %v", v, err)
	}
	var d *holdfasttest.Diff
	if d, err = srv.Diff("a", r1, r2); err != nil || len(d.Changes) != 1 || string(d.Changes[0].Old) != "200" || string(d.Changes[0].New) != "50" {
		t.Fatalf("Diff = %+v, %v", d, err)
	}
	if _, err = srv.ValuesAt("a", 99); !errors.Is(err, holdfasttest.ErrNoRevision) {
		t.Fatalf("ValuesAt above the head = %v", err)
	}
}

// A staged rollout with no client to wait for: no client has reported on
// the namespace, so each stage ends as it begins, and the change is
// promoted. With clients, each stage waits for the acks of those in it.
func ExampleServer_StartRollout() {
	srv, err := holdfasttest.Start()
	if err != nil {
		panic(err)
	}
	defer srv.Close()
	if _, err := srv.Publish("payments.prod", map[string]any{"retry-timeout-ms": 50}); err != nil {
		panic(err)
	}
	rec, err := srv.StartRollout("payments.prod", holdfasttest.RolloutSpec{
		Puts:   map[string]json.RawMessage{"retry-timeout-ms": json.RawMessage(`80`)},
		Stages: []float64{1, 10, 100},
	})
	if err != nil {
		panic(err)
	}
	fmt.Println("started:", rec.State, rec.Stage)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if rec, err = srv.WaitRollout(ctx, "payments.prod", rec.ID); err != nil {
		panic(err)
	}
	fmt.Println("ended:", rec.State, len(rec.Revisions), "revisions")
	snap, err := srv.Snapshot("payments.prod")
	if err != nil {
		panic(err)
	}
	fmt.Println(string(snap.Values))
	// Output:
	// started: running 1
	// ended: promoted 4 revisions
	// {"retry-timeout-ms":80}
}

func TestRolloutTypes(t *testing.T) {
	srv := holdfasttest.NewServer(t)
	if _, err := srv.Publish("a", map[string]any{"k": 1}); err != nil {
		t.Fatal(err)
	}
	// A client known to the server: the stage waits for its report.
	c := &http.Client{Transport: &http.Transport{}}
	defer c.CloseIdleConnections()
	resp, err := c.Post(srv.URL()+"/sdk/ack", "application/json", strings.NewReader(`{"client_id":"c1","ns":"a","revision":1,"status":"ack"}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	var rec holdfasttest.RolloutRecord
	rec, err = srv.StartRollout("a", holdfasttest.RolloutSpec{Puts: map[string]json.RawMessage{"k": json.RawMessage(`2`)}, Stages: []float64{50, 100}, Bake: time.Hour})
	if err != nil || rec.State != holdfasttest.RolloutRunning || rec.InStage != 1 || rec.Clients != 1 {
		t.Fatalf("StartRollout = %+v, %v", rec, err)
	}
	if _, err := srv.Publish("a", map[string]any{"k": 3}); !errors.Is(err, holdfasttest.ErrRolloutRunning) {
		t.Fatalf("Publish during a rollout: %v", err)
	}
	if list, err := srv.Rollouts("a"); err != nil || len(list) != 1 || list[0].ID != rec.ID {
		t.Fatalf("Rollouts = %+v, %v", list, err)
	}
	if rec, err = srv.AbortRollout("a", rec.ID); err != nil || rec.State != holdfasttest.RolloutReverted {
		t.Fatalf("AbortRollout = %+v, %v", rec, err)
	}
	if _, err := srv.PromoteRollout("a", rec.ID); !errors.Is(err, holdfasttest.ErrRolloutEnded) {
		t.Fatalf("PromoteRollout after the abort: %v", err)
	}
	if _, err := srv.Rollout("a", "r-nope"); !errors.Is(err, holdfasttest.ErrUnknownRollout) {
		t.Fatalf("Rollout of an unknown id: %v", err)
	}
	var se *holdfasttest.SchemaError
	if err := srv.SetSchema("a", []byte(`{"type":"object","properties":{"k":{"type":"integer"}}}`)); err != nil {
		t.Fatal(err)
	}
	if _, err := srv.StartRollout("a", holdfasttest.RolloutSpec{Puts: map[string]json.RawMessage{"k": json.RawMessage(`"x"`)}, Stages: []float64{100}}); !errors.As(err, &se) {
		t.Fatalf("a rollout failing the schema: %v", err)
	}
}

// The control API over HTTP, as an operator's tool drives it: a
// conditional publish that lost a race, told apart by its error.
func ExampleServer_Client() {
	srv, err := holdfasttest.Start()
	if err != nil {
		panic(err)
	}
	defer srv.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c := srv.Client()
	rev, err := c.Publish(ctx, "payments.prod", controlapi.PublishRequest{
		Puts:  map[string]json.RawMessage{"retry-timeout-ms": json.RawMessage(`50`)},
		Actor: "alice",
	})
	if err != nil {
		panic(err)
	}
	if _, err := srv.Publish("payments.prod", map[string]any{"retry-timeout-ms": 80}); err != nil {
		panic(err)
	}
	_, err = c.Publish(ctx, "payments.prod", controlapi.PublishRequest{
		Puts:       map[string]json.RawMessage{"retry-timeout-ms": json.RawMessage(`60`)},
		IfRevision: &rev,
	})
	var ae *controlapi.Error
	if errors.Is(err, controlapi.ErrConflict) && errors.As(err, &ae) {
		fmt.Printf("%s: at revision %d, not %d\n", ae.Code, ae.Revision, rev)
	}
	st, err := c.Status(ctx, "payments.prod")
	if err != nil {
		panic(err)
	}
	fmt.Println("revision:", st.Revision)
	// Output:
	// conflict: at revision 2, not 1
	// revision: 2
}

// A policy under test: an admin token sets it (policies need the admin
// scope), a direct publish is then refused, and a change proposed by one
// identity and approved by another is published.
func ExampleWithTokens_policy() {
	toks, err := access.New(
		access.Token{Name: "root", Secret: "root-secret-0123456789", Admin: true},
		access.Token{Name: "alice", Secret: "alice-secret-0123456789", Control: []string{"payments.*"}},
		access.Token{Name: "bob", Secret: "bob-secret-0123456789", Control: []string{"payments.*"}},
	)
	if err != nil {
		panic(err)
	}
	srv, err := holdfasttest.Start(holdfasttest.WithTokens(toks))
	if err != nil {
		panic(err)
	}
	defer srv.Close()
	if _, err := srv.Publish("payments.prod", map[string]any{"retry-timeout-ms": 200}); err != nil {
		panic(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	as := func(secret string) *controlapi.Client {
		c, err := controlapi.NewClient(srv.URL(), controlapi.WithToken(secret))
		if err != nil {
			panic(err)
		}
		return c
	}
	root, alice, bob := as("root-secret-0123456789"), as("alice-secret-0123456789"), as("bob-secret-0123456789")
	if _, err := root.PutPolicy(ctx, "payments", controlapi.Policy{Namespaces: "payments.*", Approvals: 1, Approvers: []string{"bob"}}); err != nil {
		panic(err)
	}
	puts := map[string]json.RawMessage{"retry-timeout-ms": json.RawMessage(`50`)}
	_, err = alice.Publish(ctx, "payments.prod", controlapi.PublishRequest{Puts: puts})
	var ae *controlapi.Error
	if errors.As(err, &ae) {
		fmt.Println("direct publish:", ae.Code)
	}
	ch, err := alice.ProposeChange(ctx, controlapi.ChangeRequest{Reason: "a shorter timeout",
		Namespaces: map[string]controlapi.NamespaceChange{"payments.prod": {Puts: puts}}})
	if err != nil {
		panic(err)
	}
	if ch, err = bob.ApproveChange(ctx, ch.ID, controlapi.ChangeActionRequest{}); err != nil {
		panic(err)
	}
	fmt.Println("after bob:", ch.State)
	rep, err := alice.PublishChange(ctx, ch.ID, controlapi.ChangePublishRequest{})
	if err != nil {
		panic(err)
	}
	fmt.Println("published at revision", rep.Revision)
	// Output:
	// direct publish: approval_required
	// after bob: approved
	// published at revision 2
}
