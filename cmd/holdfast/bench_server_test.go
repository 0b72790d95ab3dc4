package main

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/holdfast-dev/holdfast/config"

	holdfast "github.com/holdfast-dev/holdfast/server"
	"github.com/holdfast-dev/holdfast/server/store"
)

// BenchmarkPublishCluster: a publish through holdfast server's control
// API (HTTP on loopback → committed by a real 3-member etcd cluster of
// Debian's etcd on loopback → 200), one at a time; the server package's
// BenchmarkPublish is the same on the embedded store:
//
//	go test -run '^$' -bench PublishCluster -benchtime 1000x ./cmd/holdfast/
func BenchmarkPublishCluster(b *testing.B) {
	members := startEtcd(b)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s, err := holdfast.New(ctx, holdfast.Config{Store: store.Config{Kind: store.KindExternal, Endpoints: strings.Split(members, ",")}})
	if err != nil {
		b.Fatal(err)
	}
	hs := httptest.NewServer(s.Handler())
	defer func() {
		hs.Close()
		_ = s.Close()
	}()
	hc := &http.Client{Transport: &http.Transport{}}
	url := hs.URL + "/control/namespaces/bench/publish"
	ds := make([]time.Duration, 0, b.N)
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		body, _ := json.Marshal(map[string]any{"puts": map[string]any{"v": i, "mode": "fast"}, "actor": "bench"})
		start := time.Now()
		resp, err := hc.Post(url, "application/json", bytes.NewReader(body))
		if err != nil {
			b.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			b.Fatalf("publish: %s", resp.Status)
		}
		ds = append(ds, time.Since(start))
	}
	b.StopTimer()
	reportPercentiles(b, ds)
}

// BenchmarkRelayFollowingServer: HOLDFAST_BENCH_CLIENTS (default 1,000)
// SDK clients in this process behind one `holdfast relay` process that
// follows a `holdfast server -data-dir` process; publish → OnChange in
// every client, p50 and p99 over b.N publishes (each publish waits for
// every client before the next):
//
//	go test -run '^$' -bench RelayFollowingServer -benchtime 20x ./cmd/holdfast/
//
// A fleet of 10,000 clients needs more descriptors than one process has
// here (each loopback connection costs two): internal/scale splits such a
// fleet over processes behind the reference server.
func BenchmarkRelayFollowingServer(b *testing.B) {
	clients := 1000
	if n, err := strconv.Atoi(os.Getenv("HOLDFAST_BENCH_CLIENTS")); err == nil && n > 0 {
		clients = n
	}
	bin := buildBinary(b)
	srv := startServerProc(b, bin, "-data-dir", b.TempDir())
	cc := controlClient(b, srv.url(), nil)
	publish := func(v int) int64 {
		rev, err := publishApp(cc, "v", v)
		if err != nil {
			b.Fatalf("publish: %v", err)
		}
		return rev
	}
	publish(0)
	rl := startRelayProc(b, bin, srv.url())
	last := make([]atomic.Int64, clients) // the revision of each client's last OnChange
	for i := range clients {
		c, _ := fleetClient(b, []string{rl.url()})
		ns := openNS(b, c, "app")
		ns.OnChange("v", func(ch config.Change) { last[i].Store(ch.Revision) })
	}
	ds := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for i := range b.N {
		start := time.Now()
		rev := publish(i + 1)
		for c := 0; c < clients; {
			if last[c].Load() >= rev {
				c++
				continue
			}
			if time.Since(start) > 30*time.Second {
				b.Fatalf("publish %d: client %d at revision %d 30s after, want %d", i, c, last[c].Load(), rev)
			}
			time.Sleep(time.Millisecond)
		}
		ds = append(ds, time.Since(start))
	}
	b.StopTimer()
	reportPercentiles(b, ds)
}

// reportPercentiles reports the p50 and p99 of ds, in milliseconds.
func reportPercentiles(b *testing.B, ds []time.Duration) {
	slices.Sort(ds)
	at := func(q float64) float64 {
		return float64(ds[min(len(ds)-1, int(q*float64(len(ds))))].Microseconds()) / 1000
	}
	b.ReportMetric(at(0.50), "p50-ms")
	b.ReportMetric(at(0.99), "p99-ms")
}
