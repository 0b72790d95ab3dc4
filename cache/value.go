package cache

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"strconv"
	"time"
)

// Kind is the JSON type of a Value.
type Kind uint8

// The kinds of Value.
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

func (k Kind) String() string {
	if int(k) < len(kindNames) {
		return kindNames[k]
	}
	return "Kind(" + strconv.Itoa(int(k)) + ")"
}

// Value is one JSON value of a namespace, decoded once when its snapshot was
// built, so that reading it never parses or allocates. The zero Value has
// KindInvalid.
type Value struct {
	raw   json.RawMessage
	str   string        // KindString: the decoded string
	num   float64       // KindNumber
	i     int64         // KindNumber, when isInt
	dur   time.Duration // KindString, when isDur
	kind  Kind
	isInt bool // the number is an integer that fits int64 exactly
	isDur bool // the string parses with time.ParseDuration
	b     bool // KindBool
}

// NewValue decodes one JSON value. raw must be a single valid JSON value.
// NewValue keeps a copy of raw, so the caller may reuse it.
func NewValue(raw []byte) (Value, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 {
		return Value{}, fmt.Errorf("cache: empty value")
	}
	if !json.Valid(raw) {
		return Value{}, fmt.Errorf("cache: invalid JSON value %.64q", raw)
	}
	v := Value{raw: bytes.Clone(raw)}
	switch raw[0] {
	case 'n':
		v.kind = KindNull
	case 't', 'f':
		v.kind, v.b = KindBool, raw[0] == 't'
	case '"':
		v.kind = KindString
		if err := json.Unmarshal(raw, &v.str); err != nil {
			return Value{}, fmt.Errorf("cache: invalid JSON string: %w", err)
		}
		if d, err := time.ParseDuration(v.str); err == nil {
			v.dur, v.isDur = d, true
		}
	case '[':
		v.kind = KindArray
	case '{':
		v.kind = KindObject
	default:
		v.kind = KindNumber
		f, err := strconv.ParseFloat(string(raw), 64)
		if err != nil && !isRangeErr(err) {
			return Value{}, fmt.Errorf("cache: invalid JSON number %.64q: %w", raw, err)
		}
		v.num = f
		if n, err := strconv.ParseInt(string(raw), 10, 64); err == nil {
			v.i, v.isInt = n, true
		} else if f == math.Trunc(f) && f >= math.MinInt64 && f < math.MaxInt64 {
			// 1e3 or 2.0: integral, though not written as one.
			v.i, v.isInt = int64(f), true
		}
	}
	return v, nil
}

func isRangeErr(err error) bool {
	ne, ok := err.(*strconv.NumError)
	return ok && ne.Err == strconv.ErrRange
}

// Kind reports the JSON type of v.
func (v Value) Kind() Kind { return v.kind }

// Raw returns the value's JSON text. The caller must not modify it.
func (v Value) Raw() json.RawMessage { return v.raw }

// String returns the string for KindString, and the JSON text otherwise,
// so that a Value prints well.
func (v Value) String() string {
	if v.kind == KindString {
		return v.str
	}
	return string(v.raw)
}

// Str returns the string and true for KindString, else "" and false.
func (v Value) Str() (string, bool) {
	return v.str, v.kind == KindString
}

// Int returns the number as an int when it is an integer that fits one.
func (v Value) Int() (int, bool) {
	if v.kind != KindNumber || !v.isInt || int64(int(v.i)) != v.i {
		return 0, false
	}
	return int(v.i), true
}

// Int64 returns the number as an int64 when it is an integer that fits one.
func (v Value) Int64() (int64, bool) {
	return v.i, v.kind == KindNumber && v.isInt
}

// Float returns the number for KindNumber.
func (v Value) Float() (float64, bool) {
	return v.num, v.kind == KindNumber
}

// Bool returns the boolean for KindBool.
func (v Value) Bool() (bool, bool) {
	return v.b, v.kind == KindBool
}

// Duration returns the duration for a KindString value in
// time.ParseDuration's format ("250ms", "1m30s"), parsed when v was built.
func (v Value) Duration() (time.Duration, bool) {
	return v.dur, v.isDur
}

// Decode unmarshals the value's JSON into dst, as json.Unmarshal does. It
// parses on every call: decode once and keep the result where it matters.
func (v Value) Decode(dst any) error {
	if v.kind == KindInvalid {
		return fmt.Errorf("cache: decode of an invalid value")
	}
	return json.Unmarshal(v.raw, dst)
}

// Equal reports whether a and b have the same JSON text.
func (a Value) Equal(b Value) bool {
	return a.kind == b.kind && bytes.Equal(a.raw, b.raw)
}
