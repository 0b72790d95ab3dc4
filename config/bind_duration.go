package config

import (
	"bytes"
	"encoding"
	"encoding/json"
	"reflect"
	"strings"
	"time"
)

// Bind decodes with encoding/json, which reads a time.Duration only as a
// number of nanoseconds. The Duration getter reads the strings of
// time.ParseDuration ("250ms"), and so does Bind: before decoding into a T
// that holds a time.Duration anywhere, it rewrites each such string found
// where T has a time.Duration into its number of nanoseconds. Nothing else
// changes: what json.Unmarshal accepted before it still accepts, and what
// it refused it still refuses (with its own error).

var (
	durationType        = reflect.TypeFor[time.Duration]()
	jsonUnmarshalerType = reflect.TypeFor[json.Unmarshaler]()
	textUnmarshalerType = reflect.TypeFor[encoding.TextUnmarshaler]()
)

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
	case reflect.Pointer, reflect.Slice, reflect.Array:
		return hasDurationSeen(t.Elem(), seen)
	case reflect.Map:
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

// decodeDurations unmarshals raw into dst (a *T), reading duration strings
// where T has a time.Duration.
func decodeDurations(raw []byte, dst any, t reflect.Type) error {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber() // numbers pass through exactly
	var tree any
	if err := dec.Decode(&tree); err != nil {
		return json.Unmarshal(raw, dst) // its own error
	}
	tree, changed := rewriteDurations(t, tree)
	if !changed {
		return json.Unmarshal(raw, dst)
	}
	fixed, err := json.Marshal(tree)
	if err != nil {
		return json.Unmarshal(raw, dst)
	}
	return json.Unmarshal(fixed, dst)
}

// rewriteDurations walks the decoded JSON v along type t, replacing each
// duration string at a time.Duration with its nanoseconds.
func rewriteDurations(t reflect.Type, v any) (any, bool) {
	if t == durationType {
		if s, ok := v.(string); ok {
			if d, err := time.ParseDuration(s); err == nil {
				return json.Number(formatInt(int64(d))), true
			}
		}
		return v, false
	}
	if decodesItself(t) {
		return v, false
	}
	switch t.Kind() {
	case reflect.Pointer:
		return rewriteDurations(t.Elem(), v)
	case reflect.Slice, reflect.Array:
		arr, ok := v.([]any)
		if !ok {
			return v, false
		}
		changed := false
		for i, x := range arr {
			var c bool
			if arr[i], c = rewriteDurations(t.Elem(), x); c {
				changed = true
			}
		}
		return arr, changed
	case reflect.Map:
		obj, ok := v.(map[string]any)
		if !ok {
			return v, false
		}
		changed := false
		for k, x := range obj {
			var c bool
			if obj[k], c = rewriteDurations(t.Elem(), x); c {
				changed = true
			}
		}
		return obj, changed
	case reflect.Struct:
		obj, ok := v.(map[string]any)
		if !ok {
			return v, false
		}
		fields := jsonFields(t)
		changed := false
		for k, x := range obj {
			f, ok := fields.lookup(k)
			if !ok {
				continue
			}
			var c bool
			if f.quoted {
				obj[k], c = rewriteQuoted(f.t, x)
			} else {
				obj[k], c = rewriteDurations(f.t, x)
			}
			if c {
				changed = true
			}
		}
		return obj, changed
	}
	return v, false
}

// rewriteQuoted is rewriteDurations for a field tagged ",string", whose
// JSON is a string holding the number: a duration string becomes the
// string of its nanoseconds, which is what json.Unmarshal reads there.
func rewriteQuoted(t reflect.Type, v any) (any, bool) {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t != durationType {
		return v, false
	}
	if s, ok := v.(string); ok {
		if d, err := time.ParseDuration(s); err == nil {
			return formatInt(int64(d)), true
		}
	}
	return v, false
}

func formatInt(n int64) string {
	b, _ := json.Marshal(n)
	return string(b)
}

// fieldSet is a struct's JSON field names and types, as encoding/json
// matches them: the exact name first, then without regard to case.
type fieldSet map[string]jsonField

// jsonField is a field's type, and whether its tag says ",string".
type jsonField struct {
	t      reflect.Type
	quoted bool
}

func (f fieldSet) lookup(key string) (jsonField, bool) {
	if jf, ok := f[key]; ok {
		return jf, true
	}
	for name, jf := range f {
		if strings.EqualFold(name, key) {
			return jf, true
		}
	}
	return jsonField{}, false
}

// jsonFields lists t's fields by JSON name: the tag's name or the field's,
// skipping "-", with the fields of untagged embedded structs promoted
// (outer fields win, as in encoding/json).
func jsonFields(t reflect.Type) fieldSet {
	out := fieldSet{}
	var walk func(t reflect.Type, depth int)
	walk = func(t reflect.Type, depth int) {
		if depth > 8 {
			return
		}
		var embedded []reflect.Type
		for i := range t.NumField() {
			f := t.Field(i)
			tag := f.Tag.Get("json")
			if tag == "-" {
				continue
			}
			name, opts, _ := strings.Cut(tag, ",")
			ft := f.Type
			if f.Anonymous && name == "" {
				et := ft
				if et.Kind() == reflect.Pointer {
					et = et.Elem()
				}
				if et.Kind() == reflect.Struct {
					embedded = append(embedded, et)
					continue
				}
			}
			if !f.IsExported() {
				continue
			}
			if name == "" {
				name = f.Name
			}
			if _, taken := out[name]; !taken {
				out[name] = jsonField{t: ft, quoted: hasOption(opts, "string")}
			}
		}
		for _, et := range embedded {
			walk(et, depth+1)
		}
	}
	walk(t, 0)
	return out
}

// hasOption reports whether a json tag's comma-separated options include
// opt.
func hasOption(opts, opt string) bool {
	for opts != "" {
		var o string
		o, opts, _ = strings.Cut(opts, ",")
		if o == opt {
			return true
		}
	}
	return false
}
