package main

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"
)

// built is the command's binary, built once for all the tests that run
// it, in a directory TestMain removes.
var built struct {
	once      sync.Once
	dir, path string
	err       error
}

// buildBinary builds the command with the go tool (once) and returns the
// binary's path.
func buildBinary(t testing.TB) string {
	t.Helper()
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go tool on PATH to build the binary with")
	}
	built.once.Do(func() {
		if built.dir, built.err = os.MkdirTemp("", "holdfast-cmd-test-"); built.err != nil {
			return
		}
		built.path = filepath.Join(built.dir, "holdfast")
		if out, err := exec.Command(goTool, "build", "-o", built.path, ".").CombinedOutput(); err != nil {
			built.err = fmt.Errorf("go build: %v\n%s", err, out)
		}
	})
	if built.err != nil {
		t.Fatal(built.err)
	}
	return built.path
}

// removeBinary is TestMain's cleanup of buildBinary's directory.
type removeBinary struct{ *testing.M }

func (m removeBinary) Run() int {
	code := m.M.Run()
	if built.dir != "" {
		_ = os.RemoveAll(built.dir)
	}
	return code
}

// exitCode returns the exit status of a finished command.
func exitCode(t testing.TB, err error) int {
	t.Helper()
	var ee *exec.ExitError
	switch {
	case err == nil:
		return 0
	case errors.As(err, &ee):
		return ee.ExitCode()
	}
	t.Fatalf("the command did not run: %v", err)
	return -1
}

// TestBinary: the built binary serves, answers /readyz, and exits 0 on
// SIGTERM; a usage error is exit status 2, a failed operation 1.
func TestBinary(t *testing.T) {
	bin := buildBinary(t)

	cmd := exec.Command(bin, "server", "-data-dir", t.TempDir(), "-addr", "127.0.0.1:0", "-admin-addr", "127.0.0.1:0", "-log-format", "json")
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL} // if the test binary dies, so does it
	logs := newLogRecorder()
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	copied := make(chan struct{})
	go func() {
		defer close(copied)
		_, _ = io.Copy(logs, stderr)
	}()
	wait := sync.OnceValue(cmd.Wait) // after stderr's EOF: Wait closes the pipe
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-copied
		_ = wait()
	})
	rec := logs.waitFor(t, "serving", copied)
	admin, _ := rec["admin_url"].(string)
	if code, body, _ := get(t, admin+"/readyz"); code != http.StatusOK {
		t.Fatalf("/readyz: %d %q", code, body)
	}

	// A second server on the same address fails: exit status 1.
	taken, _ := rec["url"].(string)
	second := exec.Command(bin, "server", "-memory", "-addr", taken[len("http://"):])
	if out, err := second.CombinedOutput(); exitCode(t, err) != exitFail {
		t.Errorf("server on a taken address: %v, want exit status 1\n%s", err, out)
	}
	if out, err := exec.Command(bin, "frobnicate").CombinedOutput(); exitCode(t, err) != exitUsage {
		t.Errorf("an unknown command: %v, want exit status 2\n%s", err, out)
	}

	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case <-copied: // stderr ends when the process exits
	case <-time.After(15 * time.Second):
		t.Fatalf("no exit within 15s of SIGTERM\n%s", logs.String())
	}
	if code := exitCode(t, wait()); code != exitOK {
		t.Fatalf("exit status %d after SIGTERM, want 0\n%s", code, logs.String())
	}
	logs.waitFor(t, "stopped", nil)
}
