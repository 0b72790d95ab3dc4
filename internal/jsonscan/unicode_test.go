package jsonscan

import (
	"encoding/json"
	"strings"
	"testing"
	"unicode/utf8"
)

func TestCheckUnicode(t *testing.T) {
	for _, tt := range []struct {
		text string
		bad  int // the offset of the error; -1: none
	}{
		{`{"k":"plain"}`, -1},
		{`{"k":"\u00e9\u20ac"}`, -1},
		{`{"k":"\ud83d\ude00"}`, -1}, // a pair
		{`{"k":"\uD83D\uDE00"}`, -1},
		{`{"k":"\udbff\udfff"}`, -1},
		{`{"k":"\\ud800"}`, -1},   // an escaped backslash, then text
		{`{"k":"\\\\ud800"}`, -1}, // two
		{`{"k":"\n\t\"\/"}`, -1},
		{"{\"k\":\"é€😀\"}", -1},
		{`{"k":"\ud800"}`, 6},
		{`{"k":"\udc00"}`, 6},
		{`{"k":"\ude00\ud83d"}`, 6}, // the halves in the wrong order
		{`{"k":"x\ud800\u0041"}`, 7},
		{`{"k":"\ud800\ud800"}`, 6},
		{`{"k":"\\\ud800"}`, 8},
		{`{"\udfff":1}`, 2}, // in a key
		{`["a","\ud800`, 6}, // at the end
		{"{\"k\":\"\xff\"}", 6},
		{"{\"k\":\"\xed\xa0\x80\"}", 6}, // a surrogate encoded in UTF-8
	} {
		err := CheckUnicode(tt.text)
		if tt.bad < 0 {
			if err != nil {
				t.Errorf("CheckUnicode(%q) = %v, want nil", tt.text, err)
			}
			continue
		}
		se, ok := err.(*SyntaxError)
		if !ok || se.Offset != tt.bad {
			t.Errorf("CheckUnicode(%q) = %v, want an error at %d", tt.text, err, tt.bad)
		}
	}
}

// FuzzCheckUnicode: a JSON text CheckUnicode accepts reads back, through
// encoding/json, as the same strings re-encoded: nothing was replaced.
func FuzzCheckUnicode(f *testing.F) {
	for _, s := range []string{`"\ud800"`, `"\ud83d\ude00"`, `"\\ud800"`, `["\u0041",{"\udc00":1}]`, "\"\xff\""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		var v any
		if json.Unmarshal([]byte(s), &v) != nil {
			return
		}
		if CheckUnicode(s) != nil {
			return
		}
		if !utf8.ValidString(s) {
			t.Fatalf("accepted %q, not UTF-8", s)
		}
		b, _ := json.Marshal(v)
		if strings.Contains(string(b), "\ufffd") && !strings.Contains(s, "\ufffd") && !strings.Contains(strings.ToLower(s), `\ufffd`) {
			t.Fatalf("accepted %q, read as %s", s, b)
		}
	})
}
