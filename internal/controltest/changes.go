package controltest

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"testing"
	"time"

	"github.com/holdfast-dev/holdfast/controlapi"
	"github.com/holdfast-dev/holdfast/transport"
)

// The change workflow's cases: they need the admin token (to set
// policies) and a second control identity (Reviewer) to approve.

// reviewed returns the admin's and the reviewer's clients, or skips.
func (c *client) reviewed(t *testing.T) (admin, reviewer *client) {
	tok := c.srv.Tokens
	if tok == nil || tok.Admin == "" || tok.Reviewer == "" {
		t.Skip("the suite has no admin and reviewer tokens: policies and approvals need them")
	}
	return c.as(tok.Admin), c.as(tok.Reviewer)
}

// policy sets policy name over ns: one approval, by the reviewer's
// identity (reviewerName), the control token's name in the emergency list.
func (c *client) policy(admin *client, name, pattern string, extra map[string]any) {
	c.t.Helper()
	body := map[string]any{"namespaces": pattern, "approvals": 1, "approvers": []string{c.srv.Tokens.ReviewerName}}
	for k, v := range extra {
		body[k] = v
	}
	admin.ok(http.StatusOK, "PUT", "/control/policies/"+name, body, nil)
}

func (c *client) propose(body any) controlapi.Change {
	c.t.Helper()
	var ch controlapi.Change
	c.ok(http.StatusCreated, "POST", "/control/changes", body, &ch)
	return ch
}

func (c *client) change(id string) controlapi.Change {
	c.t.Helper()
	var ch controlapi.Change
	c.ok(http.StatusOK, "GET", "/control/changes/"+id, nil, &ch)
	return ch
}

func (c *client) revision(ns string) int64 {
	c.t.Helper()
	var st controlapi.NamespaceStatus
	c.ok(http.StatusOK, "GET", nsPath(ns, "/status"), nil, &st)
	return st.Revision
}

// testPolicies: policies need the admin scope and a server with tokens;
// bad ones are refused; a policy refuses direct writes of its namespaces.
func testPolicies(t *testing.T, c *client) {
	if c.srv.Tokens == nil {
		c.fails(http.StatusForbidden, transport.CodeForbidden, "PUT", "/control/policies/open", map[string]any{"namespaces": "x.*", "approvals": 1, "approvers": []string{"a"}})
		return
	}
	admin, _ := c.reviewed(t)
	ns := c.ns("pol")
	c.publish(ns, map[string]any{"a": 1})
	c.fails(http.StatusForbidden, transport.CodeForbidden, "PUT", "/control/policies/p1", map[string]any{"namespaces": ns, "approvals": 1, "approvers": []string{"x"}})
	admin.fails(http.StatusBadRequest, transport.CodeBadRequest, "PUT", "/control/policies/p1", map[string]any{"namespaces": ns, "approvals": 1})
	admin.fails(http.StatusBadRequest, transport.CodeBadRequest, "PUT", "/control/policies/p1", map[string]any{"namespaces": "[", "approvals": 1, "approvers": []string{"x"}})
	admin.fails(http.StatusBadRequest, transport.CodeBadRequest, "PUT", "/control/policies/p1", map[string]any{"namespaces": ns, "approvals": 1, "approvers": []string{"x"}, "retro_review": "-1h"})
	c.policy(admin, "p1", ns, nil)
	var p controlapi.Policy
	admin.ok(http.StatusOK, "GET", "/control/policies/p1", nil, &p)
	if p.Namespaces != ns || p.Approvals != 1 || p.RetroReview != "24h0m0s" {
		t.Errorf("policy: %+v", p)
	}
	c.fails(http.StatusForbidden, controlapi.CodeApprovalRequired, "POST", nsPath(ns, "/publish"), map[string]any{"puts": map[string]any{"a": 2}})
	c.fails(http.StatusForbidden, controlapi.CodeApprovalRequired, "POST", nsPath(ns, "/rollback"), map[string]any{"to_revision": 1})
	c.fails(http.StatusForbidden, controlapi.CodeApprovalRequired, "POST", nsPath(ns, "/rollouts"), map[string]any{"puts": map[string]any{"a": 2}, "stages": []float64{10, 100}})
	c.fails(http.StatusForbidden, controlapi.CodeApprovalRequired, "PUT", nsPath(ns, "/schema"), `{"type":"object"}`)
	admin.ok(http.StatusNoContent, "DELETE", "/control/policies/p1", nil, nil)
	admin.fails(http.StatusNotFound, transport.CodeNotFound, "GET", "/control/policies/p1", nil)
	c.publish(ns, map[string]any{"a": 2})
}

