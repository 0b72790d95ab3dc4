package schema

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"
)

// nestedDepth is a schema depth arrays and objects deep: the document
// and its "properties" are 2 levels, then depth-3 schemas nested through
// "items", then the innermost {}.
func nestedDepth(depth int) string {
	n := depth - 3
	return `{"type":"object","properties":{"k":` + strings.Repeat(`{"items":`, n) + `{}` + strings.Repeat(`}`, n) + `}}`
}

// objects is n properties, each an object.
func objects(n int) string {
	var b strings.Builder
	for i := range n {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, `"k%d":{}`, i)
	}
	return b.String()
}

func TestCompileBounds(t *testing.T) {
	tests := []struct {
		name   string
		schema string
		want   string // substring of the error; "" compiles
	}{
		{"at the depth limit", nestedDepth(MaxSchemaDepth), ""},
		{"one past the depth limit", nestedDepth(MaxSchemaDepth + 1), "nested more than 64"},
		{"5,000 deep", nestedDepth(5000), "nested more than 64"},
		{"an array of arrays", `{"enum":[` + strings.Repeat("[", 100) + strings.Repeat("]", 100) + `]}`, "nested more than 64"},
		{"brackets in strings do not count", `{"description":"` + strings.Repeat(`[{\"`, 200) + `"}`, ""},
		{"a key with brackets", `{"properties":{"` + strings.Repeat("{", 100) + `":{}}}`, ""},
		{"at the object limit", `{"properties":{` + objects(MaxSchemaObjects-2) + `}}`, ""},
		{"past the object limit", `{"properties":{` + objects(MaxSchemaObjects-1) + `}}`, "more than 2000 objects"},
		{"past the size limit", `{"description":"` + strings.Repeat("x", MaxSchemaBytes) + `"}`, "more than the 262144 a schema may have"},
		{"at the size limit", `{"description":"` + strings.Repeat("x", MaxSchemaBytes-19) + `"}`, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			start := time.Now()
			_, err := Compile([]byte(tt.schema))
			took := time.Since(start)
			if tt.want == "" {
				if err != nil {
					t.Fatalf("Compile: %v", err)
				}
				return
			}
			if !errors.Is(err, ErrInvalidSchema) || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("Compile: %v, want ErrInvalidSchema with %q", err, tt.want)
			}
			// Refused before decoding: well under what compiling a deep
			// schema takes (seconds at 3,000 deep).
			if took > 100*time.Millisecond {
				t.Errorf("refused in %v, want under 100 ms", took)
			}
		})
	}
	if len(`{"description":"`+strings.Repeat("x", MaxSchemaBytes-19)+`"}`) != MaxSchemaBytes-1 {
		t.Fatal("test setup: the schema at the size limit")
	}
}

func TestNesting(t *testing.T) {
	for _, tt := range []struct {
		text  string
		depth int
	}{
		{`{}`, 1},
		{`{"a":[1,{"b":[]}]}`, 4},
		{`{"a":"\"[[[["}`, 1},
		{`{"a\\":[[]]}`, 3},
		{`["\\\"{"]`, 1},
	} {
		if d, _, _ := nesting([]byte(tt.text), 100, 100); d != tt.depth {
			t.Errorf("nesting(%s) = %d, want %d", tt.text, d, tt.depth)
		}
	}
}
