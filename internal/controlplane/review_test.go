package controlplane

import (
	"encoding/json"
	"testing"

	"github.com/holdfast-dev/holdfast/controlapi"
)

func TestSemanticDiff(t *testing.T) {
	raw := func(s string) json.RawMessage { return json.RawMessage(s) }
	old := map[string]json.RawMessage{"retry": raw("200"), "mode": raw(`"a"`), "ratio": raw("1"), "same": raw(`{"a": 1}`), "gone": raw("true")}
	puts := map[string]json.RawMessage{"retry": raw("50"), "mode": raw("1"), "ratio": raw("1.5"), "same": raw(`{"a":1}`), "new": raw("null")}
	got := map[string]controlapi.DiffEntry{}
	for _, d := range semanticDiff("ns", old, puts, []string{"gone", "absent"}) {
		got[d.Key] = d
	}
	for key, want := range map[string]string{
		"retry": controlapi.DiffChanged, "mode": controlapi.DiffTypeChanged, "ratio": controlapi.DiffTypeChanged,
		"same": controlapi.DiffUnchanged, "new": controlapi.DiffAdded, "gone": controlapi.DiffRemoved, "absent": controlapi.DiffRemoved,
	} {
		if got[key].Kind != want {
			t.Errorf("%s: %+v, want %s", key, got[key], want)
		}
	}
	if d := got["mode"]; d.OldType != "string" || d.NewType != "integer" || string(d.Old) != `"a"` {
		t.Errorf("mode: %+v", d)
	}
	if d := got["ratio"]; d.OldType != "integer" || d.NewType != "number" {
		t.Errorf("ratio: %+v", d)
	}
	if d := got["gone"]; d.Op != controlapi.OpDelete || string(d.Old) != "true" {
		t.Errorf("gone: %+v", d)
	}
}

func TestVersions(t *testing.T) {
	for _, tc := range []struct {
		a, b string
		cmp  int
	}{{"0.5.0", "0.4.9", 1}, {"v0.5.0", "0.5", 0}, {"0.5.0-rc.1", "0.5.0", 0}, {"1.0.0", "0.99.99", 1}, {"0.4.0", "0.5.0", -1}} {
		a, okA := parseVersion(tc.a)
		b, okB := parseVersion(tc.b)
		if !okA || !okB {
			t.Fatalf("%q, %q: not versions", tc.a, tc.b)
		}
		if c := compareVersions(a, b); c > 0 != (tc.cmp > 0) || c < 0 != (tc.cmp < 0) {
			t.Errorf("compare(%s, %s) = %d, want sign %d", tc.a, tc.b, c, tc.cmp)
		}
	}
	for _, bad := range []string{"", "x", "1.2.3.4", "1.-2"} {
		if _, ok := parseVersion(bad); ok {
			t.Errorf("%q read as a version", bad)
		}
	}
}

func TestChangeHash(t *testing.T) {
	c := controlapi.Change{Namespaces: map[string]controlapi.NamespaceChange{"a": {BaseRevision: 4, Puts: map[string]json.RawMessage{"k": json.RawMessage("1")}}},
		Checks: []controlapi.Check{{Name: "schema", Kind: controlapi.CheckSchema, Result: controlapi.CheckPass}}}
	h := changeHash(&c)
	c.Checks = append(c.Checks, controlapi.Check{Name: "min_sdk_version", Kind: controlapi.CheckMinSDK, Result: controlapi.CheckBlock})
	if changeHash(&c) != h {
		t.Error("the SDK gate's check moved the hash: approvals would not survive a client's report")
	}
	c.Namespaces["a"] = controlapi.NamespaceChange{BaseRevision: 5, Puts: c.Namespaces["a"].Puts}
	if changeHash(&c) == h {
		t.Error("a new base revision kept the hash: a rebase would not void approvals")
	}
}
