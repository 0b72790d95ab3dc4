package controltest

import (
	"encoding/json"
	"net/http"
	"slices"
	"testing"

	"github.com/holdfast-dev/holdfast/controlapi"
	"github.com/holdfast-dev/holdfast/transport"
)

// testLints: without a lint store every lint route is 404; with one, an
// admin sets, reads, lists and deletes a lint; a malformed expression is
// 400, failing examples and a costly expression 422 with their codes;
// testing a lint (saved, or unsaved in the body) over a namespace's
// history lists the revisions it would have blocked.
func testLints(t *testing.T, c *client) {
	if c.do("GET", "/control/lints", nil).status == http.StatusNotFound {
		for _, rt := range []struct{ method, path, body string }{
			{"PUT", "/control/lints/x", `{}`}, {"GET", "/control/lints/x", ""},
			{"DELETE", "/control/lints/x", ""}, {"POST", "/control/lints/x/test?ns=a", ""},
		} {
			c.fails(http.StatusNotFound, transport.CodeNotFound, rt.method, rt.path, rt.body)
		}
		return
	}
	admin := c
	if tok := c.srv.Tokens; tok != nil {
		if tok.Admin == "" {
			t.Skip("the server requires tokens, and the suite has no admin token to set lints with")
		}
		admin = c.as(tok.Admin)
	}
	ns := c.ns("lint")
	name := "ct-" + ns
	path := "/control/lints/" + name
	// The history first: the lint, once saved, may stop such publishes.
	c.publish(ns, map[string]any{"retry-timeout-ms": 100, "circuit-breaker-budget-ms": 500})
	bad := c.publish(ns, map[string]any{"retry-timeout-ms": 900})
	c.publish(ns, map[string]any{"retry-timeout-ms": 200.5})

	spec := controlapi.Lint{Namespaces: ns, Expr: `new["retry-timeout-ms"] < new["circuit-breaker-budget-ms"]`,
		Message: "retry-timeout-ms must stay below circuit-breaker-budget-ms", Severity: controlapi.LintBlock,
		Examples: controlapi.LintExamples{
			Pass: []controlapi.LintExample{{New: raw(`{"retry-timeout-ms": 50, "circuit-breaker-budget-ms": 500}`)}},
			Fail: []controlapi.LintExample{{Old: raw(`{"retry-timeout-ms": 50}`), New: raw(`{"retry-timeout-ms": 600, "circuit-breaker-budget-ms": 500}`)}},
		}}
	var res controlapi.LintTestResult
	c.ok(http.StatusOK, "POST", path+"/test?ns="+ns, spec, &res)
	if !slices.Equal(res.WouldBlock, []int64{bad}) || res.Checked != 3 {
		t.Errorf("an unsaved lint's test: %+v, want would_block [%d] of 3", res, bad)
	}
	c.fails(http.StatusNotFound, transport.CodeNotFound, "POST", path+"/test?ns="+ns, nil)
	c.fails(http.StatusNotFound, transport.CodeNotFound, "POST", path+"/test?ns="+c.ns("lint-none"), spec)

	var info controlapi.LintInfo
	admin.ok(http.StatusOK, "PUT", path, spec, &info)
	if info.Name != name || info.Expr != spec.Expr {
		t.Errorf("set: %+v", info)
	}
	c.ok(http.StatusOK, "GET", path, nil, &info)
	if info.Name != name || info.Namespaces != ns || info.Severity != controlapi.LintBlock || len(info.Examples.Fail) != 1 {
		t.Errorf("get: %+v", info)
	}
	var list controlapi.LintList
	c.ok(http.StatusOK, "GET", "/control/lints", nil, &list)
	if !slices.ContainsFunc(list.Lints, func(l controlapi.LintInfo) bool { return l.Name == name }) {
		t.Errorf("list: %+v", list)
	}
	c.ok(http.StatusOK, "POST", path+"/test?ns="+ns, nil, &res)
	if !slices.Equal(res.WouldBlock, []int64{bad}) || res.Checked != 3 || len(res.Results) != 1 || res.Results[0].Message != spec.Message {
		t.Errorf("the saved lint's test: %+v, want would_block [%d] of 3", res, bad)
	}
	c.ok(http.StatusOK, "POST", path+"/test?ns="+ns+"&limit=1", "", &res)
	if len(res.WouldBlock) != 0 || res.Checked != 1 {
		t.Errorf("limit=1: %+v", res)
	}
	warn := spec
	warn.Severity = controlapi.LintWarn
	c.ok(http.StatusOK, "POST", path+"/test?ns="+ns, warn, &res)
	if len(res.WouldBlock) != 0 || !slices.Equal(res.WouldWarn, []int64{bad}) {
		t.Errorf("a warn lint's test: %+v", res)
	}

	// Bad input changes nothing.
	for _, body := range []string{
		`{"namespaces": "x.*", "expr": "new[", "severity": "block"}`,
		`{"namespaces": "x.*", "expr": "1 + 1", "severity": "block"}`,
		`{"namespaces": "x.*", "expr": "true", "severity": "fatal"}`,
		`{"namespaces": "x.[", "expr": "true", "severity": "warn"}`,
		`{"namespaces": "x.*", "expr": "true", "severity": "warn", "unknown": 1}`,
	} {
		admin.fails(http.StatusBadRequest, transport.CodeBadRequest, "PUT", path, body)
	}
	failing := spec
	failing.Examples.Pass = append(failing.Examples.Pass, controlapi.LintExample{New: raw(`{"retry-timeout-ms": 900, "circuit-breaker-budget-ms": 500}`)})
	if eb := admin.fails(http.StatusUnprocessableEntity, controlapi.CodeLintExamplesFailed, "PUT", path, failing); len(eb.Details) != 1 {
		t.Errorf("examples failed: details %q, want the one example", eb.Details)
	}
	c.fails(http.StatusUnprocessableEntity, controlapi.CodeLintExamplesFailed, "POST", path+"/test?ns="+ns, failing)
	admin.fails(http.StatusUnprocessableEntity, controlapi.CodeLintTooCostly, "PUT", path,
		`{"namespaces": "x.*", "expr": "new.all(k, new.all(j, k == j || new[k] != new[j]))", "severity": "block"}`)
	c.ok(http.StatusOK, "GET", path, nil, &info)
	if info.Expr != spec.Expr || len(info.Examples.Pass) != 1 {
		t.Errorf("refused sets changed the lint: %+v", info)
	}
	admin.fails(http.StatusBadRequest, transport.CodeBadRequest, "PUT", "/control/lints/.hidden", spec)
	c.fails(http.StatusBadRequest, transport.CodeBadRequest, "POST", path+"/test", nil)
	c.fails(http.StatusBadRequest, transport.CodeBadRequest, "POST", path+"/test?ns="+ns+"&limit=0", nil)
	c.fails(http.StatusBadRequest, transport.CodeBadRequest, "POST", path+"/test?ns="+ns+"&since=1", nil)

	if tok := c.srv.Tokens; tok != nil {
		c.fails(http.StatusForbidden, transport.CodeForbidden, "PUT", path, spec)
		c.fails(http.StatusForbidden, transport.CodeForbidden, "DELETE", path, nil)
		c.as(tok.Data).fails(http.StatusForbidden, transport.CodeForbidden, "GET", "/control/lints", nil)
		c.as(tok.Scoped).ok(http.StatusOK, "GET", path, nil, &info)
		c.as(tok.Scoped).fails(http.StatusForbidden, transport.CodeForbidden, "POST", path+"/test?ns="+ns, nil)
	}

	admin.ok(http.StatusNoContent, "DELETE", path, nil, nil)
	c.fails(http.StatusNotFound, transport.CodeNotFound, "GET", path, nil)
	admin.fails(http.StatusNotFound, transport.CodeNotFound, "DELETE", path, nil)
}

// raw is a JSON object's text as a namespace's values.
func raw(obj string) map[string]json.RawMessage {
	var m map[string]json.RawMessage
	if err := json.Unmarshal([]byte(obj), &m); err != nil {
		panic(err)
	}
	return m
}
