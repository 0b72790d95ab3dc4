package lint

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"

	"github.com/holdfast-dev/holdfast/controlapi"
)

// BenchmarkTenLints runs 10 lints, as a proposal does, over a change of a
// namespace of 500 keys: the figure is the checks together.
func BenchmarkTenLints(b *testing.B) {
	old := make(map[string]json.RawMessage, 500)
	for i := range 500 {
		old[fmt.Sprintf("key-%03d", i)] = json.RawMessage(fmt.Sprintf(`{"limit": %d, "name": "value %d", "ratio": 0.%d}`, i, i, i))
	}
	old["retry-timeout-ms"] = json.RawMessage("200")
	old["circuit-breaker-budget-ms"] = json.RawMessage("1000")
	old["pool-size"] = json.RawMessage("16")
	new := make(map[string]json.RawMessage, len(old))
	for k, v := range old {
		new[k] = v
	}
	new["retry-timeout-ms"] = json.RawMessage("50")
	in := Input{Namespace: "payments.prod", Old: old, New: new, Puts: []string{"retry-timeout-ms"}}
	exprs := []string{
		`new["retry-timeout-ms"] < new["circuit-breaker-budget-ms"]`,
		`!("pool-size" in change.puts) || (new["pool-size"] >= 8 && new["pool-size"] <= 64)`,
		`!("payments-enabled" in change.puts) && !("payments-enabled" in change.deletes)`,
		`new["retry-timeout-ms"] <= old["retry-timeout-ms"] * 2`,
		`change.puts.all(k, k in old)`,
		`change.deletes.size() < 10`,
		`new.all(k, new[k] != null)`,
		`new.all(k, k.size() < 64)`,
		`new["key-042"]["limit"] < 1000 && new["key-042"]["ratio"] < 1`,
		`size(new) >= size(old) - 5`,
	}
	lints := make([]*Lint, len(exprs))
	for i, e := range exprs {
		l, err := Compile(fmt.Sprint("l", i), controlapi.Lint{Namespaces: "payments.*", Expr: e, Severity: controlapi.LintBlock})
		if err != nil {
			b.Fatalf("%s: %v", e, err)
		}
		lints[i] = l
	}
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		for _, l := range lints {
			if c := l.Eval(ctx, in); c.Result != controlapi.CheckPass {
				b.Fatalf("%s: %+v", l.Name(), c)
			}
		}
	}
}

// BenchmarkCutOff is a lint that runs into the cost limit: how long a
// lint can hold a request before it is stopped.
func BenchmarkCutOff(b *testing.B) {
	// Compiled past the estimate, as no saved lint is, to reach the run's
	// limit.
	l, err := compile("pairs", controlapi.Lint{Namespaces: "*", Expr: `new.all(k, new.all(j, k == j || new[k] != new[j]))`, Severity: controlapi.LintBlock}, ^uint64(0), CostLimit)
	if err != nil {
		b.Fatal(err)
	}
	new := make(map[string]json.RawMessage, 2000)
	for i := range 2000 {
		new[fmt.Sprintf("key-%04d", i)] = json.RawMessage(fmt.Sprint(i))
	}
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		if c := l.Eval(ctx, Input{New: new}); c.Result != controlapi.CheckBlock {
			b.Fatalf("%+v", c)
		}
	}
}
