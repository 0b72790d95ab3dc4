// Package promtest runs a real Prometheus (Debian's package prometheus,
// which .ci/run installs) for tests, scraping a test application whose
// error counter the test raises. Nothing of it runs in production.
package promtest

import (
	"bytes"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/holdfast-dev/holdfast/internal/testutil"
)

// Wait bounds every wait on the real Prometheus: a start, a scrape, on a
// machine busy with other tests.
const Wait = 90 * time.Second

// App is an application that exposes its error counter
// (app_errors_total), and requests by code (app_requests_total, two
// series), in Prometheus's text format, on /metrics.
type App struct {
	URL    string       // http://127.0.0.1:PORT
	Errors atomic.Int64 // app_errors_total, and the code="500" requests
}

// NewApp serves an App until the test ends.
func NewApp(t testing.TB) *App {
	t.Helper()
	a := &App{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/metrics" {
			http.NotFound(w, r)
			return
		}
		w.Header().Set("Content-Type", "text/plain; version=0.0.4")
		fmt.Fprintf(w, "# HELP app_errors_total Errors the application served.\n# TYPE app_errors_total counter\napp_errors_total %d\n", a.Errors.Load())
		fmt.Fprint(w, "# HELP app_requests_total Requests, by code.\n# TYPE app_requests_total counter\n")
		fmt.Fprintf(w, "app_requests_total{code=\"200\"} 100\napp_requests_total{code=\"500\"} %d\n", a.Errors.Load())
	}))
	t.Cleanup(srv.Close)
	a.URL = srv.URL
	return a
}

// Target is the App's host:port, for a scrape configuration.
func (a *App) Target() string { return strings.TrimPrefix(a.URL, "http://") }

// Binary returns the path of Prometheus's binary. Without it the test is
// skipped, but under CI=true (where .ci/run installs it) it fails.
func Binary(t testing.TB) string {
	t.Helper()
	path, err := exec.LookPath("prometheus")
	if err == nil {
		return path
	}
	if _, serr := os.Stat("/usr/bin/prometheus"); serr == nil {
		return "/usr/bin/prometheus"
	}
	const msg = "no prometheus: install Debian's prometheus (apt-get install -y --no-install-recommends prometheus, as .ci/run does)"
	if os.Getenv("CI") == "true" {
		t.Fatalf("%s: %v", msg, err)
	}
	t.Skipf("%s: %v", msg, err)
	return ""
}

// Prometheus is a Prometheus process on a loopback port.
type Prometheus struct {
	URL  string // http://127.0.0.1:PORT
	cmd  *exec.Cmd
	done chan struct{}
	out  *lockedBuffer
}

// Start starts Prometheus scraping target (host:port, job "app") every
// second, on a free port (another, if the port was taken meanwhile), and
// waits until it is ready. It is stopped at the test's end, its log shown
// if the test failed.
func Start(t testing.TB, target string) *Prometheus {
	t.Helper()
	bin := Binary(t)
	dir := t.TempDir()
	config := filepath.Join(dir, "prometheus.yml")
	if err := os.WriteFile(config, []byte(`global:
  scrape_interval: 1s
  scrape_timeout: 1s
  evaluation_interval: 1s
scrape_configs:
  - job_name: app
    static_configs:
      - targets: ['`+target+`']
`), 0o600); err != nil {
		t.Fatal(err)
	}
	var errs []error
	for attempt := range 5 {
		port := testutil.LoopbackPort(t) // Prometheus cannot listen on port 0
		p := &Prometheus{URL: "http://127.0.0.1:" + strconv.Itoa(port), done: make(chan struct{}), out: &lockedBuffer{}}
		p.cmd = exec.Command(bin,
			"--config.file="+config,
			"--storage.tsdb.path="+filepath.Join(dir, fmt.Sprintf("data%d", attempt)),
			"--web.listen-address=127.0.0.1:"+strconv.Itoa(port),
		)
		p.cmd.Stdout, p.cmd.Stderr = p.out, p.out
		p.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL} // if the test binary dies, so does it
		if err := p.cmd.Start(); err != nil {
			t.Fatalf("start %s: %v", bin, err)
		}
		go func() {
			_ = p.cmd.Wait()
			close(p.done)
		}()
		err := p.waitReady()
		if err == nil {
			t.Cleanup(func() {
				p.Stop()
				if t.Failed() {
					t.Logf("prometheus's log:\n%s", p.out.String())
				}
			})
			return p
		}
		p.Stop()
		errs = append(errs, err)
	}
	t.Fatalf("prometheus did not start: %v", errors.Join(errs...))
	return nil
}

// waitReady waits until /-/ready answers 200, or the process exits.
func (p *Prometheus) waitReady() error {
	client := &http.Client{Timeout: time.Second}
	defer client.CloseIdleConnections()
	var last error
	ready := testutil.Wait(Wait, func() bool {
		select {
		case <-p.done:
			return true
		default:
		}
		resp, err := client.Get(p.URL + "/-/ready")
		if err != nil {
			last = err
			return false
		}
		resp.Body.Close()
		last = fmt.Errorf("/-/ready: %s", resp.Status)
		return resp.StatusCode == http.StatusOK
	})
	select {
	case <-p.done:
		return fmt.Errorf("exited before it was ready: %s", p.out.String())
	default:
	}
	if !ready {
		return fmt.Errorf("not ready after %v: %v", Wait, last)
	}
	return nil
}

// Stop ends Prometheus (SIGTERM, then SIGKILL after 10 s) and waits. It
// is safe to call more than once.
func (p *Prometheus) Stop() {
	select {
	case <-p.done:
		return
	default:
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(10 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.done
	}
}

type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (w *lockedBuffer) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.Write(p)
}

func (w *lockedBuffer) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.String()
}
