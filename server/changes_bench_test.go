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
// schema, the lints that apply, the reach) and the record's write, with
// no lint and with ten: their difference in the same run is what the
// lints cost a proposal, the record's write being the same in both:
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
	propose := func(b *testing.B) {
		ds := make([]time.Duration, 0, b.N)
		b.ReportAllocs()
		for i := range b.N {
			puts := map[string]any{}
			for k := range 10 {
				puts[fmt.Sprintf("key-%03d", (i+k)%500)] = map[string]any{"limit": i + k, "mode": "slow"}
			}
			req := controlapi.ChangeRequest{Reason: "bench", Namespaces: map[string]controlapi.NamespaceChange{"big": {Puts: testutil.JSONValues(b, puts)}}}
			start := time.Now()
			ch, err := c.ProposeChange(ctx, req)
			if err != nil {
				b.Fatal(err)
			}
			ds = append(ds, time.Since(start))
			for _, ck := range ch.Checks {
				if ck.Result != controlapi.CheckPass {
					b.Fatalf("check %s: %s %s", ck.Name, ck.Result, ck.Message)
				}
			}
		}
		b.StopTimer()
		reportPercentiles(b, ds)
	}
	b.Run("lints=0", propose)
	for i, expr := range []string{
		`int(new["key-001"].limit) < 100000`,
		`new.size() >= old.size() - 10`,
		`change.deletes.size() < 50`,
		`new.all(k, k.startsWith("key-"))`,
		`!("forbidden" in new)`,
		`new["key-002"].mode in ["fast", "slow"]`,
		`!has(new["key-003"].ratio) || double(new["key-003"].ratio) <= 1.0`,
		`change.puts.all(k, k in new)`,
		`new.all(k, new[k].mode != "broken")`,
		`int(new["key-010"].limit) - int(old["key-010"].limit) < 100000`,
	} {
		l := controlapi.Lint{Namespaces: "big", Expr: expr, Message: "bench", Severity: controlapi.LintBlock}
		if _, err := c.PutLint(ctx, fmt.Sprintf("bench-%d", i), l); err != nil {
			b.Fatal(err)
		}
	}
	b.Run("lints=10", propose)
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
