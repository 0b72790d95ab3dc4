package control

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"

	"github.com/holdfast-dev/holdfast/server/store"
	"github.com/holdfast-dev/holdfast/transport"
)

// TestStoreErrorsAre503: etcd's own "unavailable" errors, which clientv3
// hands back as rpctypes.EtcdError (no gRPC status), are 503 with the
// store's silence named: a publish during an etcd leader change, or
// against an overloaded member.
func TestStoreErrorsAre503(t *testing.T) {
	for _, e := range []error{rpctypes.ErrLeaderChanged, rpctypes.ErrTooManyRequests, rpctypes.ErrTimeoutDueToConnectionLost, rpctypes.ErrStopped} {
		err := fmt.Errorf("etcd: publish of %q: %w", "ns", e) // as mapError wraps
		if st, body, ok := mapError(err); !ok || st != 503 {
			t.Errorf("%v: status %d %s; want 503 with Retry-After", e, st, body.Error)
		}
	}
}

// TestErrorsInAnOperatorsWords: a store that does not answer (quorum
// lost: the request's deadline passes) is said so, with what to do, not
// in the words of the code that waited; a namespace that does not exist
// is "not found" by its name.
func TestErrorsInAnOperatorsWords(t *testing.T) {
	for _, err := range []error{
		fmt.Errorf("control: rollout of %q: %w", "scratch.ns", context.DeadlineExceeded),
		fmt.Errorf("etcd: publish of %q: %w", "scratch.ns", rpctypes.ErrNoLeader),
	} {
		st, body, ok := mapError(err)
		if !ok || st != http.StatusServiceUnavailable || !strings.HasPrefix(body.Message, "the store did not answer (") ||
			!strings.Contains(body.Message, "quorum") || strings.Contains(body.Message, "context deadline") || strings.Contains(body.Message, "control: rollout") {
			t.Errorf("%v: %d %q", err, st, body.Message)
		}
	}
	err := store.NamespaceNotFound("nosuch.ns", fmt.Errorf("etcd: snapshot of %q: %w", "nosuch.ns", transport.ErrNotFound))
	if err.Error() != `namespace "nosuch.ns" not found` || !errors.Is(err, transport.ErrNotFound) {
		t.Errorf("not found: %v", err)
	}
}
