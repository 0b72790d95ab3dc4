package schema

import (
	"encoding/json"
	"errors"
	"fmt"
	"iter"
	"strings"
	"testing"
)

// pairs yields key and value pairs in the order given, as a snapshot's
// RawAll does in its own order.
func pairs(kv ...string) iter.Seq2[string, json.RawMessage] {
	return func(yield func(string, json.RawMessage) bool) {
		for i := 0; i+1 < len(kv); i += 2 {
			if !yield(kv[i], json.RawMessage(kv[i+1])) {
				return
			}
		}
	}
}

func TestDecodeSeq(t *testing.T) {
	doc, err := DecodeSeq(pairs("s", `"x"`, "n", ` 1 `, "o", `{"a":[true,null]}`, "z", "null"), 4)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]any{"s": "x", "n": json.Number("1"), "o": map[string]any{"a": []any{true, nil}}, "z": nil}
	if fmt.Sprint(doc) != fmt.Sprint(want) {
		t.Errorf("got %#v, want %#v", doc, want)
	}
	if doc, err := DecodeSeq(pairs(), 0); err != nil || doc == nil || len(doc) != 0 {
		t.Errorf("DecodeSeq of nothing = %#v, %v; want an empty map", doc, err)
	}
	// The first bad key in sorted order is named, whatever the order seen.
	_, err = DecodeSeq(pairs("c", `1`, "b", `{`, "a", `[`), -1)
	if !errors.Is(err, ErrInvalidValue) || !strings.Contains(err.Error(), `key "a" (and 1 more keys)`) {
		t.Errorf("error = %v; want ErrInvalidValue naming key a and 1 more", err)
	}
	s, err := Compile([]byte(`{"properties":{"n":{"maximum":0}}}`))
	if err != nil {
		t.Fatal(err)
	}
	doc, err = DecodeSeq(pairs("n", `1`), 1)
	if err != nil {
		t.Fatal(err)
	}
	var ve *ValidationError
	if err := s.Validate(doc); !errors.As(err, &ve) {
		t.Errorf("Validate of a DecodeSeq document = %v; want a *ValidationError", err)
	}
}
