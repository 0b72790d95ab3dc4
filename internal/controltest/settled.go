package controltest

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/holdfast-dev/holdfast/controlapi"
	"github.com/holdfast-dev/holdfast/transport"
)

// The cases below hold answers the two servers once gave differently:
// each is now one answer on both, and stays so.

// testAuditFields: an actor of up to 256 bytes and a reason of up to
// 4,096 are recorded; longer ones, or either with a control character
// (it would forge lines or columns where the audit is shown), are 400 on
// every write that records them, and nothing is written.
func testAuditFields(t *testing.T, c *client) {
	ns := c.ns("audit")
	rev := c.publish(ns, map[string]any{"a": 1})
	reason := strings.Repeat("r", 4096)
	var rr controlapi.RevisionReply
	c.ok(http.StatusOK, "POST", nsPath(ns, "/publish"), map[string]any{"puts": map[string]any{"a": 2}, "actor": strings.Repeat("a", 256), "reason": reason}, &rr)
	var h controlapi.History
	c.ok(http.StatusOK, "GET", nsPath(ns, "/history?limit=1"), nil, &h)
	if len(h.Revisions) != 1 || h.Revisions[0].Reason != reason {
		t.Errorf("a reason of 4096 bytes: recorded %d records, reason of %d bytes", len(h.Revisions), len(h.Revisions[0].Reason))
	}
	c.ok(http.StatusOK, "POST", nsPath(ns, "/rollback"), map[string]any{"to_revision": rev, "reason": reason}, &rr)
	head := rr.Revision

	type body = map[string]any
	bad := []struct {
		name          string
		actor, reason string
	}{
		{"reason over 4096 bytes", "", strings.Repeat("r", 4097)},
		{"actor over 256 bytes", strings.Repeat("a", 257), ""},
		{"reason with a newline", "", "line one\nforged line"},
		{"reason with an escape", "", "red \x1b[31m"},
		{"reason with a tab", "", "a\tb"},
		{"actor with a NUL", "a\x00b", ""},
		{"actor with a newline", "a\nb", ""},
	}
	for _, tc := range bad {
		t.Run(tc.name, func(t *testing.T) {
			c := c.on(t)
			c.fails(http.StatusBadRequest, transport.CodeBadRequest, "POST", nsPath(ns, "/publish"), body{"puts": body{"a": 3}, "actor": tc.actor, "reason": tc.reason})
			c.fails(http.StatusBadRequest, transport.CodeBadRequest, "POST", nsPath(ns, "/rollback"), body{"to_revision": rev, "actor": tc.actor, "reason": tc.reason})
			c.fails(http.StatusBadRequest, transport.CodeBadRequest, "POST", nsPath(ns, "/rollouts"), body{"puts": body{"a": 3}, "stages": []int{100}, "actor": tc.actor, "reason": tc.reason})
		})
	}
	var st controlapi.NamespaceStatus
	c.ok(http.StatusOK, "GET", nsPath(ns, "/status"), nil, &st)
	if st.Revision != head {
		t.Errorf("revision %d after refused writes, want %d", st.Revision, head)
	}
	var list controlapi.RolloutList
	c.ok(http.StatusOK, "GET", nsPath(ns, "/rollouts"), nil, &list)
	if len(list.Rollouts) != 0 {
		t.Errorf("refused rollouts started: %+v", list)
	}

	// An operator's abort or promotion is refused the same way, and the
	// rollout runs on.
	var started controlapi.RolloutStarted
	c.ok(http.StatusCreated, "POST", nsPath(ns, "/rollouts"), `{"puts":{"a":5},"stages":[100],"bake":"1h"}`, &started)
	for _, tc := range bad {
		for _, action := range []string{"/abort", "/promote"} {
			c.fails(http.StatusBadRequest, transport.CodeBadRequest, "POST", nsPath(ns, "/rollouts/"+started.ID+action), body{"actor": tc.actor, "reason": tc.reason})
		}
	}
	var rec controlapi.RolloutRecord
	c.ok(http.StatusOK, "GET", nsPath(ns, "/rollouts/"+started.ID), nil, &rec)
	if rec.State != controlapi.RolloutRunning {
		t.Errorf("a refused abort or promotion ended the rollout: %+v", rec)
	}
	c.ok(http.StatusOK, "POST", nsPath(ns, "/rollouts/"+started.ID+"/abort"), map[string]any{"reason": reason}, &rec)
}