// testChangeFlow: propose, the author cannot approve, a second identity
// does, publish commits once; the review shows the semantic diff.
func testChangeFlow(t *testing.T, c *client) {
	admin, reviewer := c.reviewed(t)
	ns := c.ns("flow")
	base := c.publish(ns, map[string]any{"retry-ms": 200, "mode": "a", "gone": true})
	c.policy(admin, "flow-"+ns, ns, nil)
	ch := c.propose(map[string]any{"reason": "faster retries", "link": "https://example.com/t/1",
		"namespaces": map[string]any{ns: map[string]any{"base_revision": base, "puts": map[string]any{"retry-ms": 50, "mode": 1, "new": "x"}, "deletes": []string{"gone"}}}})
	if ch.ID == "" || ch.State != controlapi.ChangeOpen || ch.Required != 1 || ch.Hash == "" || ch.Namespaces[ns].BaseRevision != base {
		t.Fatalf("proposed: %+v", ch)
	}
	kinds := map[string]string{}
	for _, d := range ch.Diff {
		kinds[d.Key] = d.Kind
	}
	if kinds["retry-ms"] != controlapi.DiffChanged || kinds["mode"] != controlapi.DiffTypeChanged || kinds["new"] != controlapi.DiffAdded || kinds["gone"] != controlapi.DiffRemoved {
		t.Errorf("diff: %+v", ch.Diff)
	}
	if len(ch.Checks) == 0 || ch.Checks[0].Kind != controlapi.CheckSchema || ch.Checks[0].Result != controlapi.CheckPass {
		t.Errorf("checks: %+v", ch.Checks)
	}
	if _, ok := ch.Reach[ns]; !ok {
		t.Errorf("reach: %+v", ch.Reach)
	}
	if slices.Contains(ch.Actions, controlapi.ActionApprove) || !slices.Contains(ch.Actions, controlapi.ActionWithdraw) {
		t.Errorf("author's actions: %v", ch.Actions)
	}
	id := ch.ID
	c.fails(http.StatusForbidden, controlapi.CodeSelfApproval, "POST", "/control/changes/"+id+"/approve", nil)
	c.fails(http.StatusForbidden, controlapi.CodeApprovalRequired, "POST", "/control/changes/"+id+"/publish", nil)
	var list controlapi.ChangeList
	reviewer.ok(http.StatusOK, "GET", "/control/changes?awaiting=me&ns="+ns, nil, &list)
	if len(list.Changes) != 1 || list.Changes[0].ID != id {
		t.Errorf("awaiting the reviewer: %+v", list)
	}
	var approved controlapi.Change
	reviewer.ok(http.StatusOK, "POST", "/control/changes/"+id+"/approve", map[string]any{"reason": "looks right"}, &approved)
	if approved.State != controlapi.ChangeApproved || len(approved.Approvals) != 1 || approved.Approvals[0].By != c.srv.Tokens.ReviewerName {
		t.Errorf("approved: %+v", approved)
	}
	reviewer.fails(http.StatusConflict, controlapi.CodeAlreadyApproved, "POST", "/control/changes/"+id+"/approve", nil)
	var pub controlapi.ChangePublishReply
	c.ok(http.StatusOK, "POST", "/control/changes/"+id+"/publish", nil, &pub)
	if pub.Revision <= base || pub.Revisions[ns] != pub.Revision {
		t.Fatalf("published: %+v", pub)
	}
	var again controlapi.ChangePublishReply
	c.ok(http.StatusOK, "POST", "/control/changes/"+id+"/publish", nil, &again)
	if again.Revision != pub.Revision || c.revision(ns) != pub.Revision {
		t.Errorf("published twice: %+v then %+v, namespace at %d", pub, again, c.revision(ns))
	}
	var hist controlapi.History
	c.ok(http.StatusOK, "GET", nsPath(ns, "/history?limit=1"), nil, &hist)
	if len(hist.Revisions) != 1 || hist.Revisions[0].Kind != "change" || hist.Revisions[0].Change != id || hist.Revisions[0].Revision != pub.Revision {
		t.Errorf("history: %+v", hist.Revisions)
	}
	done := c.change(id)
	if done.State != controlapi.ChangePublished || done.Revision != pub.Revision || len(done.Events) < 3 {
		t.Errorf("published change: %+v", done)
	}
	c.list(t, "state=published&ns="+ns, id)
}

