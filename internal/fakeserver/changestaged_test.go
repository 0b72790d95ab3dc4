package fakeserver

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/holdfast-dev/holdfast/access"
	"github.com/holdfast-dev/holdfast/controlapi"
	"github.com/holdfast-dev/holdfast/internal/rollout/controller"
)

// A change published as a rollout and left "publishing" (the server
// stopped between recording it and starting the rollout, or between the
// start and settling it) settles when published again: its rollout
// starts once.
func TestChangeStagedPublishResumes(t *testing.T) {
	toks, err := access.New(
		access.Token{Name: "root", Secret: "root-secret-0123456789", Admin: true},
		access.Token{Name: "alice", Secret: "alice-secret-0123456789", Control: []string{"*"}},
		access.Token{Name: "bob", Secret: "bob-secret-0123456789", Control: []string{"*"}},
	)
	if err != nil {
		t.Fatal(err)
	}
	s := start(t, WithTokens(toks))
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	as := func(secret string) *controlapi.Client {
		c, err := controlapi.NewClient(s.URL(), controlapi.WithToken(secret), controlapi.WithHTTPClient(newClient(t)))
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	root, alice, bob := as("root-secret-0123456789"), as("alice-secret-0123456789"), as("bob-secret-0123456789")
	if _, err := root.PutPolicy(ctx, "p", controlapi.Policy{Namespaces: "app.*", Approvals: 1, Approvers: []string{"bob"}}); err != nil {
		t.Fatal(err)
	}
	approved := func(ns string) controlapi.Change {
		if _, err := s.Publish(ns, map[string]any{"k": 0}); err != nil {
			t.Fatal(err)
		}
		ch, err := alice.ProposeChange(ctx, controlapi.ChangeRequest{Reason: "r",
			Namespaces: map[string]controlapi.NamespaceChange{ns: {Puts: map[string]json.RawMessage{"k": json.RawMessage(`1`)}}}})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := bob.ApproveChange(ctx, ch.ID, controlapi.ChangeActionRequest{}); err != nil {
			t.Fatal(err)
		}
		return *ch
	}
	cs := changeStore{s}
	publishing := func(id string) {
		c, version, err := cs.GetChange(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		c.State, c.Staged = controlapi.ChangePublishing, true
		if err := cs.UpdateChange(ctx, c, version); err != nil {
			t.Fatal(err)
		}
	}
	settled := func(id string, rep *controlapi.ChangePublishReply) {
		t.Helper()
		got, err := alice.GetChange(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		if got.State != controlapi.ChangePublished || got.Rollout != rep.Rollout || rep.Rollout == "" || got.Revision != rep.Revision {
			t.Errorf("settled: %+v; reply %+v", got, rep)
		}
	}

	// Stopped before the start: published again, with its stages, it
	// starts; without them it says to give them.
	before := approved("app.before")
	publishing(before.ID)
	if v, err := alice.GetChange(ctx, before.ID); err != nil || v.State != controlapi.ChangePublishing || len(v.Actions) == 0 || v.Actions[0] != controlapi.ActionPublish {
		t.Fatalf("publishing: %+v, %v", v, err)
	}
	if _, err := alice.PublishChange(ctx, before.ID, controlapi.ChangePublishRequest{}); err == nil {
		t.Fatal("a publishing change without its rollout resumed without stages")
	}
	rep, err := alice.PublishChange(ctx, before.ID, controlapi.ChangePublishRequest{Stages: []float64{50, 100}, Bake: "1h"})
	if err != nil {
		t.Fatal(err)
	}
	settled(before.ID, rep)

	// Stopped after the start: published again, it finds its rollout.
	after := approved("app.after")
	spec, err := controller.SpecOf(&controlapi.RolloutRequest{Puts: map[string]json.RawMessage{"k": json.RawMessage(`1`)}, Stages: []float64{50, 100}, Bake: "1h"})
	if err != nil {
		t.Fatal(err)
	}
	rec, err := controlRollouts{s}.Start(ctx, "app.after", spec, "alice", "change "+after.ID+": r")
	if err != nil {
		t.Fatal(err)
	}
	publishing(after.ID)
	rep, err = alice.PublishChange(ctx, after.ID, controlapi.ChangePublishRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Rollout != rec.ID {
		t.Errorf("resumed with rollout %s, want %s", rep.Rollout, rec.ID)
	}
	settled(after.ID, rep)
	if recs, err := (controlRollouts{s}).List(ctx, "app.after"); err != nil || len(recs) != 1 {
		t.Errorf("rollouts: %d, %v", len(recs), err)
	}
}
