package fakeserver

import (
	"encoding/json"
	"testing"

	"github.com/holdfast-dev/holdfast/transport"
)

// valuesOf decodes a snapshot's values into a map, as only a test would.
func valuesOf(t testing.TB, snap transport.Snapshot) map[string]json.RawMessage {
	t.Helper()
	var m map[string]json.RawMessage
	if err := json.Unmarshal(snap.Values, &m); err != nil {
		t.Fatalf("values %.64q: %v", snap.Values, err)
	}
	return m
}
