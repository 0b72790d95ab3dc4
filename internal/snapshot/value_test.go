package snapshot

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"strconv"
	"strings"
	"testing"
	"time"
)

func TestNewValue(t *testing.T) {
	tests := []struct {
		raw     string
		kind    Kind
		str     string // String()
		i       int
		isInt   bool
		f       float64
		isFloat bool
		b       bool
		isBool  bool
		dur     time.Duration
		isDur   bool
	}{
		{raw: `null`, kind: KindNull, str: "null"},
		{raw: `true`, kind: KindBool, str: "true", b: true, isBool: true},
		{raw: `false`, kind: KindBool, str: "false", isBool: true},
		{raw: `50`, kind: KindNumber, str: "50", i: 50, isInt: true, f: 50, isFloat: true},
		{raw: `-7`, kind: KindNumber, str: "-7", i: -7, isInt: true, f: -7, isFloat: true},
		{raw: `2.5`, kind: KindNumber, str: "2.5", f: 2.5, isFloat: true},
		{raw: `1e3`, kind: KindNumber, str: "1e3", i: 1000, isInt: true, f: 1000, isFloat: true},
		{raw: `1e400`, kind: KindNumber, str: "1e400", f: posInf(), isFloat: true},
		{raw: ` "x" `, kind: KindString, str: "x"},
		{raw: `"250ms"`, kind: KindString, str: "250ms", dur: 250 * time.Millisecond, isDur: true},
		{raw: `"0"`, kind: KindString, str: "0", isDur: true},
		{raw: `"-0"`, kind: KindString, str: "-0", isDur: true}, // time.ParseDuration takes a signed zero
		{raw: `"+0"`, kind: KindString, str: "+0", isDur: true},
		{raw: `"caf\u00e9"`, kind: KindString, str: "café"},
		{raw: `[1,2]`, kind: KindArray, str: "[1,2]"},
		{raw: `{"a":1}`, kind: KindObject, str: `{"a":1}`},
	}
	for _, tt := range tests {
		t.Run(tt.raw, func(t *testing.T) {
			v, err := NewValue([]byte(tt.raw))
			if err != nil {
				t.Fatal(err)
			}
			if v.Kind() != tt.kind || v.String() != tt.str {
				t.Errorf("Kind, String = %v, %q; want %v, %q", v.Kind(), v.String(), tt.kind, tt.str)
			}
			if i, ok := v.Int(); i != tt.i || ok != tt.isInt {
				t.Errorf("Int = %d, %v; want %d, %v", i, ok, tt.i, tt.isInt)
			}
			if f, ok := v.Float(); f != tt.f || ok != tt.isFloat {
				t.Errorf("Float = %v, %v; want %v, %v", f, ok, tt.f, tt.isFloat)
			}
			if b, ok := v.Bool(); b != tt.b || ok != tt.isBool {
				t.Errorf("Bool = %v, %v; want %v, %v", b, ok, tt.b, tt.isBool)
			}
			if d, ok := v.Duration(); d != tt.dur || ok != tt.isDur {
				t.Errorf("Duration = %v, %v; want %v, %v", d, ok, tt.dur, tt.isDur)
			}
			if _, ok := v.Str(); ok != (tt.kind == KindString) {
				t.Errorf("Str ok = %v for kind %v", ok, tt.kind)
			}
		})
	}
}

func posInf() float64 { var z float64; return 1 / z }

func TestNewValueRejects(t *testing.T) {
	for _, raw := range []string{``, ` `, `{`, `nul`, `"unterminated`, `1 2`, `{"a":}`, `01`} {
		if _, err := NewValue([]byte(raw)); err == nil {
			t.Errorf("NewValue(%q) succeeded; want an error", raw)
		}
	}
}

func TestValueDecode(t *testing.T) {
	v, err := NewValue([]byte(`{"hosts":["a","b"],"port":5432}`))
	if err != nil {
		t.Fatal(err)
	}
	var dst struct {
		Hosts []string
		Port  int
	}
	if err := v.Decode(&dst); err != nil || dst.Port != 5432 || len(dst.Hosts) != 2 {
		t.Fatalf("Decode = %+v, %v", dst, err)
	}
	if err := (Value{}).Decode(&dst); err == nil {
		t.Fatal("Decode of the zero Value succeeded")
	}
}

func TestSnapshotApplyLeavesOriginal(t *testing.T) {
	base, err := Build("ns", "s1", 3, map[string]json.RawMessage{"a": json.RawMessage(`1`), "b": json.RawMessage(`2`)})
	if err != nil {
		t.Fatal(err)
	}
	next, err := base.Apply(5, time.Time{}, map[string]json.RawMessage{"a": json.RawMessage(`10`), "c": json.RawMessage(`"x"`)}, []string{"b"})
	if err != nil {
		t.Fatal(err)
	}
	if got := base.Keys(); len(got) != 2 || got[0] != "a" || got[1] != "b" {
		t.Errorf("base keys changed: %v", got)
	}
	if v, _ := base.Get("a"); v.String() != "1" {
		t.Errorf("base a = %v", v)
	}
	if got := next.Keys(); len(got) != 2 || got[0] != "a" || got[1] != "c" {
		t.Errorf("next keys = %v", got)
	}
	if next.Revision() != 5 || next.StoreID() != "s1" {
		t.Errorf("next revision, store = %d, %s", next.Revision(), next.StoreID())
	}
	// A bad value fails the whole change and leaves nothing half applied.
	if _, err := next.Apply(6, time.Time{}, map[string]json.RawMessage{"ok": json.RawMessage(`1`), "bad": json.RawMessage(`{`)}, nil); err == nil {
		t.Fatal("Apply with an invalid value succeeded")
	}
	if _, ok := next.Get("ok"); ok {
		t.Fatal("a failed Apply changed its base")
	}
}

