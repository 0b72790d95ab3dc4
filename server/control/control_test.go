package control

import (
	"fmt"
	"testing"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
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
