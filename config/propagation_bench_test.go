package config_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/holdfast-dev/holdfast/config"
	"github.com/holdfast-dev/holdfast/internal/cachedir"
	"github.com/holdfast-dev/holdfast/internal/fakeserver"
	"github.com/holdfast-dev/holdfast/internal/snapshot"
)

// BenchmarkPropagation100Clients measures publish → OnChange fired in 100
// in-process clients, over SSE from the reference server: p50 and p99 of
// every client's delay, over b.N publishes (use -benchtime 20x or more).
func BenchmarkPropagation100Clients(b *testing.B) {
	srv, err := fakeserver.Start()
	if err != nil {
		b.Fatal(err)
	}
	defer srv.Close()
	if _, err := srv.Publish("prop", map[string]any{"k": 0}); err != nil {
		b.Fatal(err)
	}
	const clients = 100
	var mu sync.Mutex
	var start time.Time
	var wg sync.WaitGroup
	var delays []time.Duration
	for range clients {
		c, err := config.New(config.WithEndpoint(srv.URL()))
		if err != nil {
			b.Fatal(err)
		}
		defer c.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		ns, err := c.Namespace(ctx, "prop")
		cancel()
		if err != nil {
			b.Fatal(err)
		}
		ns.OnChange("k", func(config.Change) {
			mu.Lock()
			delays = append(delays, time.Since(start))
			mu.Unlock()
			wg.Done()
		})
	}
	b.ResetTimer()
	for i := range b.N {
		wg.Add(clients)
		mu.Lock()
		start = time.Now()
		mu.Unlock()
		if _, err := srv.Publish("prop", map[string]any{"k": i + 1}); err != nil {
			b.Fatal(err)
		}
		wg.Wait()
	}
	b.StopTimer()
	slices.Sort(delays)
	b.ReportMetric(float64(delays[len(delays)/2].Microseconds()), "p50-µs")
	b.ReportMetric(float64(delays[len(delays)*99/100].Microseconds()), "p99-µs")
}

// BenchmarkOpenFromDisk1MiB measures Client.Namespace to the first Get
// from a 1 MiB last-good file with the server down, beside the cache's
// own Load of the same file (the floor: read, checksum, decode).
func BenchmarkOpenFromDisk1MiB(b *testing.B) {
	dir := b.TempDir()
	raw := make(map[string]json.RawMessage, 5000)
	for i := range 5000 {
		v, _ := json.Marshal(strconv.Itoa(i) + strings.Repeat("x", 180))
		raw["service/key-"+strconv.Itoa(i)] = v
	}
	snap, err := snapshot.Build("big", "store", 7, raw)
	if err != nil {
		b.Fatal(err)
	}
	d, err := cachedir.OpenDir(dir)
	if err != nil {
		b.Fatal(err)
	}
	if err := d.Save(&cachedir.Record{Namespace: "big", StoreID: "store", Revision: 7, Cursor: 7, ConfirmedAt: time.Now(), Snapshot: snap}); err != nil {
		b.Fatal(err)
	}
	if fi, err := os.Stat(dir + "/big.hfc"); err == nil {
		b.Logf("file: %d bytes", fi.Size())
	}
	// A server that is down: every request fails at once.
	down := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, `{"error":"unavailable"}`, http.StatusServiceUnavailable)
	}))
	defer down.Close()

	b.Run("Load", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := d.Load("big"); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("Namespace+Get", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			c, err := config.New(config.WithEndpoint(down.URL), config.WithCacheDir(dir), config.WithReconnectBackoff(time.Hour, time.Hour))
			if err != nil {
				b.Fatal(err)
			}
			ns, err := c.Namespace(context.Background(), "big")
			if err != nil {
				b.Fatal(err)
			}
			if _, ok := ns.Get("service/key-4999"); !ok {
				b.Fatal("missing key")
			}
			b.StopTimer()
			_ = c.Close()
			b.StartTimer()
		}
	})
}