// FuzzNewValue checks NewValue against encoding/json: it accepts exactly
// the single JSON values, its kinds, strings, numbers and booleans are
// json.Unmarshal's, and its durations time.ParseDuration's.
func FuzzNewValue(f *testing.F) {
	for _, s := range []string{`"x"`, `"caf\u00e9"`, `"a\"b"`, `"250ms"`, `"1h2m"`, `"0"`, `"-0"`, `"-1.5µs"`, `"1\u00b5s"`,
		`12`, `-0.5e3`, `-0`, `-0.0`, `9007199254740993`, `-9223372036854775808`, `9223372036854775808`, `-9223372036854775809`, `1e400`, `1e-400`,
		`null`, `true`, `false`, `[1]`, `{"a":"b"}`, `"\ud800"`, `"\ud800\udc00"`, `"\ud83d\ude00x"`, `"\ud800\ud800"`, `"\udc00\ud800"`, `"\ud800\u0041"`, `"\uD83D\uDE00"`, `"\uFFFD\uffff"`, "\"\xed\xa0\x80\xf0\x9f\x98\"", `"\b\f\n\r\t\"\\\/"`, `" "`, "\"\xff\"", " [ {} , [] ] ", `[1,]`, `{"a" 1}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		v, err := NewValue(raw)
		if (err == nil) != json.Valid(raw) {
			t.Fatalf("NewValue(%q) error %v; json.Valid says %v", raw, err, json.Valid(raw))
		}
		if err != nil {
			return
		}
		checkValue(t, v, raw, generic(t, raw))
	})
}

// generic is encoding/json's reading of raw, numbers as json.Number.
func generic(t *testing.T, raw []byte) any {
	t.Helper()
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var g any
	if err := dec.Decode(&g); err != nil {
		t.Fatalf("json cannot decode %q, which it calls valid: %v", raw, err)
	}
	return g
}

// checkValue checks v, decoded from raw, against generic, json.Unmarshal's
// reading of raw.
func checkValue(t *testing.T, v Value, raw []byte, generic any) {
	t.Helper()
	if got, want := string(v.Raw()), strings.Trim(string(raw), " \t\r\n"); got != want {
		t.Fatalf("NewValue(%q).Raw() = %q, want %q", raw, got, want)
	}
	want := map[string]Kind{"<nil>": KindNull, "bool": KindBool, "json.Number": KindNumber, "string": KindString, "[]interface {}": KindArray, "map[string]interface {}": KindObject}[fmt.Sprintf("%T", generic)]
	if v.Kind() != want {
		t.Fatalf("NewValue(%q).Kind() = %v, want %v", raw, v.Kind(), want)
	}
	switch g := generic.(type) {
	case string:
		if got, _ := v.Str(); got != g {
			t.Fatalf("NewValue(%q).Str() = %q; json says %q", raw, got, g)
		}
		d, derr := time.ParseDuration(g)
		if got, ok := v.Duration(); ok != (derr == nil) || got != d {
			t.Fatalf("NewValue(%q).Duration() = %v, %v; ParseDuration says %v, %v", raw, got, ok, d, derr)
		}
	case json.Number:
		want, _ := strconv.ParseFloat(string(g), 64) // ±Inf beyond float64's range
		if f, ok := v.Float(); !ok || math.Float64bits(f) != math.Float64bits(want) {
			t.Fatalf("NewValue(%q).Float() = %v, %v; want %v", raw, f, ok, want)
		}
		i, ok := v.Int64()
		if n, err := strconv.ParseInt(string(g), 10, 64); err == nil {
			if !ok || i != n {
				t.Fatalf("NewValue(%q).Int64() = %d, %v; want %d", raw, i, ok, n)
			}
		} else if integral := !isIntLiteral(string(g)) && want == math.Trunc(want) && want >= math.MinInt64 && want < math.MaxInt64; ok != integral || ok && i != int64(want) {
			// An integer literal ParseInt refuses is outside int64: no
			// integer, even where its float64 is -2^63.
			t.Fatalf("NewValue(%q).Int64() = %d, %v; want %v, %v", raw, i, ok, int64(want), integral)
		}
	case bool:
		if b, ok := v.Bool(); !ok || b != g {
			t.Fatalf("NewValue(%q).Bool() = %v, %v; want %v", raw, b, ok, g)
		}
	}
	if _, ok := v.Str(); ok != (v.Kind() == KindString) {
		t.Fatalf("NewValue(%q): Str ok = %v for kind %v", raw, ok, v.Kind())
	}
	if _, ok := v.Bool(); ok != (v.Kind() == KindBool) {
		t.Fatalf("NewValue(%q): Bool ok = %v for kind %v", raw, ok, v.Kind())
	}
}
