package jsonscan

import (
	"encoding/json"
	"errors"
	"math"
	"strings"
	"testing"
	"unicode/utf8"
)

// TestUnquote: Unquote reads strings as json.Unmarshal does, surrogates
// and bytes that are not UTF-8 included, short and long.
func TestUnquote(t *testing.T) {
	for _, text := range []string{`"\u0061"`, `"\/"`, `"\b\f\n\r\t\"\\\/"`, `"\u00e9\u20ac\uD83D\uDE00"`, `"\ud800"`, `"\udc00"`,
		`"\ud800\udc00"`, `"\ud800\ud800"`, `"\udbff\udfff"`, `"\ud800\u0041"`, `"\ud800x"`, `"x\ud800\\"`, `"\ud800\\u0041"`, "\"\xff\"", "\"\xed\xa0\x80\"",
		"\"\xf0\x9f\x98\"", "\"\xc3\"", "\"a\xc3\xa9\\n\"", `"` + strings.Repeat(`\u00e9x`, 40) + `"`, "\"" + strings.Repeat("\xfe", 100) + "\""} {
		if _, _, err := ScanString(text, 0); err != nil {
			t.Fatalf("ScanString(%q): %v", text, err)
		}
		var want string
		if err := json.Unmarshal([]byte(text), &want); err != nil {
			t.Fatal(err)
		}
		if got := Unquote(text); got != want {
			t.Errorf("Unquote(%q) = %q; json.Unmarshal reads %q", text, got, want)
		}
	}
}

// trimSpace trims JSON white space (and only that) around s.
func trimSpace(s string) string { return strings.Trim(s, " \t\r\n") }

// checkValue: SkipValue and ValidValue accept what json.Valid accepts, and
// SkipValue ends where the value does.
func checkValue(t *testing.T, s string) {
	t.Helper()
	valid := json.Valid([]byte(s))
	if err := ValidValue(trimSpace(s)); (err == nil) != valid {
		t.Fatalf("ValidValue(%q) = %v; json.Valid says %v", s, err, valid)
	}
	i := SkipSpace(s, 0)
	end, err := SkipValue(s, i, 0)
	if err != nil {
		var se *SyntaxError
		if !errors.As(err, &se) || se.Offset < i || se.Offset > len(s) {
			t.Fatalf("SkipValue(%q) error %v: want a *SyntaxError within the text", s, err)
		}
		if valid {
			t.Fatalf("SkipValue(%q) = %v; json.Valid accepts it", s, err)
		}
		return
	}
	if !json.Valid([]byte(s[i:end])) {
		t.Fatalf("SkipValue(%q) ends at %d: %q is not JSON", s, end, s[i:end])
	}
	if valid != (SkipSpace(s, end) == len(s)) {
		t.Fatalf("SkipValue(%q) ends at %d; json.Valid of the whole says %v", s, end, valid)
	}
}

var valueSeeds = []string{
	`{}`, `[]`, ` {"a": [1, -2.5e+3, "x\u00e9\n", true, false, null]} `, `{"a":{"b":{"c":[[[]]]}}}`,
	`"\ud800"`, "\"\xff\"", `0`, `-0`, `01`, `1.`, `.5`, `1e`, `-`, `tru`, `nul`, `{"a"}`, `{"a":1,}`, `[1,]`,
	`[1 2]`, `{"a":1}}`, "\"a\tb\"", `"\x"`, `"\u12"`, strings.Repeat("[", 70) + strings.Repeat("]", 70),
}

func TestSkipValue(t *testing.T) {
	for _, s := range valueSeeds {
		checkValue(t, s)
	}
	deep := strings.Repeat("[", MaxDepth) + strings.Repeat("]", MaxDepth)
	if _, err := SkipValue(deep, 0, 0); err != nil {
		t.Errorf("%d nested arrays: %v; encoding/json takes them", MaxDepth, err)
	}
	if _, err := SkipValue(deep, 0, 1); err == nil {
		t.Errorf("%d nested arrays inside one more: accepted; encoding/json refuses them", MaxDepth)
	}
	checkValue(t, deep)
	checkValue(t, "["+deep+"]")
}

