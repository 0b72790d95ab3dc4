package server_test

import (
	"context"
	"fmt"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/holdfast-dev/holdfast/controlapi"
	"github.com/holdfast-dev/holdfast/internal/testutil"
	"github.com/holdfast-dev/holdfast/server"
	"github.com/holdfast-dev/holdfast/server/store"
)

// BenchmarkChangePublish: on the embedded store, in one run, a direct
// publish of one namespace; the publish of an approved change of one
// namespace (its proposal untimed: the change's checks again, its base
// guard and the change's record in the same transaction); and the
// commit of an approved change of three namespaces (one transaction):
//
//	go test -run '^$' -bench ChangePublish -benchtime 200x ./server/
func BenchmarkChangePublish(b *testing.B) {
	ctx := context.Background()
	c := benchServer(b)
	nss := []string{"bench.a", "bench.b", "bench.c"}
	for _, ns := range nss {
		if _, err := c.Publish(ctx, ns, controlapi.PublishRequest{Puts: testutil.JSONValues(b, map[string]any{"v": 0})}); err != nil {
			b.Fatal(err)
		}
	}
	b.Run("direct", func(b *testing.B) {
		ds := make([]time.Duration, 0, b.N)
		b.ReportAllocs()
		for i := range b.N {
			req := controlapi.PublishRequest{Puts: testutil.JSONValues(b, map[string]any{"v": i, "mode": "fast"})}
			start := time.Now()
			if _, err := c.Publish(ctx, nss[0], req); err != nil {
				b.Fatal(err)
			}
			ds = append(ds, time.Since(start))
		}
		reportPercentiles(b, ds)
	})
	for _, n := range []int{1, 3} {
		b.Run(fmt.Sprintf("change-%dns", n), func(b *testing.B) {
			ds := make([]time.Duration, 0, b.N)
			b.ReportAllocs()
			for i := range b.N {
				b.StopTimer()
				req := controlapi.ChangeRequest{Reason: "bench", Namespaces: map[string]controlapi.NamespaceChange{}}
				for _, ns := range nss[:n] {
					req.Namespaces[ns] = controlapi.NamespaceChange{Puts: testutil.JSONValues(b, map[string]any{"v": i, "mode": "fast"})}
				}
				ch, err := c.ProposeChange(ctx, req)
				if err != nil || ch.State != controlapi.ChangeApproved { // no policy: approved as proposed
					b.Fatalf("propose: %+v %v", ch, err)
				}
				b.StartTimer()
				start := time.Now()
				if _, err := c.PublishChange(ctx, ch.ID, controlapi.ChangePublishRequest{}); err != nil {
					b.Fatal(err)
				}
				ds = append(ds, time.Since(start))
			}
			b.StopTimer()
			reportPercentiles(b, ds)
		})
	}
}

// BenchmarkChangePropose: the proposal of a change of 10 keys to a
// namespace of 500 keys on the embedded store: its review (the diff, the
// schema, the lints the server has, the reach) and the record's write.
// The review's share is what it adds to the record's write, which
// BenchmarkChangePublish's direct publish approximates:
//
//	go test -run '^$' -bench ChangePropose -benchtime 200x ./server/
func BenchmarkChangePropose(b *testing.B) {
	ctx := context.Background()
	c := benchServer(b)
	for part := range 5 { // etcd's 128 operations a transaction
		content := map[string]any{}
		for i := part * 100; i < (part+1)*100; i++ {
			content[fmt.Sprintf("key-%03d", i)] = map[string]any{"limit": i, "mode": "fast", "ratio": 0.5}
		}
		if _, err := c.Publish(ctx, "big", controlapi.PublishRequest{Puts: testutil.JSONValues(b, content)}); err != nil {
			b.Fatal(err)
		}
	}
	if err := c.PutSchema(ctx, "big", []byte(`{"type":"object","additionalProperties":{"type":"object","properties":{"limit":{"type":"integer","minimum":0}}}}`)); err != nil {
		b.Fatal(err)
	}
	ds := make([]time.Duration, 0, b.N)
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		puts := map[string]any{}
		for k := range 10 {
			puts[fmt.Sprintf("key-%03d", (i+k)%500)] = map[string]any{"limit": i + k, "mode": "slow"}
		}
		req := controlapi.ChangeRequest{Reason: "bench", Namespaces: map[string]controlapi.NamespaceChange{"big": {Puts: testutil.JSONValues(b, puts)}}}
		start := time.Now()
		if _, err := c.ProposeChange(ctx, req); err != nil {
			b.Fatal(err)
		}
		ds = append(ds, time.Since(start))
	}
	b.StopTimer()
	reportPercentiles(b, ds)
}

// benchServer starts a server on an embedded store of its own for the
// benchmark, closed with it, and returns a client of its control API.
func benchServer(b *testing.B) *controlapi.Client {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s, err := server.New(ctx, server.Config{Store: store.Config{Kind: store.KindEmbedded, DataDir: b.TempDir()}})
	if err != nil {
		b.Fatal(err)
	}
	hs := httptest.NewServer(s.Handler())
	b.Cleanup(func() {
		hs.Close()
		_ = s.Close()
	})
	return controlClient(b, hs.URL, "")
}
