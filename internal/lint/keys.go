package lint

import (
	"slices"
	"strings"

	celast "cel.dev/cel-go/common/ast"
	"cel.dev/cel-go/common/operators"
	"cel.dev/cel-go/common/types"
)

// keysOf returns the keys an expression names literally, sorted:
// old["k"] and new["k"], new.k and has(new.k), "k" in new and
// "k" in change.puts. A failing lint's message names them.
func keysOf(a *celast.AST) []string {
	var keys []string
	isValues := func(e celast.Expr) bool {
		if e.Kind() == celast.IdentKind {
			return e.AsIdent() == "old" || e.AsIdent() == "new"
		}
		if e.Kind() == celast.SelectKind { // change.puts, change.deletes
			op := e.AsSelect().Operand()
			return op.Kind() == celast.IdentKind && op.AsIdent() == "change"
		}
		return false
	}
	literal := func(e celast.Expr) (string, bool) {
		if e.Kind() != celast.LiteralKind {
			return "", false
		}
		s, ok := e.AsLiteral().(types.String)
		return string(s), ok
	}
	celast.PreOrderVisit(a.Expr(), celast.NewExprVisitor(func(e celast.Expr) {
		switch e.Kind() {
		case celast.CallKind:
			c := e.AsCall()
			args := c.Args()
			if len(args) != 2 {
				return
			}
			switch c.FunctionName() {
			case operators.Index, operators.OptIndex:
				if k, ok := literal(args[1]); ok && isValues(args[0]) && args[0].Kind() == celast.IdentKind {
					keys = append(keys, k)
				}
			case operators.In:
				if k, ok := literal(args[0]); ok && isValues(args[1]) {
					keys = append(keys, k)
				}
			}
		case celast.SelectKind:
			s := e.AsSelect()
			if op := s.Operand(); op.Kind() == celast.IdentKind && (op.AsIdent() == "old" || op.AsIdent() == "new") {
				keys = append(keys, s.FieldName())
			}
		}
	}))
	slices.Sort(keys)
	return slices.Compact(keys)
}

// failMessage is the message of a failing check: the lint's, with the
// keys its expression names that the message does not.
func failMessage(name, msg string, keys []string) string {
	if msg == "" {
		msg = "lint " + name + " fails"
	}
	var missing []string
	for _, k := range keys {
		if !strings.Contains(msg, k) {
			missing = append(missing, k)
		}
	}
	if len(missing) == 0 {
		return msg
	}
	return msg + " (keys: " + strings.Join(missing, ", ") + ")"
}