func FuzzSkipValue(f *testing.F) {
	for _, s := range valueSeeds {
		f.Add(s)
	}
	f.Fuzz(checkValue)
}

// checkString: ScanString accepts the strings encoding/json does, and
// Unquote reads them as json.Unmarshal does.
func checkString(t *testing.T, s string) {
	t.Helper()
	end, plain, err := ScanString(s, 0)
	if err != nil || len(s) == 0 || s[0] != '"' {
		if len(s) > 0 && s[0] == '"' {
			var v string
			if json.Unmarshal([]byte(s), &v) == nil {
				t.Fatalf("ScanString(%q) = %v; json.Unmarshal reads it", s, err)
			}
		}
		return
	}
	var want string
	if err := json.Unmarshal([]byte(s[:end]), &want); err != nil {
		t.Fatalf("ScanString(%q) ends at %d: json.Unmarshal of %q: %v", s, end, s[:end], err)
	}
	if got := Unquote(s[:end]); got != want {
		t.Fatalf("Unquote(%q) = %q; json.Unmarshal reads %q", s[:end], got, want)
	}
	if plain != (!strings.Contains(s[1:end-1], `\`) && utf8.ValidString(s[1:end-1])) {
		t.Fatalf("ScanString(%q) says plain %v", s[:end], plain)
	}
	if plain && s[1:end-1] != want {
		t.Fatalf("ScanString(%q) says plain; json.Unmarshal reads %q", s[:end], want)
	}
}

var stringSeeds = []string{`""`, `"a"`, `"a\"b"`, `"é"`, "\"\xff\"", "\"\x7f\"", `"\u00e9\ud83d\ude00"`, `"\ud800"`, "\"a\nb\"", `"abc`, `"\`, `"\u12`, `x`, `"a" tail`}

func TestStrings(t *testing.T) {
	for _, s := range stringSeeds {
		checkString(t, s)
	}
}

func FuzzStrings(f *testing.F) {
	for _, s := range stringSeeds {
		f.Add(s)
	}
	f.Fuzz(checkString)
}

// checkInt: Int reads an integer as json.Unmarshal into an int64 does, and
// takes no other number.
func checkInt(t *testing.T, s string) {
	t.Helper()
	n, next, exact, ok := Int(s, 0)
	var want int64
	werr := json.Unmarshal([]byte(s), &want)
	whole := trimSpace(s) == s && s != ""
	if !ok {
		if werr == nil && whole && s != "null" { // null leaves an int64 as it is
			t.Fatalf("Int(%q) refused what json.Unmarshal reads as %d", s, want)
		}
		return
	}
	if !json.Valid([]byte(s[:next])) || strings.ContainsAny(s[:next], ".eE") {
		t.Fatalf("Int(%q) took %q, not a JSON integer", s, s[:next])
	}
	if next < len(s) && (s[next] == '.' || s[next] == 'e' || s[next] == 'E' || '0' <= s[next] && s[next] <= '9') {
		t.Fatalf("Int(%q) stopped at %d, inside a number", s, next)
	}
	var got int64
	gerr := json.Unmarshal([]byte(s[:next]), &got)
	switch {
	case exact && (gerr != nil || got != n):
		t.Fatalf("Int(%q) = %d exact; json.Unmarshal reads %d, %v", s, n, got, gerr)
	case !exact && gerr == nil:
		t.Fatalf("Int(%q) = %d inexact; json.Unmarshal reads %d", s, n, got)
	case !exact && (n != math.MaxInt64 && n != math.MinInt64 || (n < 0) != (s[0] == '-')):
		t.Fatalf("Int(%q) = %d inexact: want the bound of its sign", s, n)
	}
}

var intSeeds = []string{"0", "-0", "7", "-7", "123456", "01", "-", "", "1.5", "1e3", "1E3", "12,", "9223372036854775807", "9223372036854775808",
	"-9223372036854775808", "-9223372036854775809", "99999999999999999999", "18446744073709551616", "12345678901234567890123", "null", " 1"}

func TestInt(t *testing.T) {
	for _, s := range intSeeds {
		checkInt(t, s)
	}
}

func FuzzInt(f *testing.F) {
	for _, s := range intSeeds {
		f.Add(s)
	}
	f.Fuzz(checkInt)
}
