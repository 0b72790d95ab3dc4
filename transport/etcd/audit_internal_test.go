package etcd

import (
	"testing"

	"github.com/holdfast-dev/holdfast/internal/rollout"
)

// The local copy of the reserved prefix is the root module's.
func TestReservedPrefixIsTheRootModules(t *testing.T) {
	if reservedPrefix != rollout.ReservedPrefix {
		t.Fatalf("reservedPrefix %q; the root module reserves %q", reservedPrefix, rollout.ReservedPrefix)
	}
}
