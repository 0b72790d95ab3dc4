package fakeserver

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"testing"

	"github.com/holdfast-dev/holdfast/controlapi"
	"github.com/holdfast-dev/holdfast/internal/controlplane"
)

// TestLintStoreBound: the store keeps at most controlplane.MaxLints lints;
// one more is refused with ErrFull, replacing one is not; what is read
// back is a copy.
func TestLintStoreBound(t *testing.T) {
	var s lintStore
	ctx := context.Background()
	l := controlapi.Lint{Namespaces: "*", Expr: "true", Severity: controlapi.LintWarn,
		Examples: controlapi.LintExamples{Pass: []controlapi.LintExample{{New: map[string]json.RawMessage{}}}}}
	for i := range controlplane.MaxLints {
		if err := s.PutLint(ctx, fmt.Sprint("l", i), l); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.PutLint(ctx, "one-more", l); !errors.Is(err, controlplane.ErrFull) {
		t.Fatalf("one more: %v, want ErrFull", err)
	}
	l.Message = "replaced"
	if err := s.PutLint(ctx, "l0", l); err != nil {
		t.Fatalf("replacing one: %v", err)
	}
	got, err := s.GetLint(ctx, "l0")
	if err != nil || got.Message != "replaced" {
		t.Fatalf("GetLint: %+v %v", got, err)
	}
	got.Examples.Pass[0].New["x"] = json.RawMessage("1")
	if again, _ := s.GetLint(ctx, "l0"); len(again.Examples.Pass[0].New) != 0 {
		t.Fatal("a lint read back shares its maps with the store")
	}
	s.reset()
	if all, _ := s.Lints(ctx); len(all) != 0 {
		t.Fatalf("after reset: %d lints", len(all))
	}
}
