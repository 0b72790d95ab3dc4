package cache

import (
	"encoding/json"
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
// the single JSON values, its strings decode as json.Unmarshal's do, and
// its durations as time.ParseDuration's.
func FuzzNewValue(f *testing.F) {
	for _, s := range []string{`"x"`, `"caf\u00e9"`, `"a\"b"`, `"250ms"`, `"1h2m"`, `"0"`, `"-1.5µs"`, `12`, `-0.5e3`, `null`, `[1]`, `{"a":"b"}`, `"\ud800"`, `" "`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		v, err := NewValue(raw)
		var generic any
		jerr := json.Unmarshal(raw, &generic)
		if (err == nil) != (jerr == nil) {
			t.Fatalf("NewValue(%q) error %v; json.Unmarshal error %v", raw, err, jerr)
		}
		if err != nil {
			return
		}
		if s, ok := generic.(string); ok {
			if got, _ := v.Str(); got != s {
				t.Fatalf("NewValue(%q).Str() = %q; json says %q", raw, got, s)
			}
			d, derr := time.ParseDuration(s)
			if got, ok := v.Duration(); ok != (derr == nil) || got != d {
				t.Fatalf("NewValue(%q).Duration() = %v, %v; ParseDuration says %v, %v", raw, got, ok, d, derr)
			}
		}
	})
}
