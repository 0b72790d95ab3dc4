//go:build linux

package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/holdfast-dev/holdfast/controlapi"
	"github.com/holdfast-dev/holdfast/internal/testutil"
)

// smallDisk mounts a tmpfs of size (mount(8)'s "40m") for the test, and
// unmounts it at its end. Mounting needs root (CAP_SYS_ADMIN): where it
// is not permitted the test is skipped, saying so, in CI too (CI runs as
// root, where it is permitted); any other failure fails the test in CI.
func smallDisk(t *testing.T, size string) string {
	t.Helper()
	dir := t.TempDir()
	if err := syscall.Mount("tmpfs", dir, "tmpfs", 0, "size="+size); err != nil {
		if errors.Is(err, syscall.EPERM) || errors.Is(err, syscall.EACCES) || os.Getenv("CI") == "" {
			t.Skipf("cannot mount a %s tmpfs for a small disk (needs root or CAP_SYS_ADMIN): %v", size, err)
		}
		t.Fatalf("mount a %s tmpfs: %v", size, err)
	}
	t.Cleanup(func() {
		if err := syscall.Unmount(dir, syscall.MNT_DETACH); err != nil {
			t.Errorf("unmount %s: %v", dir, err)
		}
	})
	return dir
}

// TestServerStartsOnTooSmallADisk: `holdfast server -data-dir` on a disk
// with less room than etcd's first write-ahead log segment (64 MiB)
// exits with an error that says so, not etcd's panic ("failed to create
// WAL") and its stack trace.
func TestServerStartsOnTooSmallADisk(t *testing.T) {
	disk := smallDisk(t, "40m")
	r := runBinary(t, buildBinary(t), nil, "server", "-addr", "127.0.0.1:0", "-data-dir", filepath.Join(disk, "data"))
	code, stderr := r.code, r.stderr
	if code == exitOK {
		t.Fatalf("the server started on a 40 MiB disk:\n%s", stderr)
	}
	if !strings.Contains(stderr, "needs at least 72 MiB") || strings.Contains(stderr, "panic") || strings.Contains(stderr, "goroutine ") {
		t.Fatalf("exit %d, want the disk's room named, no panic:\n%s", code, stderr)
	}
	t.Logf("exit %d: %s", code, strings.TrimSpace(stderr))
}

// TestServerOnAFullDiskKeepsServingReads: `holdfast server -data-dir` on
// a 100 MiB disk takes publishes of 500 KB until the disk is full. The
// embedded etcd stops on its fatal error; holdfast logs it with what to
// do, and the process stays up, serving the namespaces its cache holds
// (one a client read before).
func TestServerOnAFullDiskKeepsServingReads(t *testing.T) {
	disk := smallDisk(t, "100m")
	srv := startServerProc(t, buildBinary(t), "-data-dir", filepath.Join(disk, "data"))
	c := controlClient(t, srv.url(), nil)
	if _, err := c.Publish(t.Context(), "keep", controlapi.PublishRequest{Puts: map[string]json.RawMessage{"v": json.RawMessage("1")}}); err != nil {
		t.Fatal(err)
	}
	// A client reads it: the server's cache holds it from now on.
	if code, body := request(t, "GET", srv.url()+"/sdk/snapshot?ns=keep", "", ""); code != http.StatusOK {
		t.Fatalf("snapshot: %d %s", code, body)
	}
	blob, _ := json.Marshal(strings.Repeat("x", 500_000))
	const fatal = "store: the embedded etcd stopped on a fatal error (a full disk?): writes fail, cached reads are served; " +
		"free space in the data directory and restart the server (every publish it answered is in its write-ahead log)"
	answered, failed := 0, 0
	for i := 0; i < 400 && failed < 3 && !strings.Contains(srv.logs.String(), fatal); i++ {
		if _, err := c.Publish(t.Context(), "disk.ns", controlapi.PublishRequest{Puts: map[string]json.RawMessage{fmt.Sprint("k", i): blob}}); err != nil {
			failed++
			t.Logf("publish %d: %v", i, err)
			continue
		}
		answered++
	}
	t.Logf("%d publishes of 500 KB answered before the disk filled", answered)
	rec := srv.logs.waitFor(t, fatal, srv.copied)
	t.Logf("logged: %v (etcd: %v, %v MiB free)", rec["msg"], rec["etcd_error"], rec["free_mib"])
	if rec["level"] != "ERROR" {
		t.Errorf("the fatal error logged at %v", rec["level"])
	}
	// The process is up, and serves what its cache holds.
	testutil.Eventually(t, 10*time.Second, func() bool {
		code, body := request(t, "GET", srv.url()+"/sdk/snapshot?ns=keep", "", "")
		return code == http.StatusOK && strings.Contains(body, `"v":1`)
	}, "the cached namespace served on a full disk")
	select {
	case <-srv.copied:
		t.Fatalf("the server exited:\n%s", srv.logs.String())
	default:
	}
	stopped := time.Now()
	srv.stop()
	t.Logf("stopped %v after SIGTERM", time.Since(stopped).Round(time.Millisecond))
}