// list checks that GET /control/changes?q lists want.
func (c *client) list(t *testing.T, q string, want ...string) {
	t.Helper()
	var list controlapi.ChangeList
	c.ok(http.StatusOK, "GET", "/control/changes?"+q, nil, &list)
	var got []string
	for _, ch := range list.Changes {
		got = append(got, ch.ID)
	}
	slices.Sort(got)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Errorf("changes?%s: %v, want %v", q, got, want)
	}
}

// testChangeStale: a change whose base moved is stale, cannot be
// approved nor published; a rebase voids its approvals.
func testChangeStale(t *testing.T, c *client) {
	admin, reviewer := c.reviewed(t)
	ns := c.ns("stale")
	base := c.publish(ns, map[string]any{"a": 1})
	c.policy(admin, "stale-"+ns, ns, nil)
	one := map[string]any{"reason": "one", "namespaces": map[string]any{ns: map[string]any{"puts": map[string]any{"a": 2}}}}
	two := map[string]any{"reason": "two", "namespaces": map[string]any{ns: map[string]any{"base_revision": base, "puts": map[string]any{"b": 2}}}}
	a, b := c.propose(one), c.propose(two)
	reviewer.ok(http.StatusOK, "POST", "/control/changes/"+a.ID+"/approve", nil, nil)
	reviewer.ok(http.StatusOK, "POST", "/control/changes/"+b.ID+"/approve", nil, nil)
	c.ok(http.StatusOK, "POST", "/control/changes/"+a.ID+"/publish", nil, nil)
	if st := c.change(b.ID).State; st != controlapi.ChangeStale {
		t.Errorf("b after a: %s", st)
	}
	c.list(t, "state=stale&ns="+ns, b.ID)
	c.fails(http.StatusConflict, controlapi.CodeStaleBase, "POST", "/control/changes/"+b.ID+"/publish", nil)
	var rb controlapi.Change
	c.ok(http.StatusOK, "POST", "/control/changes/"+b.ID+"/rebase", nil, &rb)
	if rb.State != controlapi.ChangeOpen || len(rb.Approvals) != 0 || rb.Namespaces[ns].BaseRevision == base || rb.Hash == b.Hash {
		t.Errorf("rebased: %+v", rb)
	}
	c.fails(http.StatusForbidden, controlapi.CodeApprovalRequired, "POST", "/control/changes/"+b.ID+"/publish", nil)
	reviewer.ok(http.StatusOK, "POST", "/control/changes/"+b.ID+"/approve", nil, nil)
	c.ok(http.StatusOK, "POST", "/control/changes/"+b.ID+"/publish", nil, nil)
	// A stale base at proposal is refused.
	c.fails(http.StatusConflict, controlapi.CodeStaleBase, "POST", "/control/changes", two)
}

