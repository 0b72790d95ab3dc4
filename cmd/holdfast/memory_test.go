package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/holdfast-dev/holdfast/controlapi"
	"github.com/holdfast-dev/holdfast/internal/memstat"
	"github.com/holdfast-dev/holdfast/server/store"
)

// TestServerMemoryAfterLargePublishes is the attack suite's case of
// memory that grows with large publishes and is not given back (400
// publishes of 600 KB to one namespace of 3 keys took the embedded
// server from 34 MiB to 3.7 GiB, still there 20 s later): a `holdfast
// server -data-dir` process takes publishes of 600 KB to one namespace of
// 3 keys, rests, and its resident set (from /proc) must be within
//
//	2 × its start + the store's own working set,
//
// the working set being etcd's file (mapped: its pages count in the
// resident set once touched) and the embedded member's raft log, which
// holds at most store.RaftLogEntries entries (each one publish, value
// and audit record). The default run takes 150 publishes and a 20 s
// rest (the bound scales with the file, which grows with the publishes;
// the raft log's share is the same), HOLDFAST_ATTACK_FULL=1 the issue's
// 400 and a minute. The resident set is the median of the rest's last
// ten seconds, sampled every second: etcd and the trimmer work now and
// then, and a sample in one of their moments is not what stays.
func TestServerMemoryAfterLargePublishes(t *testing.T) {
	if testing.Short() {
		t.Skip("publishes 90 MB to a server process")
	}
	publishes, rest := 150, 20*time.Second
	if os.Getenv("HOLDFAST_ATTACK_FULL") != "" {
		publishes, rest = 400, time.Minute
	}
	bin := buildBinary(t)
	dir := t.TempDir()
	srv := startServerProc(t, bin, "-data-dir", dir)
	pid := srv.cmd.Process.Pid
	start := rssOf(t, pid)
	c := controlClient(t, srv.url(), nil)
	blob := strings.Repeat("v", 600_000)
	var peak int64
	began := time.Now()
	for i := range publishes {
		v, _ := json.Marshal(fmt.Sprint(i, blob))
		if _, err := c.Publish(t.Context(), "mem.ns", controlapi.PublishRequest{Puts: map[string]json.RawMessage{fmt.Sprint("k", i%3): v}}); err != nil {
			t.Fatalf("publish %d: %v", i, err)
		}
		if i%25 == 0 {
			peak = max(peak, rssOf(t, pid))
		}
	}
	t.Logf("%d publishes of 600 KB in %v; RSS %d MiB at start, %d MiB at the peak sampled", publishes, time.Since(began).Round(time.Millisecond), start>>20, peak>>20)
	var samples []int64
	deadline := time.Now().Add(rest)
	for time.Now().Before(deadline) {
		time.Sleep(time.Second)
		if time.Until(deadline) < 10*time.Second {
			samples = append(samples, rssOf(t, pid))
		}
	}
	slices.Sort(samples)
	after := samples[len(samples)/2]
	db := fileSizeOf(t, filepath.Join(dir, "etcd", "member", "snap", "db"))
	raftLog := int64(store.RaftLogEntries) * 2 * int64(len(blob)+1024) // a publish's entry: its value and its audit record
	bound := 2*start + db + raftLog
	t.Logf("after %v of rest: RSS %d MiB (samples %v MiB); bound %d MiB = 2 × %d MiB + etcd's file %d MiB + the raft log's %d MiB",
		rest, after>>20, mib(samples), bound>>20, start>>20, db>>20, raftLog>>20)
	if after > bound {
		t.Errorf("RSS after the rest is %d MiB, above the bound of %d MiB", after>>20, bound>>20)
	}
	srv.stop()
}

// rssOf reads process pid's resident set from /proc.
func rssOf(t *testing.T, pid int) int64 {
	t.Helper()
	n, err := memstat.ProcessRSS(strconv.Itoa(pid))
	if err != nil {
		t.Skipf("no /proc to read a process's memory from: %v", err)
	}
	return int64(n)
}

func fileSizeOf(t *testing.T, name string) int64 {
	t.Helper()
	fi, err := os.Stat(name)
	if err != nil {
		t.Fatal(err)
	}
	return fi.Size()
}

func mib(v []int64) []int64 {
	out := make([]int64, len(v))
	for i, x := range v {
		out[i] = x >> 20
	}
	return out
}
