package testutil

import (
	"encoding/json"
	"testing"
)

// JSONValues returns values encoded as JSON, key by key: the puts of a
// publish written as Go values. It fails tb (Fatal) on a value that does
// not encode.
func JSONValues(tb testing.TB, values map[string]any) map[string]json.RawMessage {
	tb.Helper()
	out := make(map[string]json.RawMessage, len(values))
	for k, v := range values {
		b, err := json.Marshal(v)
		if err != nil {
			tb.Fatal(err)
		}
		out[k] = b
	}
	return out
}