// testChangeStates: withdraw and reject, who may, and what they leave.
func testChangeStates(t *testing.T, c *client) {
	admin, reviewer := c.reviewed(t)
	ns := c.ns("states")
	c.publish(ns, map[string]any{"a": 1})
	c.policy(admin, "states-"+ns, ns, nil)
	body := map[string]any{"reason": "r", "namespaces": map[string]any{ns: map[string]any{"puts": map[string]any{"a": 2}}}}
	a := c.propose(body)
	reviewer.fails(http.StatusForbidden, transport.CodeForbidden, "POST", "/control/changes/"+a.ID+"/withdraw", nil)
	var w controlapi.Change
	c.ok(http.StatusOK, "POST", "/control/changes/"+a.ID+"/withdraw", map[string]any{"reason": "wrong value"}, &w)
	if w.State != controlapi.ChangeWithdrawn || len(w.Actions) != 0 {
		t.Errorf("withdrawn: %+v", w)
	}
	reviewer.fails(http.StatusConflict, controlapi.CodeNotApprovable, "POST", "/control/changes/"+a.ID+"/approve", nil)
	b := c.propose(body)
	c.fails(http.StatusForbidden, transport.CodeForbidden, "POST", "/control/changes/"+b.ID+"/reject", nil)
	reviewer.ok(http.StatusOK, "POST", "/control/changes/"+b.ID+"/reject", map[string]any{"reason": "no"}, nil)
	if st := c.change(b.ID).State; st != controlapi.ChangeRejected {
		t.Errorf("rejected: %s", st)
	}
	c.fails(http.StatusConflict, transport.CodeConflict, "POST", "/control/changes/"+b.ID+"/publish", nil)
	c.fails(http.StatusNotFound, transport.CodeNotFound, "GET", "/control/changes/nosuch", nil)
	// Bad input: no keys, no reason, an unknown namespace, no namespace.
	c.fails(http.StatusBadRequest, transport.CodeBadRequest, "POST", "/control/changes", map[string]any{"reason": "r", "namespaces": map[string]any{ns: map[string]any{}}})
	c.fails(http.StatusBadRequest, transport.CodeBadRequest, "POST", "/control/changes", map[string]any{"namespaces": map[string]any{ns: map[string]any{"puts": map[string]any{"a": 3}}}})
	c.fails(http.StatusNotFound, transport.CodeNotFound, "POST", "/control/changes", map[string]any{"reason": "r", "namespaces": map[string]any{c.ns("none"): map[string]any{"puts": map[string]any{"a": 3}}}})
	c.fails(http.StatusBadRequest, transport.CodeBadRequest, "POST", "/control/changes", map[string]any{"reason": "r"})
	c.fails(http.StatusBadRequest, transport.CodeBadRequest, "GET", "/control/changes?awaiting=you", nil)
}

// testChangeAtomic: a change of three namespaces commits all or nothing,
// the three at one revision.
func testChangeAtomic(t *testing.T, c *client) {
	admin, reviewer := c.reviewed(t)
	nss := []string{c.ns("atom"), c.ns("atom"), c.ns("atom")}
	parts := map[string]any{}
	for _, ns := range nss {
		c.publish(ns, map[string]any{"v": 1})
		parts[ns] = map[string]any{"puts": map[string]any{"v": 2}}
	}
	c.policy(admin, "atom-"+nss[0], nss[0], nil)
	ch := c.propose(map[string]any{"reason": "together", "namespaces": parts})
	reviewer.ok(http.StatusOK, "POST", "/control/changes/"+ch.ID+"/approve", nil, nil)
	before := []int64{c.revision(nss[0]), c.revision(nss[1])}
	moved := c.publish(nss[2], map[string]any{"v": 9}) // no policy on it
	c.fails(http.StatusConflict, controlapi.CodeStaleBase, "POST", "/control/changes/"+ch.ID+"/publish", nil)
	if after := []int64{c.revision(nss[0]), c.revision(nss[1])}; !slices.Equal(before, after) || c.revision(nss[2]) != moved {
		t.Fatalf("a failed change wrote: revisions %v then %v", before, after)
	}
	c.ok(http.StatusOK, "POST", "/control/changes/"+ch.ID+"/rebase", nil, nil)
	reviewer.ok(http.StatusOK, "POST", "/control/changes/"+ch.ID+"/approve", nil, nil)
	var pub controlapi.ChangePublishReply
	c.ok(http.StatusOK, "POST", "/control/changes/"+ch.ID+"/publish", nil, &pub)
	for _, ns := range nss {
		if pub.Revisions[ns] != pub.Revision || c.revision(ns) != pub.Revision {
			t.Errorf("%s: reply %+v, namespace at %d", ns, pub, c.revision(ns))
		}
	}
}