// testSchemaBeforePublish: a schema set for a namespace without a
// revision is kept (read back, enforced), but does not create the
// namespace: it appears at its first publish.
func testSchemaBeforePublish(t *testing.T, c *client) {
	ns := c.ns("early")
	sch := `{"type":"object","properties":{"port":{"type":"integer"}},"required":["port"]}`
	c.ok(http.StatusNoContent, "PUT", nsPath(ns, "/schema"), sch, nil)
	r := c.ok(http.StatusOK, "GET", nsPath(ns, "/schema"), nil, nil)
	if !jsonEqual(r.body, []byte(sch)) {
		t.Errorf("schema read back: %s, want %s", r.body, sch)
	}
	c.fails(http.StatusNotFound, transport.CodeNotFound, "GET", nsPath(ns, "/status"), nil)
	c.fails(http.StatusNotFound, transport.CodeNotFound, "GET", nsPath(ns, "/history"), nil)
	c.fails(http.StatusNotFound, transport.CodeNotFound, "GET", nsPath(ns, "/values?revision=1"), nil)
	eb := c.fails(http.StatusUnprocessableEntity, transport.CodeSchemaViolation, "POST", nsPath(ns, "/publish"), `{"puts":{"port":"x"}}`)
	if len(eb.Details) == 0 {
		t.Errorf("a schema violation without details: %+v", eb)
	}
	c.fails(http.StatusNotFound, transport.CodeNotFound, "GET", nsPath(ns, "/status"), nil)
	rev := c.publish(ns, map[string]any{"port": 80})
	var st controlapi.NamespaceStatus
	c.ok(http.StatusOK, "GET", nsPath(ns, "/status"), nil, &st)
	if st.Revision != rev {
		t.Errorf("status after the first publish: %s", mustJSON(st))
	}
	// Dropped before any publish, the schema leaves nothing behind.
	other := c.ns("early")
	c.ok(http.StatusNoContent, "PUT", nsPath(other, "/schema"), sch, nil)
	c.ok(http.StatusNoContent, "DELETE", nsPath(other, "/schema"), nil, nil)
	c.fails(http.StatusNotFound, transport.CodeNotFound, "GET", nsPath(other, "/schema"), nil)
	c.fails(http.StatusNotFound, transport.CodeNotFound, "GET", nsPath(other, "/status"), nil)
}

// testRolloutNeedsBase: a rollout stages a change over a namespace's
// content, so a namespace without a revision (even one with a schema)
// is 404, and nothing starts or appears.
func testRolloutNeedsBase(t *testing.T, c *client) {
	spec := `{"puts":{"a":2},"stages":[100],"bake":"1h"}`
	ns := c.ns("nobase")
	c.fails(http.StatusNotFound, transport.CodeNotFound, "POST", nsPath(ns, "/rollouts"), spec)
	c.fails(http.StatusNotFound, transport.CodeNotFound, "GET", nsPath(ns, "/status"), nil)
	var list controlapi.RolloutList
	c.ok(http.StatusOK, "GET", nsPath(ns, "/rollouts"), nil, &list)
	if len(list.Rollouts) != 0 {
		t.Errorf("a refused rollout listed: %+v", list)
	}
	withSchema := c.ns("nobase")
	c.ok(http.StatusNoContent, "PUT", nsPath(withSchema, "/schema"), `{"type":"object"}`, nil)
	c.fails(http.StatusNotFound, transport.CodeNotFound, "POST", nsPath(withSchema, "/rollouts"), spec)
	c.fails(http.StatusNotFound, transport.CodeNotFound, "GET", nsPath(withSchema, "/status"), nil)
	// A bad spec is 400 before the namespace is looked at.
	c.fails(http.StatusBadRequest, transport.CodeBadRequest, "POST", nsPath(ns, "/rollouts"), `{"puts":{"a":2},"stages":[50]}`)
}

