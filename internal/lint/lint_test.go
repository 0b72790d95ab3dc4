package lint

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/holdfast-dev/holdfast/controlapi"
)

// vals builds a namespace's values from key, JSON text pairs.
func vals(kv ...string) map[string]json.RawMessage {
	m := make(map[string]json.RawMessage, len(kv)/2)
	for i := 0; i+1 < len(kv); i += 2 {
		m[kv[i]] = json.RawMessage(kv[i+1])
	}
	return m
}

func spec(expr string) controlapi.Lint {
	return controlapi.Lint{Namespaces: "*", Expr: expr, Message: "it fails", Severity: controlapi.LintBlock}
}

func TestEval(t *testing.T) {
	for _, tc := range []struct {
		name, expr string
		old, new   map[string]json.RawMessage
		puts, dels []string
		want       string // pass, block, or "error" for a failed evaluation
	}{
		{"cross-key bound holds", `new["retry-timeout-ms"] < new["circuit-breaker-budget-ms"]`,
			nil, vals("retry-timeout-ms", "200", "circuit-breaker-budget-ms", "500"), nil, nil, "pass"},
		{"cross-key bound broken", `new["retry-timeout-ms"] < new["circuit-breaker-budget-ms"]`,
			nil, vals("retry-timeout-ms", "900", "circuit-breaker-budget-ms", "500"), nil, nil, "block"},
		{"int against double literal", `new["x"] < 100`, nil, vals("x", "99.5"), nil, nil, "pass"},
		{"integral double is an int", `new["x"] == 100 && type(new["x"]) == int`, nil, vals("x", "100.0"), nil, nil, "pass"},
		{"exponent is an int", `new["x"] == 1000`, nil, vals("x", "1e3"), nil, nil, "pass"},
		{"double against int", `new["x"] > 1.5`, nil, vals("x", "2"), nil, nil, "pass"},
		{"int against double key", `new["a"] < new["b"]`, nil, vals("a", "1", "b", "1.5"), nil, nil, "pass"},
		{"huge number is a double", `new["x"] > 1e300`, nil, vals("x", "1e301"), nil, nil, "pass"},
		{"missing key", `new["nope"] < 1`, nil, vals("x", "1"), nil, nil, "error"},
		{"missing key guarded", `!("nope" in new) || new["nope"] < 1`, nil, vals("x", "1"), nil, nil, "pass"},
		{"has macro", `!has(new.nope)`, nil, vals("x", "1"), nil, nil, "pass"},
		{"has macro, present", `has(new.x) && new.x == 1`, nil, vals("x", "1"), nil, nil, "pass"},
		{"old nil", `size(old) == 0`, nil, vals("x", "1"), nil, nil, "pass"},
		{"range tested", `!("pool-size" in change.puts) || (new["pool-size"] >= 8 && new["pool-size"] <= 64)`,
			vals("pool-size", "16"), vals("pool-size", "128"), []string{"pool-size"}, nil, "block"},
		{"needs re-approval", `!("payments-enabled" in change.puts) && !("payments-enabled" in change.deletes)`,
			vals("payments-enabled", "true"), vals(), nil, []string{"payments-enabled"}, "block"},
		{"old against new", `new["x"] <= old["x"] * 2`, vals("x", "10"), vals("x", "25"), []string{"x"}, nil, "block"},
		{"nested object", `new["db"]["pool"]["max"] > new["db"]["pool"]["min"]`, nil,
			vals("db", `{"pool": {"min": 2, "max": 10}}`), nil, nil, "pass"},
		{"list", `new["regions"].exists(r, r == "eu")`, nil, vals("regions", `["us", "eu"]`), nil, nil, "pass"},
		{"strings", `new["mode"].startsWith("safe")`, nil, vals("mode", `"safe-1"`), nil, nil, "pass"},
		{"null", `new["x"] == null`, nil, vals("x", "null"), nil, nil, "pass"},
		{"all keys", `new.all(k, k.size() < 10)`, nil, vals("a", "1", "bbbbbbbbbbbb", "2"), nil, nil, "block"},
		{"map equality", `old == new`, vals("a", "1"), vals("a", "1.0"), nil, nil, "pass"},
		{"dyn not bool", `new["x"]`, nil, vals("x", "1"), nil, nil, "error"},
		{"type mismatch", `new["x"] < "a"`, nil, vals("x", "1"), nil, nil, "error"},
		{"bad JSON value", `new["x"] == 1`, nil, vals("x", "{"), nil, nil, "error"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l, err := Compile("l", spec(tc.expr))
			if err != nil {
				t.Fatalf("Compile: %v", err)
			}
			c := l.Eval(context.Background(), Input{Namespace: "payments.prod", Old: tc.old, New: tc.new, Puts: tc.puts, Deletes: tc.dels})
			got := c.Result
			if strings.HasPrefix(c.Message, "error: ") {
				got = "error"
			}
			if got != tc.want {
				t.Fatalf("got %s (%q), want %s", got, c.Message, tc.want)
			}
			if c.Kind != controlapi.CheckLint || c.Name != "l" || c.Namespace != "payments.prod" {
				t.Fatalf("check %+v", c)
			}
			if got == "block" && !strings.HasPrefix(c.Message, "it fails") {
				t.Fatalf("message %q", c.Message)
			}
			if got == "error" && c.Result != controlapi.CheckBlock {
				t.Fatalf("an error counts at the lint's severity, got %s", c.Result)
			}
		})
	}
}