// testEmergency: an identity in the emergency list publishes past the
// approvals; its retro review is overdue once its window passes and
// closes with a second person's approval.
func testEmergency(t *testing.T, c *client) {
	admin, reviewer := c.reviewed(t)
	ns := c.ns("emer")
	c.publish(ns, map[string]any{"kill": false})
	c.policy(admin, "emer-"+ns, ns, map[string]any{"emergency": []string{c.srv.Tokens.ControlName}, "retro_review": "1ms"})
	c.fails(http.StatusBadRequest, transport.CodeBadRequest, "POST", nsPath(ns, "/publish"), map[string]any{"puts": map[string]any{"kill": true}, "emergency": true})
	reviewer.fails(http.StatusForbidden, transport.CodeForbidden, "POST", nsPath(ns, "/publish"), map[string]any{"puts": map[string]any{"kill": true}, "emergency": true, "reason": "r"})
	// A publish that does not commit leaves no retro review either.
	c.fails(http.StatusConflict, transport.CodeConflict, "POST", nsPath(ns, "/publish"), map[string]any{"puts": map[string]any{"kill": true}, "emergency": true, "reason": "outage", "if_revision": 999})
	c.list(t, "ns="+ns)
	c.overdue(0)
	var er controlapi.EmergencyReply
	c.ok(http.StatusOK, "POST", nsPath(ns, "/publish"), map[string]any{"puts": map[string]any{"kill": true}, "emergency": true, "reason": "outage"}, &er)
	if er.Revision <= 0 || er.RetroReview == "" || c.revision(ns) != er.Revision {
		t.Fatalf("emergency: %+v", er)
	}
	var hist controlapi.History
	c.ok(http.StatusOK, "GET", nsPath(ns, "/history?limit=1"), nil, &hist)
	if len(hist.Revisions) != 1 || hist.Revisions[0].Kind != "emergency" || hist.Revisions[0].Change != er.RetroReview {
		t.Errorf("history: %+v", hist.Revisions)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		rr := c.change(er.RetroReview)
		if rr.RetroReview != nil && rr.RetroReview.Overdue {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("retro review not overdue: %+v", rr)
		}
		time.Sleep(10 * time.Millisecond)
	}
	c.list(t, "state=overdue&ns="+ns, er.RetroReview)
	c.overdue(1)
	c.fails(http.StatusForbidden, controlapi.CodeSelfApproval, "POST", "/control/changes/"+er.RetroReview+"/approve", nil)
	var done controlapi.Change
	reviewer.ok(http.StatusOK, "POST", "/control/changes/"+er.RetroReview+"/approve", nil, &done)
	if done.RetroReview == nil || done.RetroReview.Overdue || done.RetroReview.ApprovedBy != c.srv.Tokens.ReviewerName {
		t.Errorf("reviewed: %+v", done.RetroReview)
	}
	reviewer.fails(http.StatusConflict, controlapi.CodeAlreadyApproved, "POST", "/control/changes/"+er.RetroReview+"/approve", nil)
	c.overdue(0)
}

// overdue checks the server's overdue gauge reads want, when the server
// gives it (the emergency case is the suite's only emergency publisher).
func (c *client) overdue(want int) {
	c.t.Helper()
	if c.srv.OverdueReviews == nil {
		return
	}
	n, err := c.srv.OverdueReviews(context.Background())
	if err != nil || n != want {
		c.t.Errorf("overdue reviews: %d, %v; want %d", n, err, want)
	}
}

// testChangeLint: a block lint saved through the lint routes blocks a
// proposal (recorded, not approvable) and a direct publish.
func testChangeLint(t *testing.T, c *client) {
	admin, reviewer := c.reviewed(t)
	ns := c.ns("lint")
	c.publish(ns, map[string]any{"timeout-ms": 100, "budget-ms": 500})
	admin.ok(http.StatusOK, "PUT", "/control/lints/bound-"+ns, map[string]any{"namespaces": ns, "severity": "block",
		"expr": `int(new["timeout-ms"]) < int(new["budget-ms"])`, "message": "timeout-ms must stay below budget-ms"}, nil)
	bad := map[string]any{"timeout-ms": 900}
	c.fails(http.StatusUnprocessableEntity, controlapi.CodeLintBlocked, "POST", nsPath(ns, "/publish"), map[string]any{"puts": bad})
	c.policy(admin, "lint-"+ns, ns, nil)
	ch := c.propose(map[string]any{"reason": "r", "namespaces": map[string]any{ns: map[string]any{"puts": bad}}})
	found := false
	for _, ck := range ch.Checks {
		found = found || ck.Kind == controlapi.CheckLint && ck.Result == controlapi.CheckBlock
	}
	if !found || ch.State != controlapi.ChangeOpen {
		t.Errorf("proposal: %+v", ch)
	}
	reviewer.fails(http.StatusConflict, controlapi.CodeNotApprovable, "POST", "/control/changes/"+ch.ID+"/approve", nil)
}

