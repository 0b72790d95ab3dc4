package controltest

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/holdfast-dev/holdfast/controlapi"
	"github.com/holdfast-dev/holdfast/internal/testutil"
	"github.com/holdfast-dev/holdfast/transport"
)

// testRouting: an unknown path is 404, a known one asked with another
// method 405 with Allow, both as JSON error bodies.
func testRouting(t *testing.T, c *client) {
	c.fails(http.StatusNotFound, transport.CodeNotFound, "GET", "/control/nope", nil)
	c.fails(http.StatusNotFound, transport.CodeNotFound, "GET", nsPath("a", "/nope"), nil)
	r := c.do("DELETE", nsPath("a", "/publish"), nil)
	if r.status != http.StatusMethodNotAllowed || !strings.Contains(r.header.Get("Allow"), "POST") {
		t.Errorf("DELETE publish: %d Allow %q %s; want 405 allowing POST", r.status, r.header.Get("Allow"), r.body)
	}
}

// testPublish: a publish answers its revision; the values, the history
// and the status read it back.
func testPublish(t *testing.T, c *client) {
	ns := c.ns("pub")
	body := map[string]any{"puts": map[string]any{"a": 1, "b": map[string]any{"x": "y"}}, "actor": "alice", "reason": "first"}
	var rr controlapi.RevisionReply
	c.ok(http.StatusOK, "POST", nsPath(ns, "/publish"), body, &rr)
	var v controlapi.NamespaceValues
	c.ok(http.StatusOK, "GET", nsPath(ns, "/values?revision="+itoa(rr.Revision)), nil, &v)
	if v.Namespace != ns || v.Revision != rr.Revision || string(v.Values["a"]) != "1" || len(v.Values) != 2 {
		t.Errorf("values: %+v", v)
	}
	rev2 := c.publish(ns, map[string]any{"a": 2})
	if rev2 <= rr.Revision {
		t.Errorf("second publish: revision %d after %d", rev2, rr.Revision)
	}
	var del controlapi.RevisionReply
	c.ok(http.StatusOK, "POST", nsPath(ns, "/publish"), `{"deletes":["b"]}`, &del)
	v = controlapi.NamespaceValues{}
	c.ok(http.StatusOK, "GET", nsPath(ns, "/values?revision="+itoa(del.Revision)), nil, &v)
	if _, ok := v.Values["b"]; ok || string(v.Values["a"]) != "2" {
		t.Errorf("values after the delete: %s", mustJSON(v.Values))
	}
}

