package wire

import (
	"encoding/json"
	"time"
)

// ChangeSet is one atomic publish to one namespace: every put and delete of
// it shares one revision. PrevRevision is the namespace's revision before it,
// so a client can tell a gap (PrevRevision != what it applied) from a
// duplicate (Revision <= what it applied). A change carries no age: it is
// the origin's data, passed through relays unchanged (a relay follows a
// backlog of changes with a progress that says how old they are).
type ChangeSet struct {
	Namespace    string                     `json:"ns"`
	Revision     int64                      `json:"revision"`
	PrevRevision int64                      `json:"prev_revision"`
	StoreID      string                     `json:"store_id"`
	CommittedAt  time.Time                  `json:"committed_at"`
	Puts         map[string]json.RawMessage `json:"puts,omitempty"`
	Deletes      []string                   `json:"deletes,omitempty"`
	// Raw is the change set as it came on the wire, when a source decoded
	// it (the HTTP source does): a relay serves these bytes, so that
	// fields it does not know pass through unchanged. Not encoded. The
	// values of Puts may share its bytes: neither is written in place.
	// (Appending to a value copies it: their capacities are cut.)
	Raw json.RawMessage `json:"-"`
}
