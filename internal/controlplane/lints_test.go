package controlplane

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"

	"github.com/holdfast-dev/holdfast/controlapi"
	"github.com/holdfast-dev/holdfast/transport"
)

// mapLints is a LintStore over a map, counting its reads.
type mapLints struct {
	LintStore
	lints map[string]controlapi.Lint
}

func (m *mapLints) Lints(context.Context) (map[string]controlapi.Lint, error) {
	return maps.Clone(m.lints), nil
}

// TestLintsForCaches: lintsFor returns the lints whose pattern matches,
// compiled once for as long as they are unchanged; one changed is
// compiled again, one deleted leaves the cache.
func TestLintsForCaches(t *testing.T) {
	ls := &mapLints{lints: map[string]controlapi.Lint{
		"b-bound": {Namespaces: "payments.*", Expr: `new["a"] < 10`, Severity: controlapi.LintBlock},
		"a-all":   {Namespaces: "*", Expr: `true`, Severity: controlapi.LintWarn},
		"other":   {Namespaces: "search.*", Expr: `true`, Severity: controlapi.LintWarn},
	}}
	h, err := New(Config{Store: statusStore{}, Lints: ls})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	first, err := h.lintsFor(ctx, "payments.prod")
	if err != nil || len(first) != 2 || first[0].Name() != "a-all" || first[1].Name() != "b-bound" {
		t.Fatalf("lintsFor: %v, %v", first, err)
	}
	again, _ := h.lintsFor(ctx, "payments.prod")
	if again[0] != first[0] || again[1] != first[1] {
		t.Fatal("an unchanged lint was compiled again")
	}
	ls.lints["b-bound"] = controlapi.Lint{Namespaces: "payments.*", Expr: `new["a"] < 20`, Severity: controlapi.LintBlock}
	delete(ls.lints, "other")
	changed, _ := h.lintsFor(ctx, "payments.prod")
	if changed[0] != first[0] || changed[1] == first[1] || changed[1].Spec().Expr != `new["a"] < 20` {
		t.Fatalf("after a change: %v", changed)
	}
	if n := len(h.lintCache.compiled); n != 2 {
		t.Fatalf("%d lints cached, want 2", n)
	}
	none, err := (&Handler{}).lintsFor(ctx, "payments.prod")
	if none != nil || err != nil {
		t.Fatalf("without a store: %v, %v", none, err)
	}
}

// BenchmarkLintsFor is the cost per request of finding the lints of a
// namespace once they are compiled: 10 lints with examples, each
// request reading them from the store.
func BenchmarkLintsFor(b *testing.B) {
	ls := &mapLints{lints: map[string]controlapi.Lint{}}
	for i := range 10 {
		ls.lints[fmt.Sprint("lint-", i)] = controlapi.Lint{Namespaces: "payments.*", Expr: fmt.Sprintf(`new["k%d"] < %d`, i, 100+i),
			Message: "k must stay below its bound", Severity: controlapi.LintBlock,
			Examples: controlapi.LintExamples{
				Pass: []controlapi.LintExample{{New: map[string]json.RawMessage{fmt.Sprint("k", i): json.RawMessage("1")}}},
				Fail: []controlapi.LintExample{{New: map[string]json.RawMessage{fmt.Sprint("k", i): json.RawMessage("1000")}}},
			}}
	}
	h, err := New(Config{Store: statusStore{}, Lints: ls})
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		if l, err := h.lintsFor(ctx, "payments.prod"); err != nil || len(l) != 10 {
			b.Fatal(len(l), err)
		}
	}
}

// historyStore has three revisions of one namespace, the oldest's values
// compacted away.
type historyStore struct{ Store }

func (historyStore) History(_ context.Context, ns string, limit int, _ int64) (*controlapi.History, error) {
	recs := []controlapi.AuditRecord{
		{Revision: 30, PrevRevision: 20, Puts: []string{"a"}},
		{Revision: 20, PrevRevision: 10, Puts: []string{"a"}},
		{Revision: 10, Puts: []string{"a"}},
	}
	return &controlapi.History{Namespace: ns, Revisions: recs[:min(limit, len(recs))]}, nil
}

func (historyStore) ValuesAt(_ context.Context, ns string, rev int64) (*controlapi.NamespaceValues, error) {
	if rev < 20 {
		return nil, &transport.CompactedError{CompactRevision: 15}
	}
	return &controlapi.NamespaceValues{Namespace: ns, Revision: rev,
		Values: map[string]json.RawMessage{"a": json.RawMessage(fmt.Sprint(rev))}}, nil
}

// TestLintTestCompacted: lint test runs over the revisions whose values
// the store still has, and says the history ended there.
func TestLintTestCompacted(t *testing.T) {
	h, err := New(Config{Store: historyStore{}, Lints: &mapLints{}})
	if err != nil {
		t.Fatal(err)
	}
	body := `{"namespaces": "*", "expr": "new[\"a\"] < 25", "severity": "block"}`
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest("POST", "/control/lints/l/test?ns=app", strings.NewReader(body)))
	var res controlapi.LintTestResult
	if err := json.Unmarshal(rec.Body.Bytes(), &res); err != nil || rec.Code != http.StatusOK {
		t.Fatalf("%d %s", rec.Code, rec.Body)
	}
	if !slices.Equal(res.WouldBlock, []int64{30}) || res.Checked != 1 || !res.Truncated {
		t.Fatalf("got %+v, want would_block [30] of 1 checked, truncated", res)
	}
}