func TestWarnSeverity(t *testing.T) {
	s := spec(`new["x"] < 1`)
	s.Severity = controlapi.LintWarn
	s.Link = "https://incidents.example/42"
	l, err := Compile("w", s)
	if err != nil {
		t.Fatal(err)
	}
	c := l.Eval(context.Background(), Input{New: vals("x", "2")})
	if c.Result != controlapi.CheckWarn || c.Link != s.Link {
		t.Fatalf("got %+v", c)
	}
	c = l.Eval(context.Background(), Input{New: vals()})
	if c.Result != controlapi.CheckWarn || !strings.HasPrefix(c.Message, "error: ") {
		t.Fatalf("missing key: got %+v", c)
	}
}

func TestCompileRefuses(t *testing.T) {
	for _, tc := range []struct {
		name string
		spec controlapi.Lint
		want error
	}{
		{"syntax", spec(`new["x"] <`), ErrInvalid},
		{"unknown variable", spec(`newer["x"] < 1`), ErrInvalid},
		{"not a bool", spec(`1 + 2`), ErrInvalid},
		{"string", spec(`"yes"`), ErrInvalid},
		{"empty expr", spec(``), ErrInvalid},
		{"long expr", spec(strings.Repeat("true && ", MaxExprBytes/8) + "true"), ErrInvalid},
		{"severity", controlapi.Lint{Namespaces: "*", Expr: "true", Severity: "error"}, ErrInvalid},
		{"no pattern", controlapi.Lint{Expr: "true", Severity: controlapi.LintWarn}, ErrInvalid},
		{"bad pattern", controlapi.Lint{Namespaces: "payments.[", Expr: "true", Severity: controlapi.LintWarn}, ErrInvalid},
		{"nested comprehension", spec(`new.all(k, new.all(j, k == j || new[k] != new[j]))`), ErrTooCostly},
		{"each value's list", spec(`new.all(k, new[k].exists(x, x > 1))`), ErrTooCostly},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Compile("l", tc.spec)
			if !errors.Is(err, tc.want) {
				t.Fatalf("got %v, want %v", err, tc.want)
			}
		})
	}
}

func TestCompileAccepts(t *testing.T) {
	for _, expr := range []string{
		`new.all(k, new[k] != null)`,
		`change.puts.all(k, k in old)`,
		`new["a"].matches("^x+$")`,
		`true`,
	} {
		if _, err := Compile("l", spec(expr)); err != nil {
			t.Errorf("%s: %v", expr, err)
		}
	}
}

func TestApplies(t *testing.T) {
	s := spec("true")
	s.Namespaces = "payments.*"
	l, err := Compile("l", s)
	if err != nil {
		t.Fatal(err)
	}
	for ns, want := range map[string]bool{"payments.prod": true, "payments.": true, "payments": false, "search.prod": false} {
		if got := l.Applies(ns); got != want {
			t.Errorf("Applies(%q) = %v, want %v", ns, got, want)
		}
	}
	if l.Name() != "l" || l.Spec().Expr != "true" {
		t.Fatalf("Name/Spec: %q %+v", l.Name(), l.Spec())
	}
}

