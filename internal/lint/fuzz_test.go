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

// FuzzCompileEval compiles arbitrary expressions and runs them over
// arbitrary JSON: Compile refuses with one of its errors or compiles, and
// Eval always answers a check, never panics.
func FuzzCompileEval(f *testing.F) {
	for _, seed := range []struct{ expr, old, new string }{
		{`new["a"] < new["b"]`, `{"a": 1}`, `{"a": 1, "b": 2.5}`},
		{`new.all(k, new[k] != null)`, `{}`, `{"a": null, "b": [1, {"c": "d"}]}`},
		{`change.puts.all(k, k in old)`, `{"a": "x"}`, `{"a": "y"}`},
		{`new["a"].matches("^x+$")`, `{}`, `{"a": "xxx"}`},
		{`new["a"]["b"][0] > 1e10`, `{}`, `{"a": {"b": [1e400]}}`},
		{`size(old) <= size(new)`, `null`, `{"a": -0}`},
		{`new[`, `{}`, `{}`},
		{`new.all(k, new.all(j, k == j))`, `{}`, `{"a": 1}`},
		{`"x" + new["a"] == "xy"`, `{}`, `{"a": "y"}`},
		{`int(new["a"]) / 0 == 1`, `{}`, `{"a": 9223372036854775807}`},
	} {
		f.Add(seed.expr, seed.old, seed.new)
	}
	f.Fuzz(func(t *testing.T, expr, oldJSON, newJSON string) {
		l, err := Compile("f", controlapi.Lint{Namespaces: "*", Expr: expr, Severity: controlapi.LintWarn, Message: "m"})
		if err != nil {
			var ee *ExamplesError
			if !errors.Is(err, ErrInvalid) && !errors.Is(err, ErrTooCostly) && !errors.As(err, &ee) {
				t.Fatalf("Compile: an error of no kind: %v", err)
			}
			return
		}
		var old, new map[string]json.RawMessage
		if json.Unmarshal([]byte(oldJSON), &old) != nil || json.Unmarshal([]byte(newJSON), &new) != nil {
			return
		}
		var puts []string
		for k := range new {
			puts = append(puts, k)
		}
		c := l.Eval(context.Background(), Input{Namespace: "ns", Old: old, New: new, Puts: puts})
		switch c.Result {
		case controlapi.CheckPass:
			if c.Message != "" {
				t.Fatalf("a pass with a message: %+v", c)
			}
		case controlapi.CheckWarn:
			if !strings.HasPrefix(c.Message, "m") && !strings.HasPrefix(c.Message, "error: ") {
				t.Fatalf("message %q", c.Message)
			}
		default:
			t.Fatalf("result %q", fmt.Sprint(c.Result))
		}
	})
}
