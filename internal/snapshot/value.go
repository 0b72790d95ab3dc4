package snapshot

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"
	"unsafe"

	"github.com/holdfast-dev/holdfast/internal/jsonscan"
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
// to immutable data: copying it is copying a pointer. The zero Value has
// KindInvalid.
type Value struct {
	d *valueData
}

// valueData is one decoded value in 24 bytes, because a snapshot holds
// millions of them when its keys are tiny (a 60 MiB snapshot of tiny keys
// once retained 749 MiB). The JSON text is not copied: it is a substring of the
// snapshot's one copy of its values, reached through p and n, and a
// string's content is the text without its quotes when it has no escapes.
// What the typed getters return sits in w, read by kind and flags.
type valueData struct {
	// p is the JSON text's first byte. For a string whose content is not
	// its text (escapes, bytes that are not UTF-8), flagEscaped is set and
	// p is the first byte of one allocation of both, with no header that
	// would cost a tiny value more than the value: the content's length
	// (4 bytes, little-endian), the content, and a copy of the text.
	p     unsafe.Pointer
	n     uint32 // the JSON text's length
	kind  Kind
	flags uint8
	// tag is the low bits of the key's hash, set when the value is placed
	// in a snapshot's index (it fills what would be padding): Get compares
	// only the keys of its bucket whose tag matches. set and decode keep it.
	tag uint16
	// w is the int64 of an integer (flagInt), the bits of any other
	// number's float64, the time.Duration of a string (flagDur), 1 for true.
	w uint64
}

const (
	flagInt     = 1 << iota // a number that is an integer that fits int64 exactly
	flagNegZero             // an integer written as negative zero ("-0"): Float gives -0
	flagDur                 // a string that parses with time.ParseDuration
	flagEscaped             // a string whose content differs from its text
)

// decode checks raw and fills d from a copy of it.
func (d *valueData) decode(raw []byte) error {
	raw = bytes.Trim(raw, " \t\r\n") // JSON white space only
	if len(raw) == 0 {
		return fmt.Errorf("cache: empty value")
	}
	text := string(raw)
	if err := jsonscan.ValidValue(text); err != nil {
		return fmt.Errorf("cache: invalid JSON value %.64q: %w", raw, err)
	}
	return d.set(text)
}

// set fills d from text, one valid JSON value without white space around
// it, which d keeps: text must never change.
func (d *valueData) set(text string) error {
	if uint64(len(text)) > math.MaxUint32 {
		return fmt.Errorf("cache: a value of %d bytes", len(text))
	}
	*d = valueData{p: unsafe.Pointer(unsafe.StringData(text)), n: uint32(len(text)), tag: d.tag}
	switch text[0] {
	case 'n':
		d.kind = KindNull
	case 't', 'f':
		d.kind = KindBool
		if text[0] == 't' {
			d.w = 1
		}
	case '"':
		d.kind = KindString
		str := text[1 : len(text)-1]
		if strings.IndexByte(str, '\\') >= 0 || !utf8.ValidString(str) {
			// Rare: escapes or bad UTF-8 need decoding (see p).
			var buf [64]byte
			content := jsonscan.AppendUnquoted(buf[:0], text)
			if uint64(len(content)) > math.MaxUint32 {
				return fmt.Errorf("cache: a string of %d bytes", len(content))
			}
			both := binary.LittleEndian.AppendUint32(make([]byte, 0, 4+len(content)+len(text)), uint32(len(content)))
			both = append(append(both, content...), text...)
			d.p, d.flags = unsafe.Pointer(unsafe.SliceData(both)), flagEscaped
			str = d.str()
		}
		if looksLikeDuration(str) {
			if dur, err := time.ParseDuration(str); err == nil {
				d.w, d.flags = uint64(dur), d.flags|flagDur
			}
		}
	case '[':
		d.kind = KindArray
	case '{':
		d.kind = KindObject
	default:
		d.kind = KindNumber
		intLiteral := isIntLiteral(text)
		if intLiteral {
			// An integer literal: ParseInt is exact where a float64 is
			// not (beyond 2^53), and Float converts it as ParseFloat would.
			if i, err := strconv.ParseInt(text, 10, 64); err == nil {
				d.w, d.flags = uint64(i), flagInt
				if i == 0 && text[0] == '-' {
					d.flags |= flagNegZero
				}
				return nil
			}
		}
		f, err := strconv.ParseFloat(text, 64)
		if err != nil && !isRangeErr(err) {
			return fmt.Errorf("cache: invalid JSON number %.64q: %w", text, err)
		}
		// An integer literal that ParseInt refused is outside int64, even
		// when its float64 rounds to -2^63 (-9223372036854775809 does).
		if !intLiteral && f == math.Trunc(f) && f >= math.MinInt64 && f < math.MaxInt64 {
			// 1e3 or 2.0: integral, though not written as one.
			d.w, d.flags = uint64(int64(f)), flagInt
			if f == 0 && math.Signbit(f) {
				d.flags |= flagNegZero
			}
		} else {
			d.w = math.Float64bits(f)
		}
	}
	return nil
}

