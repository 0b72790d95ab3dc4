package controltest

import (
	"net/http"
	"testing"

	"github.com/holdfast-dev/holdfast/controlapi"
	"github.com/holdfast-dev/holdfast/transport"
)

// testRollouts: a rollout starts (201), is listed and read; a plain
// publish meanwhile is 409, one with abort_rollout reverts it first; an
// ended rollout cannot be aborted (409); an unknown one is 404.
func testRollouts(t *testing.T, c *client) {
	ns := c.ns("ro")
	c.publish(ns, map[string]any{"a": 1})
	// A bake of an hour: the rollout runs for the whole case.
	spec := `{"puts":{"a":2},"stages":[100],"bake":"1h","actor":"dave","reason":"try"}`
	var started controlapi.RolloutStarted
	c.ok(http.StatusCreated, "POST", nsPath(ns, "/rollouts"), spec, &started)
	if started.ID == "" || started.Revision <= 0 {
		t.Fatalf("start: %+v", started)
	}
	var rec controlapi.RolloutRecord
	c.ok(http.StatusOK, "GET", nsPath(ns, "/rollouts/"+started.ID), nil, &rec)
	if rec.ID != started.ID || rec.State != "running" || len(rec.Revisions) == 0 || rec.Revisions[0] != started.Revision {
		t.Errorf("the rollout: %+v", rec)
	}
	c.fails(http.StatusConflict, transport.CodeConflict, "POST", nsPath(ns, "/rollouts"), spec)
	c.fails(http.StatusConflict, transport.CodeConflict, "POST", nsPath(ns, "/publish"), `{"puts":{"a":3}}`)
	var rr controlapi.RevisionReply
	c.ok(http.StatusOK, "POST", nsPath(ns, "/publish"), `{"puts":{"a":3},"abort_rollout":true}`, &rr)
	c.ok(http.StatusOK, "GET", nsPath(ns, "/rollouts/"+started.ID), nil, &rec)
	if rec.State != "reverted" {
		t.Errorf("after a publish with abort_rollout: %+v", rec)
	}
	var list controlapi.RolloutList
	c.ok(http.StatusOK, "GET", nsPath(ns, "/rollouts"), nil, &list)
	if len(list.Rollouts) != 1 || list.Rollouts[0].ID != started.ID {
		t.Errorf("list: %+v", list)
	}
	c.fails(http.StatusConflict, transport.CodeConflict, "POST", nsPath(ns, "/rollouts/"+started.ID+"/abort"), nil)
	c.fails(http.StatusConflict, transport.CodeConflict, "POST", nsPath(ns, "/rollouts/"+started.ID+"/promote"), `{"actor":"eve"}`)
	c.fails(http.StatusNotFound, transport.CodeNotFound, "GET", nsPath(ns, "/rollouts/r-000000000000"), nil)
	c.fails(http.StatusNotFound, transport.CodeNotFound, "POST", nsPath(ns, "/rollouts/r-000000000000/abort"), nil)

	// Aborted by an operator: reverted, with its revert committed.
	c.ok(http.StatusCreated, "POST", nsPath(ns, "/rollouts"), spec, &started)
	c.ok(http.StatusOK, "POST", nsPath(ns, "/rollouts/"+started.ID+"/abort"), `{"reason":"enough"}`, &rec)
	if rec.State != "reverted" || len(rec.Revisions) < 2 {
		t.Errorf("aborted: %+v", rec)
	}
	c.ok(http.StatusOK, "GET", nsPath(c.ns("none"), "/rollouts"), nil, &list)
	if len(list.Rollouts) != 0 {
		t.Errorf("a namespace without rollouts lists %+v", list)
	}
}

// testAbortByPublish: a publish with abort_rollout that fails the
// namespace's schema is 422 and aborts nothing; one that passes reverts
// the rollout and commits.
func testAbortByPublish(t *testing.T, c *client) {
	ns := c.ns("abort")
	c.ok(http.StatusNoContent, "PUT", nsPath(ns, "/schema"), `{"type":"object","properties":{"a":{"type":"integer"}}}`, nil)
	c.publish(ns, map[string]any{"a": 1})
	var started controlapi.RolloutStarted
	c.ok(http.StatusCreated, "POST", nsPath(ns, "/rollouts"), `{"puts":{"a":2},"stages":[100],"bake":"1h"}`, &started)
	c.fails(http.StatusUnprocessableEntity, transport.CodeSchemaViolation, "POST", nsPath(ns, "/publish"), `{"puts":{"a":"x"},"abort_rollout":true}`)
	var rec controlapi.RolloutRecord
	c.ok(http.StatusOK, "GET", nsPath(ns, "/rollouts/"+started.ID), nil, &rec)
	if rec.State != controlapi.RolloutRunning {
		t.Fatalf("a publish that failed its schema ended the rollout: %+v", rec)
	}
	c.ok(http.StatusOK, "POST", nsPath(ns, "/publish"), `{"puts":{"a":3},"abort_rollout":true}`, nil)
	c.ok(http.StatusOK, "GET", nsPath(ns, "/rollouts/"+started.ID), nil, &rec)
	if rec.State != controlapi.RolloutReverted {
		t.Errorf("after a publish with abort_rollout: %+v", rec)
	}
}

