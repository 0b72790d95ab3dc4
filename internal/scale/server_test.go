//go:build scale

package scale

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/holdfast-dev/holdfast/internal/acks"
)

// BenchmarkRelayFollowingHoldfastServer: HOLDFAST_SCALE_CLIENTS (default
// 10,000) clients in HOLDFAST_SCALE_PROCS child processes behind one relay
// (a child process) that follows a `holdfast server -data-dir` process
// over its embedded etcd; publish → every client's OnChange, p50 and p99
// over every client of HOLDFAST_SCALE_PUBLISHES publishes:
//
//	go test -tags scale -run '^$' -bench RelayFollowingHoldfastServer -benchtime 1x -timeout 30m ./internal/scale/
func BenchmarkRelayFollowingHoldfastServer(b *testing.B) {
	clients := envInt("HOLDFAST_SCALE_CLIENTS", 10000)
	procs := envInt("HOLDFAST_SCALE_PROCS", 2)
	publishes := envInt("HOLDFAST_SCALE_PUBLISHES", 20)
	for range b.N {
		url := startHoldfastServer(b)
		hc := &http.Client{Timeout: 10 * time.Second}
		publish := func(puts map[string]any) error {
			body, err := json.Marshal(map[string]any{"puts": puts})
			if err != nil {
				return err
			}
			resp, err := hc.Post(url+"/control/namespaces/"+namespace+"/publish", "application/json", bytes.NewReader(body))
			if err != nil {
				return err
			}
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				return fmt.Errorf("publish: %s", resp.Status)
			}
			return nil
		}
		if err := publish(map[string]any{key: "0:0"}); err != nil {
			b.Fatal(err)
		}
		rl := startRelay(b, url, "127.0.0.1:0", "")
		kids := startClients(b, rl.url, clients, procs)
		for i := 1; i <= publishes; i++ {
			publishSeqWith(b, publish, kids, i)
			time.Sleep(acks.AckDelayPlainMax + 500*time.Millisecond) // let the acks of this publish land before the next
		}
		var all, later []time.Duration
		for i, ds := range delaysByPublish(b, kids) {
			all = append(all, ds...)
			if i > 0 {
				later = append(later, ds...)
			}
		}
		logErrors(b, kids)
		if len(all) != clients*publishes {
			b.Fatalf("%d delays, want %d", len(all), clients*publishes)
		}
		slices.Sort(all)
		slices.Sort(later)
		b.ReportMetric(float64(all[len(all)/2].Milliseconds()), "p50-ms")
		b.ReportMetric(float64(all[len(all)*99/100].Milliseconds()), "p99-ms")
		if len(later) > 0 {
			b.ReportMetric(float64(later[len(later)*99/100].Milliseconds()), "p99-ms-after-first")
		}
	}
}

// startHoldfastServer builds the holdfast command and runs `holdfast
// server` over a fresh data directory on a free loopback port, until the
// benchmark ends; it returns its URL once /readyz answers 200.
func startHoldfastServer(b *testing.B) string {
	b.Helper()
	return startHoldfast(b, buildHoldfast(b), "server", "-data-dir", filepath.Join(b.TempDir(), "data")).url
}