// testChangeStaged: an approved change of one namespace publishes as a
// rollout; one of two namespaces cannot.
func testChangeStaged(t *testing.T, c *client) {
	admin, reviewer := c.reviewed(t)
	ns, other := c.ns("staged"), c.ns("staged")
	c.publish(ns, map[string]any{"a": 1})
	c.publish(other, map[string]any{"a": 1})
	c.policy(admin, "staged-"+ns, ns, nil)
	two := c.propose(map[string]any{"reason": "r", "namespaces": map[string]any{
		ns: map[string]any{"puts": map[string]any{"a": 2}}, other: map[string]any{"puts": map[string]any{"a": 2}}}})
	reviewer.ok(http.StatusOK, "POST", "/control/changes/"+two.ID+"/approve", nil, nil)
	c.fails(http.StatusBadRequest, transport.CodeBadRequest, "POST", "/control/changes/"+two.ID+"/publish", map[string]any{"stages": []float64{50, 100}})
	c.ok(http.StatusOK, "POST", "/control/changes/"+two.ID+"/withdraw", nil, nil)
	one := c.propose(map[string]any{"reason": "r", "namespaces": map[string]any{ns: map[string]any{"puts": map[string]any{"a": 3}}}})
	reviewer.ok(http.StatusOK, "POST", "/control/changes/"+one.ID+"/approve", nil, nil)
	var pub controlapi.ChangePublishReply
	c.ok(http.StatusOK, "POST", "/control/changes/"+one.ID+"/publish", map[string]any{"stages": []float64{50, 100}, "bake": "1h"}, &pub)
	if pub.Rollout == "" || pub.Revisions[ns] != pub.Revision {
		t.Fatalf("published as a rollout: %+v", pub)
	}
	got := c.change(one.ID)
	if got.State != controlapi.ChangePublished || got.Rollout != pub.Rollout || got.Revision != pub.Revision {
		t.Errorf("the change: %+v", got)
	}
	// Aborting the rollout is not guarded by the policy.
	c.ok(http.StatusOK, "POST", nsPath(ns, "/rollouts/"+pub.Rollout+"/abort"), nil, nil)
}

// testChangeSchemaBlock: a change whose content fails the namespace's
// schema is recorded with the schema's block, cannot be approved nor
// published.
func testChangeSchemaBlock(t *testing.T, c *client) {
	ns := c.ns("schemablock")
	c.publish(ns, map[string]any{"retry-ms": 100})
	c.ok(http.StatusNoContent, "PUT", nsPath(ns, "/schema"), `{"type":"object","properties":{"retry-ms":{"type":"integer","maximum":1000}}}`, nil)
	ch := c.propose(map[string]any{"reason": "r", "namespaces": map[string]any{ns: map[string]any{"puts": map[string]any{"retry-ms": 5000}}}})
	if ch.State != controlapi.ChangeOpen || len(ch.Checks) == 0 || ch.Checks[0].Result != controlapi.CheckBlock || ch.Checks[0].Message == "" {
		t.Fatalf("proposed: %+v", ch)
	}
	c.fails(http.StatusUnprocessableEntity, transport.CodeSchemaViolation, "POST", "/control/changes/"+ch.ID+"/publish", nil)
	if c.srv.Tokens != nil && c.srv.Tokens.Reviewer != "" {
		c.as(c.srv.Tokens.Reviewer).fails(http.StatusConflict, controlapi.CodeNotApprovable, "POST", "/control/changes/"+ch.ID+"/approve", nil)
	}
}

