package server_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/holdfast-dev/holdfast/controlapi"
	"github.com/holdfast-dev/holdfast/internal/testutil"
	"github.com/holdfast-dev/holdfast/server/store"
	"github.com/holdfast-dev/holdfast/transport/etcd"
)

// reportPercentiles reports the p50 and p99 of ds, in milliseconds.
func reportPercentiles(b *testing.B, ds []time.Duration) {
	slices.Sort(ds)
	at := func(q float64) float64 {
		return float64(ds[min(len(ds)-1, int(q*float64(len(ds))))].Microseconds()) / 1000
	}
	b.ReportMetric(at(0.50), "p50-ms")
	b.ReportMetric(at(0.99), "p99-ms")
}

// BenchmarkPublish: a publish through the control API (HTTP on loopback
// → committed in the embedded etcd, fsync included → 200), one at a
// time. Its floor is BenchmarkFsyncFloor, on the same disk:
//
//	go test -run '^$' -bench 'Publish|FsyncFloor' -benchtime 1000x ./server/
func BenchmarkPublish(b *testing.B) {
	c := benchServer(b)
	ds := make([]time.Duration, 0, b.N)
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		req := controlapi.PublishRequest{Puts: testutil.JSONValues(b, map[string]any{"v": i, "mode": "fast"}), Actor: "bench"}
		start := time.Now()
		if _, err := c.Publish(context.Background(), "bench", req); err != nil {
			b.Fatalf("publish: %v", err)
		}
		ds = append(ds, time.Since(start))
	}
	b.StopTimer()
	reportPercentiles(b, ds)
}

// BenchmarkFsyncFloor: what a durable write costs on this disk: 256 bytes
// written and fsync'd, the least an etcd commit does (its WAL).
func BenchmarkFsyncFloor(b *testing.B) {
	f, err := os.Create(filepath.Join(b.TempDir(), "wal"))
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	buf := make([]byte, 256)
	ds := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for range b.N {
		start := time.Now()
		if _, err := f.Write(buf); err != nil {
			b.Fatal(err)
		}
		if err := f.Sync(); err != nil {
			b.Fatal(err)
		}
		ds = append(ds, time.Since(start))
	}
	b.StopTimer()
	reportPercentiles(b, ds)
}

// BenchmarkEmbeddedStart: opening the embedded store of a data dir that
// holds 100 namespaces and 100,000 audit records, to the store id read
// (what a server does before it listens):
//
//	go test -run '^$' -bench EmbeddedStart -benchtime 5x ./server/
func BenchmarkEmbeddedStart(b *testing.B) {
	dir := b.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	st, err := store.Open(ctx, store.Config{Kind: store.KindEmbedded, DataDir: dir})
	if err != nil {
		b.Fatal(err)
	}
	record := `{"prev_revision":1,"committed_at":"2026-12-01T00:00:00Z","actor":"bench","reason":"fill","kind":"publish","puts":["k"],"deletes":[],"values":{"k":12345}}`
	for ns := range 100 {
		name := fmt.Sprintf("ns%03d", ns)
		if _, err := st.Client.Put(ctx, etcd.Prefix(name)+"k", "1"); err != nil {
			b.Fatal(err)
		}
		for batch := range 10 { // 1,000 records a namespace, 100 a transaction
			ops := make([]clientv3.Op, 0, 100)
			for i := range 100 {
				ops = append(ops, clientv3.OpPut(fmt.Sprintf("%s%s/%016x", store.AuditRoot, name, batch*100+i+1), record))
			}
			if _, err := st.Client.Txn(ctx).Then(ops...).Commit(); err != nil {
				b.Fatal(err)
			}
		}
	}
	if err := st.Close(); err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	for range b.N {
		st, err := store.Open(ctx, store.Config{Kind: store.KindEmbedded, DataDir: dir})
		if err != nil {
			b.Fatal(err)
		}
		b.StopTimer()
		if err := st.Close(); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
	}
}