// testRolloutBadInput: a bad rollout is 400 and starts nothing.
func testRolloutBadInput(t *testing.T, c *client) {
	ns := c.ns("robad")
	c.publish(ns, map[string]any{"a": 1})
	for _, body := range []string{
		``, `{`, `{"puts":{"a":2}}`, `{"stages":[100]}`, `{"puts":{"a":2},"stages":[10,5,100]}`, `{"puts":{"a":2},"stages":[50]}`,
		`{"puts":{"a":2},"stages":[100],"bake":"soon"}`, `{"puts":{"a":2},"stages":[100],"on_timeout":"wait"}`,
		`{"puts":{"a":2},"stages":[100],"typo":1}`, `{"puts":{"$holdfast/rollout":2},"stages":[100]}`,
		`{"puts":{"a b":2},"stages":[100]}`, `{"puts":{"a":2},"deletes":["a"],"stages":[100]}`,
	} {
		c.fails(http.StatusBadRequest, transport.CodeBadRequest, "POST", nsPath(ns, "/rollouts"), body)
	}
	c.fails(http.StatusBadRequest, transport.CodeBadRequest, "POST", nsPath("Bad_NS", "/rollouts"), `{"puts":{"a":2},"stages":[100]}`)
	var list controlapi.RolloutList
	c.ok(http.StatusOK, "GET", nsPath(ns, "/rollouts"), nil, &list)
	if len(list.Rollouts) != 0 {
		t.Errorf("refused rollouts listed: %+v", list)
	}
}

// testTokens: without a token store every token route is 404; with one,
// an admin creates, reads, lists and revokes a token.
func testTokens(t *testing.T, c *client) {
	routes := []struct{ method, path, body string }{
		{"POST", "/control/tokens", `{"name":"x","control":["*"]}`}, {"GET", "/control/tokens", ""},
		{"GET", "/control/tokens/x", ""}, {"DELETE", "/control/tokens/x", ""}, {"POST", "/control/tokens/sync", `{}`},
	}
	probe := c
	if c.srv.Tokens != nil && c.srv.Tokens.Admin != "" {
		probe = c.as(c.srv.Tokens.Admin)
	}
	if probe.do("GET", "/control/tokens", nil).status == http.StatusNotFound {
		for _, rt := range routes {
			if probe != c && rt.path == "/control/tokens/sync" {
				continue // the admin has no relay scope: 403 before the 404
			}
			probe.fails(http.StatusNotFound, transport.CodeNotFound, rt.method, rt.path, rt.body)
		}
		return
	}
	if c.srv.Tokens == nil || c.srv.Tokens.Admin == "" {
		t.Skip("the server keeps tokens, and the suite has no admin token to manage them with")
	}
	admin := c.as(c.srv.Tokens.Admin)
	var created controlapi.TokenCreated
	admin.ok(http.StatusCreated, "POST", "/control/tokens", `{"name":"ct-made","control":["made.*"]}`, &created)
	if created.Name != "ct-made" || created.Secret == "" {
		t.Errorf("created: %+v", created)
	}
	admin.fails(http.StatusConflict, transport.CodeConflict, "POST", "/control/tokens", `{"name":"ct-made","control":["made.*"]}`)
	admin.fails(http.StatusBadRequest, transport.CodeBadRequest, "POST", "/control/tokens", `{"name":"ct-x","expires_in":"-1h"}`)
	var info controlapi.TokenInfo
	admin.ok(http.StatusOK, "GET", "/control/tokens/ct-made", nil, &info)
	if info.Name != "ct-made" || len(info.Control) != 1 {
		t.Errorf("token: %+v", info)
	}
	var list controlapi.TokenList
	admin.ok(http.StatusOK, "GET", "/control/tokens", nil, &list)
	found := false
	for _, ti := range list.Tokens {
		found = found || ti.Name == "ct-made"
	}
	if !found {
		t.Errorf("list: %+v", list)
	}
	c.as(created.Secret).publish(c.ns("made"), map[string]any{"a": 1})
	admin.ok(http.StatusNoContent, "DELETE", "/control/tokens/ct-made", nil, nil)
	admin.fails(http.StatusNotFound, transport.CodeNotFound, "GET", "/control/tokens/ct-made", nil)
	admin.fails(http.StatusNotFound, transport.CodeNotFound, "DELETE", "/control/tokens/ct-made", nil)
	c.fails(http.StatusForbidden, transport.CodeForbidden, "GET", "/control/tokens", nil)
}