// testRolloutSchemaAtStart: a rollout whose change, over the namespace's
// content, fails its schema is refused at the start with 422 and the
// failures, as a publish is: nothing starts and nothing is committed.
func testRolloutSchemaAtStart(t *testing.T, c *client) {
	ns := c.ns("roschema")
	c.ok(http.StatusNoContent, "PUT", nsPath(ns, "/schema"), `{"type":"object","properties":{"a":{"type":"integer"}},"required":["a"]}`, nil)
	rev := c.publish(ns, map[string]any{"a": 1})
	for _, spec := range []string{
		`{"puts":{"a":"x"},"stages":[10,100],"bake":"1h"}`,
		`{"deletes":["a"],"stages":[100],"bake":"1h"}`,
	} {
		eb := c.fails(http.StatusUnprocessableEntity, transport.CodeSchemaViolation, "POST", nsPath(ns, "/rollouts"), spec)
		if len(eb.Details) == 0 {
			t.Errorf("%s: a schema violation without details: %+v", spec, eb)
		}
	}
	var list controlapi.RolloutList
	c.ok(http.StatusOK, "GET", nsPath(ns, "/rollouts"), nil, &list)
	if len(list.Rollouts) != 0 {
		t.Errorf("a rollout that fails the schema started: %+v", list)
	}
	var st controlapi.NamespaceStatus
	c.ok(http.StatusOK, "GET", nsPath(ns, "/status"), nil, &st)
	if st.Revision != rev {
		t.Errorf("revision %d after refused rollouts, want %d", st.Revision, rev)
	}
	// One that passes starts.
	c.ok(http.StatusCreated, "POST", nsPath(ns, "/rollouts"), `{"puts":{"a":2},"stages":[100],"bake":"1h"}`, nil)
}

// testRollbackCompacted: the one answer the servers may give differently,
// from their different history: a rollback to a revision below the
// compaction point. holdfast server answers it from its audit log, which
// keeps the values past compaction (200, that content as a new
// revision); the reference server keeps no values below it (410
// compacted, with the compaction point), even where the content it asks
// for is still live. Either way nothing else: never another content.
func testRollbackCompacted(t *testing.T, c *client) {
	for _, changed := range []bool{false, true} {
		ns := c.ns("rbcmp")
		r1 := c.publish(ns, map[string]any{"a": 1})
		if changed {
			c.publish(ns, map[string]any{"a": 2})
		} else {
			c.publish(c.ns("rbcmp-other"), map[string]any{"a": 1})
		}
		var cr controlapi.CompactReply
		c.ok(http.StatusOK, "POST", "/control/compact", ``, &cr)
		if cr.CompactRevision <= r1 {
			t.Fatalf("compacted to %d, want above %d", cr.CompactRevision, r1)
		}
		r := c.do("POST", nsPath(ns, "/rollback"), map[string]any{"to_revision": r1})
		t.Logf("content changed since %v: a rollback below the compaction point answers %d", changed, r.status)
		switch r.status {
		case http.StatusOK:
			var v controlapi.NamespaceValues
			c.ok(http.StatusOK, "GET", nsPath(ns, "/values?at="+time.Now().UTC().Format(time.RFC3339Nano)), nil, &v)
			if mustJSON(v.Values) != `{"a":1}` {
				t.Errorf("changed %v: content after a rollback below the compaction point: %s", changed, mustJSON(v.Values))
			}
		case http.StatusGone:
			eb := c.fails(http.StatusGone, transport.CodeCompacted, "POST", nsPath(ns, "/rollback"), map[string]any{"to_revision": r1})
			if eb.CompactRevision < cr.CompactRevision {
				t.Errorf("changed %v: compacted: %+v", changed, eb)
			}
		default:
			t.Errorf("changed %v: rollback below the compaction point: %d %s", changed, r.status, r.body)
		}
	}
}
