package cache

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"
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
// built, so that reading it never parses or allocates. A Value is a handle
// to immutable data: copying it is copying a pointer, which keeps map slots
// small and lookups fast. The zero Value has KindInvalid.
type Value struct {
	d *valueData
}

// valueData puts what the typed getters read first, in one cache line.
type valueData struct {
	kind  Kind
	isInt bool          // the number is an integer that fits int64 exactly
	isDur bool          // the string parses with time.ParseDuration
	b     bool          // KindBool
	i     int64         // KindNumber, when isInt
	num   float64       // KindNumber
	dur   time.Duration // KindString, when isDur
	str   string        // KindString: the decoded string
	raw   json.RawMessage
}

// NewValue decodes one JSON value. raw must be a single valid JSON value.
// NewValue keeps a copy of raw, so the caller may reuse it.
func NewValue(raw []byte) (Value, error) {
	d := new(valueData)
	if err := d.decode(raw); err != nil {
		return Value{}, err
	}
	return Value{d}, nil
}

// decode fills d from raw.
func (d *valueData) decode(raw []byte) error {
	raw = bytes.Trim(raw, " \t\r\n") // JSON whitespace only
	if len(raw) == 0 {
		return fmt.Errorf("cache: empty value")
	}
	if !json.Valid(raw) {
		return fmt.Errorf("cache: invalid JSON value %.64q", raw)
	}
	*d = valueData{raw: bytes.Clone(raw)}
	switch raw[0] {
	case 'n':
		d.kind = KindNull
	case 't', 'f':
		d.kind, d.b = KindBool, raw[0] == 't'
	case '"':
		d.kind = KindString
		if inner := raw[1 : len(raw)-1]; bytes.IndexByte(inner, '\\') < 0 && utf8.Valid(inner) {
			d.str = string(inner) // valid JSON, no escapes, valid UTF-8: the bytes are the string
		} else if err := json.Unmarshal(raw, &d.str); err != nil {
			return fmt.Errorf("cache: invalid JSON string: %w", err)
		}
		if looksLikeDuration(d.str) {
			if dur, err := time.ParseDuration(d.str); err == nil {
				d.dur, d.isDur = dur, true
			}
		}
	case '[':
		d.kind = KindArray
	case '{':
		d.kind = KindObject
	default:
		d.kind = KindNumber
		f, err := strconv.ParseFloat(string(raw), 64)
		if err != nil && !isRangeErr(err) {
			return fmt.Errorf("cache: invalid JSON number %.64q: %w", raw, err)
		}
		d.num = f
		if n, err := strconv.ParseInt(string(raw), 10, 64); err == nil {
			d.i, d.isInt = n, true
		} else if f == math.Trunc(f) && f >= math.MinInt64 && f < math.MaxInt64 {
			// 1e3 or 2.0: integral, though not written as one.
			d.i, d.isInt = int64(f), true
		}
	}
	return nil
}

// looksLikeDuration is a cheap test that spares time.ParseDuration (and the
// error it allocates) the strings that cannot be durations.
func looksLikeDuration(s string) bool {
	if s == "0" {
		return true
	}
	// Every unit ends in one of "snmh" ("ns", "us", "µs", "ms", "s", "m", "h").
	return len(s) >= 2 && strings.IndexByte("+-.0123456789", s[0]) >= 0 &&
		strings.IndexByte("snmh", s[len(s)-1]) >= 0
}

func isRangeErr(err error) bool {
	ne, ok := err.(*strconv.NumError)
	return ok && ne.Err == strconv.ErrRange
}

// invalid backs the zero Value, so accessors need no nil checks of their own.
var invalid = &valueData{}

func (v Value) data() *valueData {
	if v.d == nil {
		return invalid
	}
	return v.d
}

// Kind reports the JSON type of v.
func (v Value) Kind() Kind { return v.data().kind }

// Raw returns the value's JSON text. The caller must not modify it.
func (v Value) Raw() json.RawMessage { return v.data().raw }

// String returns the string for KindString, and the JSON text otherwise,
// so that a Value prints well.
func (v Value) String() string {
	d := v.data()
	if d.kind == KindString {
		return d.str
	}
	return string(d.raw)
}

// Str returns the string and true for KindString, else "" and false.
func (v Value) Str() (string, bool) {
	d := v.data()
	return d.str, d.kind == KindString
}

// Int returns the number as an int when it is an integer that fits one.
func (v Value) Int() (int, bool) {
	d := v.data()
	if d.kind != KindNumber || !d.isInt || int64(int(d.i)) != d.i {
		return 0, false
	}
	return int(d.i), true
}

// Int64 returns the number as an int64 when it is an integer that fits one.
func (v Value) Int64() (int64, bool) {
	d := v.data()
	return d.i, d.kind == KindNumber && d.isInt
}

// Float returns the number for KindNumber.
func (v Value) Float() (float64, bool) {
	d := v.data()
	return d.num, d.kind == KindNumber
}

// Bool returns the boolean for KindBool.
func (v Value) Bool() (bool, bool) {
	d := v.data()
	return d.b, d.kind == KindBool
}

// Duration returns the duration for a KindString value in
// time.ParseDuration's format ("250ms", "1m30s"), parsed when v was built.
func (v Value) Duration() (time.Duration, bool) {
	d := v.data()
	return d.dur, d.isDur
}

// Decode unmarshals the value's JSON into dst, as json.Unmarshal does. It
// parses on every call: decode once and keep the result where it matters.
func (v Value) Decode(dst any) error {
	if v.d == nil {
		return fmt.Errorf("cache: decode of an invalid value")
	}
	return json.Unmarshal(v.d.raw, dst)
}

// Equal reports whether a and b have the same JSON text.
func (a Value) Equal(b Value) bool {
	if a.d == b.d {
		return true
	}
	return a.Kind() == b.Kind() && bytes.Equal(a.Raw(), b.Raw())
}