// testAccess: with tokens, a request without one is 401 with
// WWW-Authenticate; one outside its token's scope 403.
func testAccess(t *testing.T, c *client) {
	tok := c.srv.Tokens
	if tok == nil {
		t.Skip("the server is open")
	}
	ns := c.ns("acc")
	scoped := c.ns("scoped")
	c.publish(ns, map[string]any{"a": 1})
	r := c.as("").do("GET", nsPath(ns, "/status"), nil)
	if r.status != http.StatusUnauthorized || r.header.Get("WWW-Authenticate") == "" {
		t.Errorf("no token: %d %q %s", r.status, r.header.Get("WWW-Authenticate"), r.body)
	}
	c.as("").fails(http.StatusUnauthorized, transport.CodeUnauthorized, "POST", "/control/compact", `{}`)
	c.as("not-a-token").fails(http.StatusUnauthorized, transport.CodeUnauthorized, "GET", nsPath(ns, "/history"), nil)
	c.as(tok.Data).fails(http.StatusForbidden, transport.CodeForbidden, "GET", nsPath(ns, "/status"), nil)
	c.as(tok.Data).fails(http.StatusForbidden, transport.CodeForbidden, "GET", "/control/clients", nil)
	s := c.as(tok.Scoped)
	s.publish(scoped, map[string]any{"a": 1})
	s.fails(http.StatusForbidden, transport.CodeForbidden, "POST", nsPath(ns, "/publish"), `{"puts":{"a":2}}`)
	s.fails(http.StatusForbidden, transport.CodeForbidden, "GET", nsPath(ns, "/history"), nil)
	s.fails(http.StatusForbidden, transport.CodeForbidden, "POST", "/control/compact", `{}`)
	var cl controlapi.Clients
	s.ok(http.StatusOK, "GET", "/control/clients", nil, &cl)
	if tok.Admin != "" {
		c.fails(http.StatusForbidden, transport.CodeForbidden, "POST", "/control/tokens", `{"name":"ct-no","control":["*"]}`)
		c.as(tok.Admin).fails(http.StatusForbidden, transport.CodeForbidden, "GET", nsPath(ns, "/status"), nil)
		c.fails(http.StatusForbidden, transport.CodeForbidden, "POST", "/control/tokens/sync", `{}`)
	}
}

// testCompact: compaction to a revision (0 or none: the head) answers the
// compaction point; a negative revision or one above the head is 400.
// Reading below it then is either still served (a store whose audit keeps
// the values) or 410 with the point.
func testCompact(t *testing.T, c *client) {
	ns := c.ns("cmp")
	r1 := c.publish(ns, map[string]any{"a": 1})
	r2 := c.publish(ns, map[string]any{"a": 2})
	c.fails(http.StatusBadRequest, transport.CodeBadRequest, "POST", "/control/compact", `{"revision":-1}`)
	c.fails(http.StatusBadRequest, transport.CodeBadRequest, "POST", "/control/compact", `{"revision":`+itoa(r2+1000000)+`}`)
	c.fails(http.StatusBadRequest, transport.CodeBadRequest, "POST", "/control/compact", `{"revision":1,"typo":1}`)
	var cr controlapi.CompactReply
	c.ok(http.StatusOK, "POST", "/control/compact", `{"revision":`+itoa(r2)+`}`, &cr)
	if cr.CompactRevision < r2 {
		t.Errorf("compacted to %d, want at least %d", cr.CompactRevision, r2)
	}
	c.ok(http.StatusOK, "POST", "/control/compact", ``, &cr)
	if cr.CompactRevision < r2 {
		t.Errorf("compacted to the head: %d", cr.CompactRevision)
	}
	var st controlapi.NamespaceStatus
	c.ok(http.StatusOK, "GET", nsPath(ns, "/status"), nil, &st)
	if st.CompactRevision < r2 {
		t.Errorf("status after compaction: %s", mustJSON(st))
	}
	r := c.do("GET", nsPath(ns, "/values?revision="+itoa(r1)), nil)
	switch r.status {
	case http.StatusOK:
	case http.StatusGone:
		eb := c.fails(http.StatusGone, transport.CodeCompacted, "GET", nsPath(ns, "/values?revision="+itoa(r1)), nil)
		if eb.CompactRevision < r2 {
			t.Errorf("compacted: %+v", eb)
		}
	default:
		t.Errorf("values below the compaction point: %d %s", r.status, r.body)
	}
}
