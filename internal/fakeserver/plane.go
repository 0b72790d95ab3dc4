package fakeserver

import (
	"encoding/json"

	"github.com/holdfast-dev/holdfast/internal/dataplane"
)

// withoutReserved returns content without its reserved keys (the base a
// client serves): content itself when it has none, else a copy.
func withoutReserved(content map[string]json.RawMessage) map[string]json.RawMessage {
	return dataplane.WithoutReserved(content)
}
