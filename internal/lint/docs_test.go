package lint

import (
	"encoding/json"
	"os"
	"strings"
	"testing"

	"github.com/holdfast-dev/holdfast/controlapi"
)

// TestDocsLintsCompile: each lint of docs/CHANGES.md's "Lints" section (a
// ```json block) compiles, its examples coming out as they say.
func TestDocsLintsCompile(t *testing.T) {
	data, err := os.ReadFile("../../docs/CHANGES.md")
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(data), "\n## Lints\n")
	if !ok {
		t.Fatal(`docs/CHANGES.md has no "## Lints" section`)
	}
	if end := strings.Index(section, "\n## "); end >= 0 {
		section = section[:end]
	}
	n := 0
	for _, block := range strings.Split(section, "```json\n")[1:] {
		text, _, _ := strings.Cut(block, "```")
		var spec controlapi.Lint
		dec := json.NewDecoder(strings.NewReader(text))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&spec); err != nil {
			t.Fatalf("lint %d: %v\n%s", n+1, err, text)
		}
		if _, err := Compile("doc", spec); err != nil {
			t.Errorf("lint %d: %v", n+1, err)
		}
		n++
	}
	if n != 3 {
		t.Errorf("%d lints in the section, want the three examples", n)
	}
}
