package config

import (
	"encoding/json"
	"strconv"
	"time"

	"github.com/holdfast-dev/holdfast/internal/snapshot"
)

// Value is one JSON value of a namespace, decoded once when its snapshot
// was built, so that reading it never parses or allocates: Kind, the typed
// accessors (Str, Int, Int64, Float, Bool, Duration), Raw, String, Decode
// and Equal. A Value is a handle to immutable data: copying it is copying a
// pointer, and it stays valid however the namespace changes later. The
// zero Value has KindInvalid: no value (an absent key, or the Old of an
// added key in a Change).
type Value struct {
	v snapshot.Value
}

// Kind reports the JSON type of v.
func (v Value) Kind() Kind { return Kind(v.v.Kind()) }

// Raw returns the value's JSON text, or nil for the zero Value. The caller
// must not modify it: it is the snapshot's own memory, shared by every
// reader.
func (v Value) Raw() json.RawMessage { return v.v.Raw() }

// String returns the string for KindString, and the JSON text otherwise
// ("" for the zero Value), so that a Value prints well.
func (v Value) String() string { return v.v.String() }

// Str returns the string and true for KindString, else "" and false.
func (v Value) Str() (string, bool) { return v.v.Str() }

// Int returns the number as an int when it is an integer that fits one
// (1, 1.0 and 1e3 are integers; 1.5 is not), else 0 and false.
func (v Value) Int() (int, bool) { return v.v.Int() }

// Int64 returns the number as an int64 when it is an integer that fits
// one, exactly, also beyond 2^53; else 0 and false.
func (v Value) Int64() (int64, bool) { return v.v.Int64() }

// Float returns the number for KindNumber, else 0 and false.
func (v Value) Float() (float64, bool) { return v.v.Float() }

// Bool returns the boolean for KindBool, else false and false.
func (v Value) Bool() (bool, bool) { return v.v.Bool() }

// Duration returns the duration of a KindString value written in
// time.ParseDuration's format ("250ms", "1m30s"), parsed when the
// snapshot was built; else 0 and false. A number is not a duration.
func (v Value) Duration() (time.Duration, bool) { return v.v.Duration() }

// Decode unmarshals the value's JSON into dst, as json.Unmarshal does; the
// zero Value fails. It parses on every call: decode once and keep the
// result where it matters (Bind does).
func (v Value) Decode(dst any) error { return v.v.Decode(dst) }

// Equal reports whether v and w have the same JSON text.
func (v Value) Equal(w Value) bool { return v.v.Equal(w.v) }

// Kind is the JSON type of a Value.
type Kind uint8

// The kinds of Value. Their numbers are those of the snapshot package's
// kinds, so that Value.Kind is a conversion (TestKindsAgree).
const (
	KindInvalid Kind = iota // the zero Value: no value
	KindNull
	KindBool
	KindNumber
	KindString
	KindArray
	KindObject
)

var kindNames = [...]string{"invalid", "null", "bool", "number", "string", "array", "object"}

// String returns the kind's name: "invalid", "null", "bool", "number",
// "string", "array" or "object".
func (k Kind) String() string {
	if int(k) < len(kindNames) {
		return kindNames[k]
	}
	return "Kind(" + strconv.Itoa(int(k)) + ")"
}
