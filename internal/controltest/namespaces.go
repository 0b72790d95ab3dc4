package controltest

import (
	"net/http"
	"net/url"
	"testing"

	"github.com/holdfast-dev/holdfast/controlapi"
	"github.com/holdfast-dev/holdfast/transport"
)

// testNamespaces: GET /control/namespaces lists the namespaces by name,
// each with its revision and last change, filtered by prefix, a page at
// a time (next, then after=next); a rollback is a last change too; a
// scoped token sees the namespaces it controls alone, a token without
// control scope none.
func testNamespaces(t *testing.T, c *client) {
	base := c.ns("nsl")
	a, b, z := base+".a", base+".b", base+".z"
	c.publish(b, map[string]any{"k": 1})
	ra := c.publish(a, map[string]any{"k": 1})
	rb := c.publish(b, map[string]any{"k": 2})
	var rz controlapi.RevisionReply
	c.ok(http.StatusOK, "POST", nsPath(z, "/publish"), map[string]any{"puts": map[string]any{"k": 1}, "actor": "alice", "reason": "CHG-1"}, &rz)

	list := func(c *client, query string) controlapi.Namespaces {
		t.Helper()
		var page controlapi.Namespaces
		c.ok(http.StatusOK, "GET", "/control/namespaces?"+query, nil, &page)
		return page
	}
	names := func(page controlapi.Namespaces) []string {
		var out []string
		for _, n := range page.Namespaces {
			out = append(out, n.Namespace)
		}
		return out
	}
	prefix := "prefix=" + url.QueryEscape(base+".")
	page := list(c, prefix)
	if mustJSON(names(page)) != mustJSON([]string{a, b, z}) || page.Next != "" {
		t.Fatalf("namespaces: %s", mustJSON(page))
	}
	want := map[string]int64{a: ra, b: rb, z: rz.Revision}
	for _, n := range page.Namespaces {
		if n.Revision != want[n.Namespace] || n.CommittedAt.IsZero() || n.Kind != "publish" || n.LiveClients != 0 {
			t.Errorf("namespace %s: %s, want revision %d", n.Namespace, mustJSON(n), want[n.Namespace])
		}
	}
	if last := page.Namespaces[2]; last.Reason != "CHG-1" || last.Actor == "" {
		t.Errorf("the last change of %s: %s", z, mustJSON(last))
	}

	page = list(c, prefix+"&limit=2")
	if mustJSON(names(page)) != mustJSON([]string{a, b}) || page.Next != b {
		t.Fatalf("first page: %s", mustJSON(page))
	}
	page = list(c, prefix+"&limit=2&after="+url.QueryEscape(page.Next))
	if mustJSON(names(page)) != mustJSON([]string{z}) || page.Next != "" {
		t.Fatalf("second page: %s", mustJSON(page))
	}
	if page = list(c, "prefix="+url.QueryEscape(base+".q")); len(page.Namespaces) != 0 || page.Next != "" {
		t.Errorf("a prefix of no namespace: %s", mustJSON(page))
	}

	var rr controlapi.RevisionReply
	c.ok(http.StatusOK, "POST", nsPath(a, "/rollback"), map[string]any{"to_revision": ra, "reason": "undo"}, &rr)
	page = list(c, "prefix="+url.QueryEscape(a))
	if len(page.Namespaces) != 1 || page.Namespaces[0].Revision != rr.Revision || page.Namespaces[0].Kind != "rollback" || page.Namespaces[0].Reason != "undo" {
		t.Errorf("after a rollback: %s", mustJSON(page))
	}

	for _, q := range []string{"limit=0", "limit=1001", "limit=x", "typo=1", "limit=1&limit=2"} {
		c.fails(http.StatusBadRequest, transport.CodeBadRequest, "GET", "/control/namespaces?"+q, nil)
	}

	tok := c.srv.Tokens
	if tok == nil {
		return
	}
	scoped := c.ns("scoped")
	s := c.as(tok.Scoped)
	s.publish(scoped, map[string]any{"a": 1})
	if page := list(s, prefix); len(page.Namespaces) != 0 {
		t.Errorf("a scoped token lists namespaces it does not control: %s", mustJSON(page))
	}
	if page := list(s, "prefix="+url.QueryEscape(scoped)); mustJSON(names(page)) != mustJSON([]string{scoped}) {
		t.Errorf("a scoped token's own namespace: %s", mustJSON(page))
	}
	c.as(tok.Data).fails(http.StatusForbidden, transport.CodeForbidden, "GET", "/control/namespaces", nil)
	c.as("").fails(http.StatusUnauthorized, transport.CodeUnauthorized, "GET", "/control/namespaces", nil)
}