// testPublishBadInput: a malformed publish is 400 (413 when too large),
// and commits nothing.
func testPublishBadInput(t *testing.T, c *client) {
	ns := c.ns("bad")
	rev := c.publish(ns, map[string]any{"a": 1})
	p := nsPath(ns, "/publish")
	for _, tc := range []struct {
		name string
		path string
		body any
	}{
		{"bad namespace", nsPath("Bad_NS", "/publish"), `{"puts":{"a":1}}`},
		{"bad key", p, `{"puts":{"a b":1}}`},
		{"empty key", p, `{"puts":{"":1}}`},
		{"reserved key", p, `{"puts":{"$holdfast/x":1}}`},
		{"reserved delete", p, `{"deletes":["$holdfast/rollout"]}`},
		{"put and deleted", p, `{"puts":{"a":1},"deletes":["a"]}`},
		{"malformed JSON", p, `{"puts":`},
		{"not an object", p, `[1]`},
		{"unknown field", p, `{"puts":{"a":1},"putz":{}}`},
		{"trailing data", p, `{"puts":{"a":1}} {}`},
		{"invalid UTF-8", p, "{\"puts\":{\"a\":\"\xff\"}}"},
		{"lone surrogate", p, `{"puts":{"a":"\ud800"}}`},
		{"lone surrogate in a key", p, `{"puts":{"\udc00":1}}`},
		{"empty body", p, ``},
		{"negative if_revision", p, `{"puts":{"a":1},"if_revision":-1}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c.on(t).fails(http.StatusBadRequest, transport.CodeBadRequest, "POST", tc.path, tc.body)
		})
	}
	big := `{"puts":{"a":"` + strings.Repeat("x", 8<<20) + `"}}`
	c.fails(http.StatusRequestEntityTooLarge, transport.CodeTooLarge, "POST", p, big)
	var st controlapi.NamespaceStatus
	c.ok(http.StatusOK, "GET", nsPath(ns, "/status"), nil, &st)
	if st.Revision != rev {
		t.Errorf("revision %d after refused publishes, want %d", st.Revision, rev)
	}
}

// testConflict: a publish whose if_revision is not the namespace's is 409
// with the namespace's revision; one that matches commits (0: a
// namespace with none).
func testConflict(t *testing.T, c *client) {
	ns := c.ns("cas")
	var rr controlapi.RevisionReply
	c.ok(http.StatusOK, "POST", nsPath(ns, "/publish"), `{"puts":{"a":1},"if_revision":0}`, &rr)
	eb := c.fails(http.StatusConflict, transport.CodeConflict, "POST", nsPath(ns, "/publish"), `{"puts":{"a":2},"if_revision":0}`)
	if eb.Revision != rr.Revision {
		t.Errorf("conflict's revision %d, want %d", eb.Revision, rr.Revision)
	}
	c.ok(http.StatusOK, "POST", nsPath(ns, "/publish"), map[string]any{"puts": map[string]any{"a": 2}, "if_revision": rr.Revision}, nil)
	eb = c.fails(http.StatusConflict, transport.CodeConflict, "POST", nsPath(ns, "/rollback"), map[string]any{"to_revision": rr.Revision, "if_revision": rr.Revision})
	if eb.Revision <= rr.Revision {
		t.Errorf("rollback's conflict: revision %d, want above %d", eb.Revision, rr.Revision)
	}
}

// testRollback: a rollback republishes the content of a revision as a new
// one, recorded as a rollback; a missing or non-positive to_revision is
// 400.
func testRollback(t *testing.T, c *client) {
	ns := c.ns("rb")
	r1 := c.publish(ns, map[string]any{"a": 1})
	c.publish(ns, map[string]any{"a": 2, "b": 3})
	var rr controlapi.RevisionReply
	c.ok(http.StatusOK, "POST", nsPath(ns, "/rollback"), map[string]any{"to_revision": r1, "actor": "bob", "reason": "undo"}, &rr)
	var v controlapi.NamespaceValues
	c.ok(http.StatusOK, "GET", nsPath(ns, "/values?revision="+itoa(rr.Revision)), nil, &v)
	if string(v.Values["a"]) != "1" || len(v.Values) != 1 {
		t.Errorf("values after the rollback: %s", mustJSON(v.Values))
	}
	var h controlapi.History
	c.ok(http.StatusOK, "GET", nsPath(ns, "/history?limit=1"), nil, &h)
	if len(h.Revisions) != 1 || h.Revisions[0].Kind != "rollback" || h.Revisions[0].Revision != rr.Revision || h.Revisions[0].Reason != "undo" {
		t.Errorf("the rollback's record: %s", mustJSON(h))
	}
	for _, body := range []string{`{}`, `{"to_revision":0}`, `{"to_revision":-1}`, `{"to_revision":1,"typo":1}`, ``} {
		c.fails(http.StatusBadRequest, transport.CodeBadRequest, "POST", nsPath(ns, "/rollback"), body)
	}
	// A revision the namespace has no content at: before its first, or
	// above the head.
	c.fails(http.StatusNotFound, transport.CodeNotFound, "POST", nsPath(ns, "/rollback"), map[string]any{"to_revision": r1 - 1})
	c.fails(http.StatusNotFound, transport.CodeNotFound, "POST", nsPath(ns, "/rollback"), map[string]any{"to_revision": rr.Revision + 1000000})
	c.fails(http.StatusNotFound, transport.CodeNotFound, "POST", nsPath(c.ns("none"), "/rollback"), map[string]any{"to_revision": r1})
}

// testSchema: a schema is set (204), read back (200), enforced (422 with
// the failures), deleted (204); none is 404; an invalid one 400.
func testSchema(t *testing.T, c *client) {
	ns := c.ns("sch")
	p := nsPath(ns, "/schema")
	c.fails(http.StatusNotFound, transport.CodeNotFound, "GET", p, nil)
	c.fails(http.StatusNotFound, transport.CodeNotFound, "DELETE", p, nil)
	c.fails(http.StatusBadRequest, transport.CodeBadRequest, "PUT", p, `{"type":`)
	c.fails(http.StatusBadRequest, transport.CodeBadRequest, "PUT", nsPath("Bad_NS", "/schema"), `{}`)
	// Past the bounds of package schema, refused before compiling.
	start := time.Now()
	if eb := c.fails(http.StatusBadRequest, transport.CodeBadRequest, "PUT", p, testutil.DeepSchema(5000)); !strings.Contains(eb.Message, "nested more than 64") {
		t.Errorf("a schema 5,000 deep: %+v, want the depth bound named", eb)
	}
	if took := time.Since(start); took > time.Second {
		t.Errorf("a schema 5,000 deep refused in %v", took)
	}
	sch := `{"type":"object","properties":{"port":{"type":"integer"}},"required":["port"]}`
	c.ok(http.StatusNoContent, "PUT", p, sch, nil)
	r := c.ok(http.StatusOK, "GET", p, nil, nil)
	if !jsonEqual(r.body, []byte(sch)) {
		t.Errorf("schema read back: %s, want %s", r.body, sch)
	}
	eb := c.fails(http.StatusUnprocessableEntity, transport.CodeSchemaViolation, "POST", nsPath(ns, "/publish"), `{"puts":{"port":"x"}}`)
	if len(eb.Details) == 0 {
		t.Errorf("a schema violation without details: %+v", eb)
	}
	c.publish(ns, map[string]any{"port": 80})
	c.ok(http.StatusNoContent, "DELETE", p, nil, nil)
	c.fails(http.StatusNotFound, transport.CodeNotFound, "GET", p, nil)
	c.publish(ns, map[string]any{"port": "any"})
}

// testHistory: records newest first, paged by limit and before, with
// actor, reason and keys.
func testHistory(t *testing.T, c *client) {
	ns := c.ns("hist")
	r1 := c.publish(ns, map[string]any{"a": 1})
	c.ok(http.StatusOK, "POST", nsPath(ns, "/publish"), `{"puts":{"b":1},"deletes":["a"],"actor":"carol","reason":"second"}`, nil)
	var h controlapi.History
	c.ok(http.StatusOK, "GET", nsPath(ns, "/history"), nil, &h)
	if h.Namespace != ns || len(h.Revisions) != 2 {
		t.Fatalf("history: %s", mustJSON(h))
	}
	// The actor named is the actor on an open server, whom the token
	// acted for on one with tokens.
	if r := h.Revisions[0]; r.Actor != "carol" && r.OnBehalfOf != "carol" || r.Reason != "second" || r.Kind != "publish" || mustJSON(r.Puts) != `["b"]` || mustJSON(r.Deletes) != `["a"]` || r.PrevRevision != r1 {
		t.Errorf("newest record: %s", mustJSON(r))
	}
	before := h.Revisions[0].Revision
	h = controlapi.History{}
	c.ok(http.StatusOK, "GET", nsPath(ns, "/history?limit=1&before="+itoa(before)), nil, &h)
	if len(h.Revisions) != 1 || h.Revisions[0].Revision != r1 {
		t.Errorf("the page before: %s", mustJSON(h))
	}
	c.fails(http.StatusNotFound, transport.CodeNotFound, "GET", nsPath(c.ns("none"), "/history"), nil)
}

// testValuesAndDiff: values by revision and by time, a diff between two
// revisions; unknown namespaces and revisions before the first are 404.
func testValuesAndDiff(t *testing.T, c *client) {
	ns := c.ns("vals")
	r1 := c.publish(ns, map[string]any{"a": 1, "b": 1})
	var rr controlapi.RevisionReply
	c.ok(http.StatusOK, "POST", nsPath(ns, "/publish"), `{"puts":{"a":2,"c":3},"deletes":["b"]}`, &rr)
	var d controlapi.Diff
	c.ok(http.StatusOK, "GET", nsPath(ns, "/diff?from="+itoa(r1)+"&to="+itoa(rr.Revision)), nil, &d)
	if d.From != r1 || d.To != rr.Revision || mustJSON(d.Changes) != `[{"key":"a","old":1,"new":2},{"key":"b","old":1},{"key":"c","new":3}]` {
		t.Errorf("diff: %s", mustJSON(d))
	}
	var v controlapi.NamespaceValues
	c.ok(http.StatusOK, "GET", nsPath(ns, "/values?at="+time.Now().UTC().Format(time.RFC3339Nano)), nil, &v)
	if v.Revision != rr.Revision || mustJSON(v.Values) != `{"a":2,"c":3}` {
		t.Errorf("values now: %s", mustJSON(v))
	}
	v = controlapi.NamespaceValues{}
	c.ok(http.StatusOK, "GET", nsPath(ns, "/values?revision="+itoa(rr.Revision-1)), nil, &v)
	if v.Revision != r1 || mustJSON(v.Values) != `{"a":1,"b":1}` {
		t.Errorf("values at %d: %s", rr.Revision-1, mustJSON(v))
	}
	c.fails(http.StatusNotFound, transport.CodeNotFound, "GET", nsPath(ns, "/values?revision="+itoa(rr.Revision+1000000)), nil)
	c.fails(http.StatusNotFound, transport.CodeNotFound, "GET", nsPath(ns, "/values?at=2000-01-01T00:00:00Z"), nil)
	c.fails(http.StatusNotFound, transport.CodeNotFound, "GET", nsPath(c.ns("none"), "/values?revision=1"), nil)
}

// testQueryRules: the query parameters the routes take, each once, the
// revisions at least 1, the limit at most 1000: anything else is 400.
func testQueryRules(t *testing.T, c *client) {
	ns := c.ns("q")
	c.publish(ns, map[string]any{"a": 1})
	for _, q := range []string{
		"/history?limit=0", "/history?limit=1001", "/history?limit=x", "/history?before=0", "/history?before=-1",
		"/history?limit=1&limit=2", "/history?typo=1",
		"/values", "/values?revision=0", "/values?revision=-1", "/values?revision=x", "/values?revision=1&at=2026-01-01T00:00:00Z",
		"/values?at=yesterday", "/values?revision=1&revision=2", "/values?revision=1&typo=1",
		"/diff?from=1", "/diff?to=1", "/diff?from=0&to=1", "/diff?from=1&to=0", "/diff?from=x&to=1", "/diff?from=1&to=1&typo=1",
		"/status?typo=1",
	} {
		c.fails(http.StatusBadRequest, transport.CodeBadRequest, "GET", nsPath(ns, q), nil)
	}
	c.fails(http.StatusBadRequest, transport.CodeBadRequest, "GET", nsPath("Bad_NS", "/history"), nil)
	c.fails(http.StatusBadRequest, transport.CodeBadRequest, "GET", "/control/clients?typo=1", nil)
}

// testStatus: a namespace's revision, the store's head and id; an
// unknown namespace is 404, said by its name.
func testStatus(t *testing.T, c *client) {
	ns := c.ns("st")
	rev := c.publish(ns, map[string]any{"a": 1})
	var st controlapi.NamespaceStatus
	c.ok(http.StatusOK, "GET", nsPath(ns, "/status"), nil, &st)
	if st.Namespace != ns || st.Revision != rev || st.Head < rev || st.StoreID == "" || st.Clients != 0 || st.Servers < 1 {
		t.Errorf("status: %s", mustJSON(st))
	}
	none := c.ns("none")
	for _, path := range []string{"/status", "/history"} {
		if eb := c.fails(http.StatusNotFound, transport.CodeNotFound, "GET", nsPath(none, path), nil); eb.Message != `namespace "`+none+`" not found` {
			t.Errorf("%s of an unknown namespace says %q", path, eb.Message)
		}
	}
}

// testClients: the store's head, the clients (none yet) and the server
// that answered.
func testClients(t *testing.T, c *client) {
	rev := c.publish(c.ns("cl"), map[string]any{"a": 1})
	var cl controlapi.Clients
	r := c.ok(http.StatusOK, "GET", "/control/clients", nil, &cl)
	if cl.Head < rev || cl.Server == "" || !strings.Contains(string(r.body), `"clients":[`) {
		t.Errorf("clients: %s", r.body)
	}
}

func itoa(n int64) string { return mustJSON(n) }

func mustJSON(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return string(b)
}

func jsonEqual(a, b []byte) bool {
	var x, y any
	return json.Unmarshal(a, &x) == nil && json.Unmarshal(b, &y) == nil && mustJSON(x) == mustJSON(y)
}
