package etcd_test

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/holdfast-dev/holdfast/transport/transporttest"
)

// The etcd source passes the conformance suite, on the shared cluster,
// through proxies so that a case can cut its connections. Restart and
// Reset are left out: a whole-cluster restart and a new cluster per case
// cost more than they add here (fault_test.go and restore_test.go kill
// members and restore backups). The Source is a transport.StreamSource:
// the suite's stream cases run on it as they are (stream_test.go has the
// etcd-specific ones).
func TestConformance(t *testing.T) {
	transporttest.Run(t, func(t *testing.T) *transporttest.Store {
		cl := sharedCluster(t)
		ps := startProxies(t, cl)
		pub := newSource(t, cl.endpoints())
		return &transporttest.Store{
			Source: newSource(t, ps.urls()),
			Publish: func(t *testing.T, ns string, puts map[string]json.RawMessage, deletes []string) int64 {
				t.Helper()
				ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
				defer cancel()
				rev, err := write(ctx, pub, ns, puts, deletes)
				if err != nil {
					t.Fatalf("publish to %q: %v", ns, err)
				}
				return rev
			},
			Compact: func(t *testing.T, rev int64) {
				t.Helper()
				if _, err := cl.client(t).Compact(context.Background(), rev); err != nil {
					t.Fatal(err)
				}
			},
			Disconnect: func(*testing.T) { ps.drop() },
			// One prefix watch carries the stream; a put elsewhere is an
			// event of it, so progress follows at once.
			RequireStream:  true,
			PromptProgress: true,
		}
	})
}
