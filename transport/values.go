package transport

import (
	"encoding/json"
	"fmt"
	"slices"
	"unicode/utf8"
)

// EncodeValues writes values as Snapshot.Values: one JSON object, keys in
// sorted order, each value's text as it is. A value that is not exactly
// one JSON value fails with ErrMalformed, naming the first such key: its
// text, spliced into the object, could otherwise make other keys.
func EncodeValues(values map[string]json.RawMessage) (json.RawMessage, error) {
	keys := make([]string, 0, len(values))
	size := 2
	for k, v := range values {
		keys = append(keys, k)
		size += len(k) + len(v) + 4
	}
	slices.Sort(keys)
	out := make([]byte, 0, size)
	out = append(out, '{')
	for i, k := range keys {
		v := values[k]
		if !json.Valid(v) {
			return nil, fmt.Errorf("%w: the value of key %q is not one JSON value", ErrMalformed, truncate(k, 130))
		}
		if i > 0 {
			out = append(out, ',')
		}
		out = appendKey(out, k)
		out = append(out, ':')
		out = append(out, v...)
	}
	return append(out, '}'), nil
}

// appendKey appends k as a JSON string.
func appendKey(out []byte, k string) []byte {
	for i := 0; i < len(k); i++ {
		if c := k[i]; c < 0x20 || c == '"' || c == '\\' || c >= utf8.RuneSelf {
			b, _ := json.Marshal(k) // a string always marshals
			return append(out, b...)
		}
	}
	out = append(out, '"')
	out = append(out, k...)
	return append(out, '"')
}

// countMembers counts the members of obj, one JSON object that json.Valid
// accepts, and stops counting past limit. It allocates nothing: it is how
// a snapshot with too many keys is refused before anything is built for
// them.
func countMembers(obj []byte, limit int) int {
	n, depth := 0, 0
	for i := 0; i < len(obj); i++ {
		switch obj[i] {
		case '"':
			for i++; i < len(obj) && obj[i] != '"'; i++ {
				if obj[i] == '\\' {
					i++
				}
			}
		case '{', '[':
			depth++
		case '}', ']':
			depth--
		case ':':
			if depth == 1 {
				if n++; n > limit {
					return n
				}
			}
		}
	}
	return n
}
