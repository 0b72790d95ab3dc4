package wire

import (
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"time"
	"unicode/utf8"
)

// EncodeValues writes values as transport.Snapshot.Values: one JSON
// object, keys in sorted order, each value's text as it is. A value that
// is not exactly one JSON value fails with ErrMalformed, naming
// the first such key: its text, spliced into the object, could otherwise
// make other keys.
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
			return nil, fmt.Errorf("%w: the value of key %q is not one JSON value", ErrMalformed, Truncate(k, 130))
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

// ETag names a namespace's content at one revision of one store. The
// server sets it on snapshots; a client sends it back in If-None-Match
// (transport.HTTPSource does, with this function).
func ETag(storeID string, revision int64) string {
	return `"` + storeID + "." + strconv.FormatInt(revision, 10) + `"`
}

// MaxAge bounds the age a client takes from a server: a larger one (an
// absurd value; ten years) is read as MaxAge, never as younger.
const MaxAge = 10 * 365 * 24 * time.Hour

// AgeFromMillis is a wire age (an AgeMillis field) as a duration: a
// negative one is 0 (it would make data look fresher than the server's
// upstream said), one over MaxAge is MaxAge.
func AgeFromMillis(ms int64) time.Duration {
	if ms <= 0 {
		return 0
	}
	if ms >= int64(MaxAge/time.Millisecond) {
		return MaxAge
	}
	return time.Duration(ms) * time.Millisecond
}
