package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/holdfast-dev/holdfast/controlapi"
)

// TestNeverReadersAtTheServer: `holdfast server` under the snapshot
// never-readers of the relay's attack suite (relay/internal/attacker,
// connecting from 127.0.0.2): 64 HTTP/1.1 connections asking for a
// 6 MiB snapshot, and 4 HTTP/2 connections of 16 zero-window streams of
// it, neither ever reading, renewed every 2 s. A healthy client on
// 127.0.0.1 has every snapshot served, its p99 within max(2× its quiet
// p99, 100 ms) (docs/SECURITY.md, "Snapshot admission").
func TestNeverReadersAtTheServer(t *testing.T) {
	if testing.Short() {
		t.Skip("two attacks of a few seconds on a server process")
	}
	bin := buildBinary(t)
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go tool on PATH to build the attacker with")
	}
	attacker := filepath.Join(t.TempDir(), "attacker")
	if out, err := exec.Command(goTool, "build", "-o", attacker, "github.com/holdfast-dev/holdfast/relay/internal/attacker").CombinedOutput(); err != nil {
		t.Fatalf("building the attacker: %v\n%s", err, out)
	}
	srv := startServerProc(t, bin, "-memory")
	c := controlClient(t, srv.url(), nil)
	blob, _ := json.Marshal(strings.Repeat("x", 512<<10))
	for part := range 12 { // 6 MiB, in publishes under the body limit
		if _, err := c.Publish(context.Background(), "huge", controlapi.PublishRequest{Puts: map[string]json.RawMessage{fmt.Sprint("part-", part): blob}}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := publishApp(c, "v", 1); err != nil {
		t.Fatal(err)
	}
	tr := &http.Transport{}
	defer tr.CloseIdleConnections()
	hc := &http.Client{Transport: tr, Timeout: 10 * time.Second}
	// probe asks for app's snapshot every 20 ms for d.
	probe := func(d time.Duration) (p99 time.Duration, failed []string) {
		var took []time.Duration
		for end := time.Now().Add(d); time.Now().Before(end); time.Sleep(20 * time.Millisecond) {
			start := time.Now()
			resp, err := hc.Get(srv.url() + "/sdk/snapshot?ns=app")
			if err != nil {
				failed = append(failed, err.Error())
				continue
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			took = append(took, time.Since(start))
			if resp.StatusCode != http.StatusOK {
				failed = append(failed, resp.Status)
			}
		}
		slices.Sort(took)
		if len(took) == 0 {
			return time.Hour, failed
		}
		return took[min(len(took)-1, len(took)*99/100)], failed
	}
	quiet, failed := probe(2 * time.Second)
	if len(failed) > 0 {
		t.Fatalf("quiet: %d healthy snapshots not served, e.g. %s", len(failed), failed[0])
	}
	for _, name := range []string{"http1-never-readers", "h2-never-readers"} {
		t.Run(name, func(t *testing.T) {
			cmd := exec.Command(attacker, "-addr", srv.addr, "-attack", name, "-path", "/sdk/snapshot?ns=huge", "-from", "127.0.0.2", "-renew", "2s")
			stdin, _ := cmd.StdinPipe()
			stdout, _ := cmd.StdoutPipe()
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			defer func() { stdin.Close(); _ = cmd.Wait() }()
			if line, err := bufio.NewReader(stdout).ReadString('\n'); line != "attacking\n" {
				t.Fatalf("the attacker did not start: %q %v", line, err)
			}
			time.Sleep(500 * time.Millisecond) // the attack under way
			p99, failed := probe(3 * time.Second)
			t.Logf("healthy snapshot p99 %v (quiet %v), %d not served", p99, quiet, len(failed))
			if len(failed) > 0 {
				t.Errorf("%d healthy snapshots not served, e.g. %s", len(failed), failed[0])
			}
			if bound := max(2*quiet, 100*time.Millisecond); p99 > bound {
				t.Errorf("healthy snapshot p99 %v under attack, quiet %v: want at most %v", p99, quiet, bound)
			}
		})
	}
}
