package configmetrics_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/holdfast-dev/holdfast/internal/cachedir"
	"github.com/holdfast-dev/holdfast/internal/sdksuite"
	"github.com/holdfast-dev/holdfast/internal/snapshot"
	"github.com/holdfast-dev/holdfast/transport"
)

// The helpers of config's own tests that the harness (internal/sdksuite)
// does not hold, as far as the tests here need them.

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const waitLimit = sdksuite.WaitLimit

// funcSource is a Source whose answers a test scripts. A nil watch waits
// for its context.
type funcSource struct {
	snapshot func(ctx context.Context, req transport.SnapshotRequest) (*transport.Snapshot, error)
	watch    func(ctx context.Context, req transport.WatchRequest, handle func(transport.Event) error) error
}

func (s *funcSource) Snapshot(ctx context.Context, req transport.SnapshotRequest) (*transport.Snapshot, error) {
	return s.snapshot(ctx, req)
}

func (s *funcSource) Watch(ctx context.Context, req transport.WatchRequest, handle func(transport.Event) error) error {
	if s.watch == nil {
		<-ctx.Done()
		return ctx.Err()
	}
	return s.watch(ctx, req, handle)
}

// writeCacheFile writes a last-good file for ns at revision rev of store
// "s1", confirmed at confirmedAt, as an earlier run of the client would.
func writeCacheFile(t *testing.T, dir, ns string, rev int64, kv map[string]string, confirmedAt time.Time) {
	t.Helper()
	raw := make(map[string]json.RawMessage, len(kv))
	for k, v := range kv {
		b, _ := json.Marshal(v)
		raw[k] = b
	}
	snap, err := snapshot.Build(ns, "s1", rev, raw)
	if err != nil {
		t.Fatal(err)
	}
	d, err := cachedir.OpenDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	rec := &cachedir.Record{Namespace: ns, StoreID: "s1", Revision: rev, Cursor: rev, ConfirmedAt: confirmedAt, Snapshot: snap}
	if err := d.Save(rec); err != nil {
		t.Fatal(err)
	}
}