// testChangeSchema: a governed namespace's schema changes through a
// change: reviewed against the new schema, shown in the diff, bound to
// the hash, committed with the values; or deleted the same way.
func testChangeSchema(t *testing.T, c *client) {
	admin, reviewer := c.reviewed(t)
	ns := c.ns("chschema")
	c.publish(ns, map[string]any{"retry-ms": 100})
	c.ok(http.StatusNoContent, "PUT", nsPath(ns, "/schema"), `{"type":"object","properties":{"retry-ms":{"type":"integer","maximum":1000}}}`, nil)
	c.policy(admin, "schema-"+ns, ns, nil)
	wide := map[string]any{"type": "object", "properties": map[string]any{"retry-ms": map[string]any{"type": "integer", "maximum": 10000}}}
	narrow := map[string]any{"type": "object", "properties": map[string]any{"retry-ms": map[string]any{"type": "integer", "maximum": 50}}}
	c.fails(http.StatusForbidden, controlapi.CodeApprovalRequired, "PUT", nsPath(ns, "/schema"), `{"type":"object"}`)
	c.fails(http.StatusBadRequest, transport.CodeBadRequest, "POST", "/control/changes", map[string]any{"reason": "r", "namespaces": map[string]any{
		ns: map[string]any{"schema": wide, "delete_schema": true}}})
	c.fails(http.StatusBadRequest, transport.CodeBadRequest, "POST", "/control/changes", map[string]any{"reason": "r", "namespaces": map[string]any{
		ns: map[string]any{"schema": map[string]any{"type": 12}}}})

	// The content after the change is checked against the new schema.
	tight := c.propose(map[string]any{"reason": "r", "namespaces": map[string]any{ns: map[string]any{"schema": narrow}}})
	if len(blocks(tight.Checks, controlapi.CheckSchema)) != 1 {
		t.Errorf("a schema the content fails: %+v", tight.Checks)
	}
	reviewer.fails(http.StatusConflict, controlapi.CodeNotApprovable, "POST", "/control/changes/"+tight.ID+"/approve", nil)

	puts := map[string]any{"retry-ms": 5000}
	ch := c.propose(map[string]any{"reason": "r", "namespaces": map[string]any{ns: map[string]any{"puts": puts, "schema": wide}}})
	if len(blocks(ch.Checks)) != 0 {
		t.Fatalf("a put the new schema takes: %+v", ch.Checks)
	}
	var entry *controlapi.DiffEntry
	for i, e := range ch.Diff {
		if e.Op == controlapi.OpSchema {
			entry = &ch.Diff[i]
		}
	}
	if entry == nil || entry.Kind != controlapi.DiffChanged || len(entry.Old) == 0 || len(entry.New) == 0 || len(ch.Diff) != 2 {
		t.Errorf("diff: %+v", ch.Diff)
	}
	same := c.propose(map[string]any{"reason": "r", "namespaces": map[string]any{ns: map[string]any{"puts": puts}}})
	if same.Hash == ch.Hash {
		t.Error("the hash does not cover the schema")
	}
	c.ok(http.StatusOK, "POST", "/control/changes/"+same.ID+"/withdraw", nil, nil)
	reviewer.ok(http.StatusOK, "POST", "/control/changes/"+ch.ID+"/approve", nil, nil)
	c.fails(http.StatusBadRequest, transport.CodeBadRequest, "POST", "/control/changes/"+ch.ID+"/publish", map[string]any{"stages": []float64{50, 100}})
	var pub controlapi.ChangePublishReply
	c.ok(http.StatusOK, "POST", "/control/changes/"+ch.ID+"/publish", nil, &pub)
	if c.revision(ns) != pub.Revision {
		t.Errorf("published at %d, namespace at %d", pub.Revision, c.revision(ns))
	}
	var got map[string]any
	c.ok(http.StatusOK, "GET", nsPath(ns, "/schema"), nil, &got)
	if fmt.Sprint(got) != fmt.Sprint(wide) {
		t.Errorf("schema after the change: %v", got)
	}

	del := c.propose(map[string]any{"reason": "r", "namespaces": map[string]any{ns: map[string]any{"delete_schema": true}}})
	if len(del.Diff) != 1 || del.Diff[0].Op != controlapi.OpSchema || del.Diff[0].Kind != controlapi.DiffRemoved {
		t.Errorf("delete diff: %+v", del.Diff)
	}
	reviewer.ok(http.StatusOK, "POST", "/control/changes/"+del.ID+"/approve", nil, nil)
	c.ok(http.StatusOK, "POST", "/control/changes/"+del.ID+"/publish", nil, nil)
	c.fails(http.StatusNotFound, transport.CodeNotFound, "GET", nsPath(ns, "/schema"), nil)
	c.fails(http.StatusBadRequest, transport.CodeBadRequest, "POST", "/control/changes", map[string]any{"reason": "r", "namespaces": map[string]any{
		ns: map[string]any{"delete_schema": true}}})
}

// blocks returns the checks of cs that block (of kinds, all when none).
func blocks(cs []controlapi.Check, kinds ...string) []controlapi.Check {
	var out []controlapi.Check
	for _, ck := range cs {
		if ck.Result == controlapi.CheckBlock && (len(kinds) == 0 || slices.Contains(kinds, ck.Kind)) {
			out = append(out, ck)
		}
	}
	return out
}