// isIntLiteral reports whether a JSON number is written without a fraction
// or an exponent.
func isIntLiteral(num string) bool {
	return !strings.ContainsAny(num, ".eE")
}

// text is the value's JSON text.
func (d *valueData) text() string {
	if d.flags&flagEscaped != 0 {
		return unsafe.String((*byte)(unsafe.Add(d.p, 4+d.contentLen())), d.n)
	}
	return unsafe.String((*byte)(d.p), d.n)
}

// moveText points d at t, a copy of its JSON text, which is a substring of
// a snapshot's text: never a flagEscaped string's, which has its own.
func (d *valueData) moveText(t string) { d.p = unsafe.Pointer(unsafe.StringData(t)) }

// str is a KindString value's content.
func (d *valueData) str() string {
	if d.flags&flagEscaped != 0 {
		return unsafe.String((*byte)(unsafe.Add(d.p, 4)), d.contentLen())
	}
	t := unsafe.String((*byte)(d.p), d.n)
	return t[1 : len(t)-1]
}

// contentLen is a flagEscaped string's content length, the first 4 bytes
// at p (see p: the text follows the content, inside the allocation).
func (d *valueData) contentLen() uint32 {
	return binary.LittleEndian.Uint32(unsafe.Slice((*byte)(d.p), 4))
}

// looksLikeDuration is a cheap test that spares time.ParseDuration (and the
// error it allocates) the strings that cannot be durations.
func looksLikeDuration(s string) bool {
	if s == "0" || s == "-0" || s == "+0" { // the one form without a unit, signed or not
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

// Raw returns the value's JSON text. The caller must not modify it: it is
// the snapshot's own memory.
func (v Value) Raw() json.RawMessage {
	t := v.data().text()
	if len(t) == 0 {
		return nil
	}
	return unsafe.Slice(unsafe.StringData(t), len(t))
}

// String returns the string for KindString, and the JSON text otherwise,
// so that a Value prints well.
func (v Value) String() string {
	d := v.data()
	if d.kind == KindString {
		return d.str()
	}
	return d.text()
}

// Str returns the string and true for KindString, else "" and false.
func (v Value) Str() (string, bool) {
	d := v.data()
	if d.kind != KindString {
		return "", false
	}
	return d.str(), true
}

// Int returns the number as an int when it is an integer that fits one.
func (v Value) Int() (int, bool) {
	d := v.data()
	if d.flags&flagInt == 0 || int64(int(int64(d.w))) != int64(d.w) {
		return 0, false
	}
	return int(int64(d.w)), true
}

// Int64 returns the number as an int64 when it is an integer that fits one.
func (v Value) Int64() (int64, bool) {
	d := v.data()
	if d.flags&flagInt == 0 {
		return 0, false
	}
	return int64(d.w), true
}

// Float returns the number for KindNumber.
func (v Value) Float() (float64, bool) {
	d := v.data()
	switch {
	case d.kind != KindNumber:
		return 0, false
	case d.flags&flagNegZero != 0:
		return math.Copysign(0, -1), true
	case d.flags&flagInt != 0:
		return float64(int64(d.w)), true
	}
	return math.Float64frombits(d.w), true
}

// Bool returns the boolean for KindBool.
func (v Value) Bool() (bool, bool) {
	d := v.data()
	return d.w != 0 && d.kind == KindBool, d.kind == KindBool
}

// Duration returns the duration for a KindString value in
// time.ParseDuration's format ("250ms", "1m30s"), parsed when v was built.
func (v Value) Duration() (time.Duration, bool) {
	d := v.data()
	if d.flags&flagDur == 0 {
		return 0, false
	}
	return time.Duration(int64(d.w)), true
}

// Decode unmarshals the value's JSON into dst, as json.Unmarshal does. It
// parses on every call: decode once and keep the result where it matters.
func (v Value) Decode(dst any) error {
	if v.d == nil {
		return fmt.Errorf("cache: decode of an invalid value")
	}
	return json.Unmarshal(v.Raw(), dst)
}

// Equal reports whether a and b have the same JSON text.
func (a Value) Equal(b Value) bool {
	if a.d == b.d {
		return true
	}
	da, db := a.data(), b.data()
	return da.kind == db.kind && da.text() == db.text()
}