func TestExamples(t *testing.T) {
	s := spec(`new["retry-timeout-ms"] < new["circuit-breaker-budget-ms"]`)
	s.Examples = controlapi.LintExamples{
		Pass: []controlapi.LintExample{{New: vals("retry-timeout-ms", "50", "circuit-breaker-budget-ms", "500")}},
		Fail: []controlapi.LintExample{{Old: vals("retry-timeout-ms", "50"), New: vals("retry-timeout-ms", "600", "circuit-breaker-budget-ms", "500")}},
	}
	if _, err := Compile("l", s); err != nil {
		t.Fatalf("good examples: %v", err)
	}
	s.Examples.Pass = append(s.Examples.Pass, controlapi.LintExample{New: vals("retry-timeout-ms", "900", "circuit-breaker-budget-ms", "500")})
	s.Examples.Fail = append(s.Examples.Fail,
		controlapi.LintExample{New: vals("retry-timeout-ms", "1", "circuit-breaker-budget-ms", "500")},
		controlapi.LintExample{New: vals("retry-timeout-ms", "1")}) // an error is not a fail
	_, err := Compile("l", s)
	var ee *ExamplesError
	if !errors.As(err, &ee) {
		t.Fatalf("got %v, want an *ExamplesError", err)
	}
	want := []string{"pass example 2: the lint fails it", "fail example 2: the lint passes it", "fail example 3: "}
	if len(ee.Failures) != len(want) {
		t.Fatalf("failures %q, want %q", ee.Failures, want)
	}
	for i := range want {
		if !strings.HasPrefix(ee.Failures[i], want[i]) {
			t.Errorf("failure %d: %q, want %q...", i, ee.Failures[i], want[i])
		}
	}
}

func TestExampleChange(t *testing.T) {
	s := spec(`change.puts == ["b"] && change.deletes == ["c"]`)
	s.Examples.Pass = []controlapi.LintExample{{Old: vals("a", "1", "b", "1", "c", "1"), New: vals("a", "1.0", "b", "2")}}
	if _, err := Compile("l", s); err != nil {
		t.Fatal(err)
	}
}

func TestRunCostLimit(t *testing.T) {
	// The run's limit, reached by a comprehension the estimate allows.
	l, err := compile("l", spec(`new.all(k, new[k] != null)`), CostLimit, 100)
	if err != nil {
		t.Fatal(err)
	}
	big := map[string]json.RawMessage{}
	for i := range 1000 {
		big[fmt.Sprintf("k%04d", i)] = json.RawMessage("1")
	}
	c := l.Eval(context.Background(), Input{New: big})
	if c.Result != controlapi.CheckBlock || !strings.Contains(c.Message, "cost limit") {
		t.Fatalf("got %+v", c)
	}
}

func TestEvalCanceled(t *testing.T) {
	l, err := Compile("l", spec(`new.all(k, new[k] != null)`))
	if err != nil {
		t.Fatal(err)
	}
	big := map[string]json.RawMessage{}
	for i := range 1000 {
		big[fmt.Sprintf("k%04d", i)] = json.RawMessage("1")
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	c := l.Eval(ctx, Input{New: big})
	if c.Result != controlapi.CheckBlock || !strings.HasPrefix(c.Message, "error: ") {
		t.Fatalf("got %+v", c)
	}
}

func TestFailMessageNamesKeys(t *testing.T) {
	for _, tc := range []struct{ expr, message, want string }{
		{`new["retry-timeout-ms"] < new["circuit-breaker-budget-ms"]`, "retry too long",
			"retry too long (keys: circuit-breaker-budget-ms, retry-timeout-ms)"},
		{`new["retry-timeout-ms"] < new["circuit-breaker-budget-ms"]`, "retry-timeout-ms must stay below circuit-breaker-budget-ms",
			"retry-timeout-ms must stay below circuit-breaker-budget-ms"},
		{`new.pool <= 5`, "", "lint l fails (keys: pool)"},
		{`!has(new.debug) && !("trace" in new) && !("gone" in change.deletes)`, "quiet please", "quiet please (keys: debug, gone, trace)"},
		{`new.all(k, new[k] != null) && size(old) > 0`, "all set", "all set"},
	} {
		s := spec(tc.expr)
		s.Message = tc.message
		l, err := Compile("l", s)
		if err != nil {
			t.Fatalf("%s: %v", tc.expr, err)
		}
		c := l.Eval(context.Background(), Input{New: vals("retry-timeout-ms", "1", "circuit-breaker-budget-ms", "0", "pool", "9", "debug", "1")})
		if c.Message != tc.want {
			t.Errorf("%s: message %q, want %q", tc.expr, c.Message, tc.want)
		}
	}
}
