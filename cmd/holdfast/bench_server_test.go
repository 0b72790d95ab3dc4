package main

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

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
	slices.Sort(ds)
	at := func(q float64) float64 {
		return float64(ds[min(len(ds)-1, int(q*float64(len(ds))))].Microseconds()) / 1000
	}
	b.ReportMetric(at(0.50), "p50-ms")
	b.ReportMetric(at(0.99), "p99-ms")
}
