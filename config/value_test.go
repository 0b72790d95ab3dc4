package config

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/holdfast-dev/holdfast/internal/snapshot"
)

// testValue decodes one JSON value as a snapshot would hold it.
func testValue(tb testing.TB, raw string) Value {
	tb.Helper()
	s, err := snapshot.Build("t", "", 0, map[string]json.RawMessage{"v": json.RawMessage(raw)})
	if err != nil {
		tb.Fatal(err)
	}
	v, _ := s.Get("v")
	return Value{v}
}

func TestKindsAgree(t *testing.T) {
	pairs := map[Kind]snapshot.Kind{
		KindInvalid: snapshot.KindInvalid, KindNull: snapshot.KindNull, KindBool: snapshot.KindBool,
		KindNumber: snapshot.KindNumber, KindString: snapshot.KindString, KindArray: snapshot.KindArray,
		KindObject: snapshot.KindObject,
	}
	for k, sk := range pairs {
		if uint8(k) != uint8(sk) || k.String() != sk.String() {
			t.Errorf("config %v (%d) differs from snapshot %v (%d)", k, k, sk, sk)
		}
	}
	if got := Kind(99).String(); got != "Kind(99)" {
		t.Errorf("Kind(99).String() = %q", got)
	}
}

func TestValueForwards(t *testing.T) {
	tests := []struct {
		raw  string
		kind Kind
		str  string
	}{
		{`"250ms"`, KindString, "250ms"},
		{`12`, KindNumber, "12"},
		{`true`, KindBool, "true"},
		{`null`, KindNull, "null"},
		{`[1]`, KindArray, "[1]"},
		{`{"a":1}`, KindObject, `{"a":1}`},
	}
	for _, tt := range tests {
		v := testValue(t, tt.raw)
		if v.Kind() != tt.kind || v.String() != tt.str || string(v.Raw()) != tt.raw {
			t.Errorf("%s: kind %v string %q raw %q", tt.raw, v.Kind(), v.String(), v.Raw())
		}
		if !v.Equal(testValue(t, tt.raw)) || v.Equal(Value{}) {
			t.Errorf("%s: Equal wrong", tt.raw)
		}
	}
	if d, ok := testValue(t, `"250ms"`).Duration(); !ok || d != 250*time.Millisecond {
		t.Errorf("Duration = %v, %v", d, ok)
	}
	if i, ok := testValue(t, `9007199254740993`).Int64(); !ok || i != 9007199254740993 {
		t.Errorf("Int64 = %v, %v", i, ok)
	}
	if n, ok := testValue(t, `1e3`).Int(); !ok || n != 1000 {
		t.Errorf("Int = %v, %v", n, ok)
	}
	if f, ok := testValue(t, `1.5`).Float(); !ok || f != 1.5 {
		t.Errorf("Float = %v, %v", f, ok)
	}
	if b, ok := testValue(t, `true`).Bool(); !ok || !b {
		t.Errorf("Bool = %v, %v", b, ok)
	}
	if s, ok := testValue(t, `"x"`).Str(); !ok || s != "x" {
		t.Errorf("Str = %v, %v", s, ok)
	}
	var dst struct{ A int }
	if err := testValue(t, `{"A":3}`).Decode(&dst); err != nil || dst.A != 3 {
		t.Errorf("Decode = %+v, %v", dst, err)
	}
	var z Value
	if z.Kind() != KindInvalid || z.Raw() != nil || z.String() != "" || z.Decode(&dst) == nil {
		t.Errorf("zero Value: %v %q %q", z.Kind(), z.Raw(), z.String())
	}
}
