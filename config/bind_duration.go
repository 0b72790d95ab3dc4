package config

import (
	"encoding"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strconv"
	"strings"
	"time"
)

// Bind decodes with encoding/json, which reads a time.Duration only as a
// number of nanoseconds. The Duration getter reads the strings of
// time.ParseDuration ("250ms") too, and so does Bind. It does so without
// deciding itself which JSON key fills which field (encoding/json's rules
// of tags, case, embedding, depth and ambiguity): for a T that holds a
// time.Duration anywhere, it decodes with encoding/json into a shadow of
// T, the same type field for field but with each time.Duration a
// jsonDuration, which reads either; then it copies the shadow into a T.
// What json.Unmarshal accepted before it still accepts, and what it
// refused it still refuses.

var (
	durationType        = reflect.TypeFor[time.Duration]()
	jsonDurationType    = reflect.TypeFor[jsonDuration]()
	jsonUnmarshalerType = reflect.TypeFor[json.Unmarshaler]()
	textUnmarshalerType = reflect.TypeFor[encoding.TextUnmarshaler]()
)

// jsonDuration is a time.Duration in a shadow: a number of nanoseconds or
// a duration string.
type jsonDuration int64

// UnmarshalJSON reads a JSON number of nanoseconds or a JSON string of
// time.ParseDuration; in a field tagged ",string", encoding/json hands it
// the string's content, either of those unquoted. null changes nothing.
func (d *jsonDuration) UnmarshalJSON(b []byte) error {
	text := string(b)
	switch {
	case text == "null":
		return nil
	case len(b) > 0 && b[0] == '"':
		var s string
		if err := json.Unmarshal(b, &s); err != nil {
			return err
		}
		v, err := time.ParseDuration(s)
		if err != nil {
			return &json.UnmarshalTypeError{Value: "string", Type: durationType}
		}
		*d = jsonDuration(v)
		return nil
	}
	if n, err := strconv.ParseInt(text, 10, 64); err == nil {
		*d = jsonDuration(n)
		return nil
	}
	if v, err := time.ParseDuration(text); err == nil {
		*d = jsonDuration(v)
		return nil
	}
	return &json.UnmarshalTypeError{Value: "number " + text, Type: durationType}
}

// hasDuration reports whether decoding into t can reach a time.Duration
// that json.Unmarshal would decode itself.
func hasDuration(t reflect.Type) bool { return hasDurationSeen(t, map[reflect.Type]bool{}) }

func hasDurationSeen(t reflect.Type, seen map[reflect.Type]bool) bool {
	if t == durationType {
		return true
	}
	if seen[t] || decodesItself(t) {
		return false
	}
	seen[t] = true
	switch t.Kind() {
	case reflect.Pointer, reflect.Slice, reflect.Array, reflect.Map:
		return hasDurationSeen(t.Elem(), seen)
	case reflect.Struct:
		for i := range t.NumField() {
			if f := t.Field(i); f.IsExported() || f.Anonymous {
				if hasDurationSeen(f.Type, seen) {
					return true
				}
			}
		}
	}
	return false
}

// decodesItself: json.Unmarshal hands the JSON to t's own method.
func decodesItself(t reflect.Type) bool {
	pt := reflect.PointerTo(t)
	return t.Implements(jsonUnmarshalerType) || pt.Implements(jsonUnmarshalerType) ||
		t.Implements(textUnmarshalerType) || pt.Implements(textUnmarshalerType)
}

// shadow is the decoding type of a T that holds a time.Duration.
type shadow struct {
	t, s reflect.Type
	// fields maps each struct shadow to the fields of its original that it
	// carries: shadow field i is original field fields[s][i].
	fields map[reflect.Type][]int
}

// newShadow returns the shadow of t, or nil when t holds no time.Duration
// or when reflect cannot build one (a struct that embeds itself); then
// Bind decodes into t directly, durations as numbers only.
func newShadow(t reflect.Type) (sh *shadow) {
	if !hasDuration(t) {
		return nil
	}
	defer func() {
		if recover() != nil { // reflect.StructOf refused a field
			sh = nil
		}
	}()
	sh = &shadow{t: t, fields: map[reflect.Type][]int{}}
	b := shadowBuilder{sh: sh, done: map[reflect.Type]reflect.Type{}, building: map[reflect.Type]bool{}}
	sh.s = b.of(t)
	if b.failed {
		return nil
	}
	return sh
}

type shadowBuilder struct {
	sh       *shadow
	done     map[reflect.Type]reflect.Type
	building map[reflect.Type]bool // a type within itself keeps its own type
	failed   bool
}

// of is t's shadow type, t itself where nothing in it is a Duration.
func (b *shadowBuilder) of(t reflect.Type) reflect.Type {
	switch {
	case t == durationType:
		return jsonDurationType
	case b.building[t] || decodesItself(t) || !hasDuration(t):
		return t
	}
	if s, ok := b.done[t]; ok {
		return s
	}
	b.building[t] = true
	defer delete(b.building, t)
	s := t
	switch t.Kind() {
	case reflect.Pointer:
		s = reflect.PointerTo(b.of(t.Elem()))
	case reflect.Slice:
		s = reflect.SliceOf(b.of(t.Elem()))
	case reflect.Array:
		s = reflect.ArrayOf(t.Len(), b.of(t.Elem()))
	case reflect.Map:
		s = reflect.MapOf(t.Key(), b.of(t.Elem()))
	case reflect.Struct:
		s = b.structOf(t)
	}
	b.done[t] = s
	return s
}

// structOf builds the shadow of struct t: the fields encoding/json can
// see, with their names, tags and embedding; unexported fields, which it
// does not see, are left out. An embedded struct's shadow is always built
// (an unnamed struct has no methods for reflect.StructOf to refuse).
func (b *shadowBuilder) structOf(t reflect.Type) reflect.Type {
	// A first, zero-size field of a type unique to t keeps the shadows of
	// two different types with the same fields apart: encoding/json walks
	// each embedded type once, by type.
	fields := []reflect.StructField{{Name: "HoldfastShadowOf", Type: reflect.ArrayOf(0, t), Tag: `json:"-"`}}
	var from []int
	for i := range t.NumField() {
		f := t.Field(i)
		sf := reflect.StructField{Name: f.Name, Type: f.Type, Tag: f.Tag}
		if f.Anonymous {
			et := f.Type
			if et.Kind() == reflect.Pointer {
				et = et.Elem()
			}
			name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
			switch {
			case !f.IsExported() && et.Kind() != reflect.Struct:
				continue // encoding/json ignores it
			case et.Kind() == reflect.Struct && name == "" && f.Tag.Get("json") != "-":
				if b.building[et] {
					b.failed = true // a struct that embeds itself
					return t
				}
				b.building[et] = true
				st := b.structOf(et)
				delete(b.building, et)
				if f.Type.Kind() == reflect.Pointer {
					st = reflect.PointerTo(st)
				}
				sf = reflect.StructField{Name: "HoldfastEmbedded" + strconv.Itoa(i), Type: st, Tag: f.Tag, Anonymous: true}
			default: // a field by the name of its type, or of its tag
				sf.Type = b.of(f.Type)
				if !f.IsExported() {
					sf.Name = "HoldfastEmbedded" + strconv.Itoa(i)
				}
			}
		} else {
			if !f.IsExported() {
				continue
			}
			sf.Type = b.of(f.Type)
		}
		fields = append(fields, sf)
		from = append(from, i)
	}
	s := reflect.StructOf(fields)
	b.sh.fields[s] = from
	return s
}

// decode unmarshals raw into the shadow, then copies it into dst (a
// pointer to a zero value of the shadow's original type).
func (sh *shadow) decode(raw []byte, dst any) (err error) {
	defer func() {
		if p := recover(); p != nil { // a reflect panic is a bug here, not the application's
			err = fmt.Errorf("config: decoding durations into %v: %v", sh.t, p)
		}
	}()
	sv := reflect.New(sh.s)
	if err := json.Unmarshal(raw, sv.Interface()); err != nil {
		var ute *json.UnmarshalTypeError
		if errors.As(err, &ute) && ute.Struct == "" {
			ute.Struct = sh.t.Name() // a shadow's struct has no name: the path is from T
		}
		return err
	}
	return sh.copy(reflect.ValueOf(dst).Elem(), sv.Elem())
}

// copy sets dst, of an original type, from src, of its shadow.
func (sh *shadow) copy(dst, src reflect.Value) error {
	if dst.Type() == src.Type() {
		switch {
		case src.IsZero():
		case dst.CanSet():
			dst.Set(src)
		case dst.Kind() == reflect.Struct: // embedded, unexported: its exported fields, as encoding/json sets them
			for j := range dst.NumField() {
				if dst.Type().Field(j).IsExported() {
					if err := sh.copy(dst.Field(j), src.Field(j)); err != nil {
						return err
					}
				}
			}
		default:
			return fmt.Errorf("config: cannot set %v in an unexported field", dst.Type())
		}
		return nil
	}
	switch dst.Kind() {
	case reflect.Int64: // a time.Duration from a jsonDuration
		dst.SetInt(src.Int())
	case reflect.Pointer:
		if src.IsNil() {
			return nil
		}
		if !dst.CanSet() {
			return fmt.Errorf("json: cannot set embedded pointer to unexported struct: %v", dst.Type().Elem())
		}
		dst.Set(reflect.New(dst.Type().Elem()))
		return sh.copy(dst.Elem(), src.Elem())
	case reflect.Slice:
		if src.IsNil() {
			return nil
		}
		dst.Set(reflect.MakeSlice(dst.Type(), src.Len(), src.Len()))
		fallthrough
	case reflect.Array:
		for i := range src.Len() {
			if err := sh.copy(dst.Index(i), src.Index(i)); err != nil {
				return err
			}
		}
	case reflect.Map:
		if src.IsNil() {
			return nil
		}
		dst.Set(reflect.MakeMapWithSize(dst.Type(), src.Len()))
		for it := src.MapRange(); it.Next(); {
			v := reflect.New(dst.Type().Elem()).Elem()
			if err := sh.copy(v, it.Value()); err != nil {
				return err
			}
			dst.SetMapIndex(it.Key(), v)
		}
	case reflect.Struct:
		for i, j := range sh.fields[src.Type()] {
			if err := sh.copy(dst.Field(j), src.Field(i+1)); err != nil {
				return err
			}
		}
	}
	return nil
}
