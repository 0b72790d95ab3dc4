package gate

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
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

// The gates against a real Prometheus (Debian's package prometheus, which
// .ci/run installs), scraping a test application every second.

// promWait bounds every wait on the real Prometheus: a start, a scrape,
// on a machine busy with other tests.
const promWait = 90 * time.Second

// testApp is an application that exposes its error counter, and requests
// by code (two series), in Prometheus's text format.
type testApp struct {
	srv    *httptest.Server
	errors atomic.Int64
}

func newTestApp(t *testing.T) *testApp {
	t.Helper()
	a := &testApp{}
	a.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/metrics" {
			http.NotFound(w, r)
			return
		}
		w.Header().Set("Content-Type", "text/plain; version=0.0.4")
		fmt.Fprintf(w, "# HELP app_errors_total Errors the application served.\n# TYPE app_errors_total counter\napp_errors_total %d\n", a.errors.Load())
		fmt.Fprint(w, "# HELP app_requests_total Requests, by code.\n# TYPE app_requests_total counter\n")
		fmt.Fprintf(w, "app_requests_total{code=\"200\"} 100\napp_requests_total{code=\"500\"} %d\n", a.errors.Load())
	}))
	t.Cleanup(a.srv.Close)
	return a
}

// needPrometheus returns the path of Prometheus's binary. Without it the
// test is skipped, but under CI=true (where .ci/run installs it) it fails.
func needPrometheus(t *testing.T) string {
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

// prometheus is a Prometheus process on a loopback port.
type prometheus struct {
	url  string
	cmd  *exec.Cmd
	done chan struct{}
	out  *lockedBuffer
}

// startPrometheus starts Prometheus scraping target (host:port) every
// second, on a free port (another, if the port was taken meanwhile), and
// waits until it is ready. It is stopped at the test's end.
func startPrometheus(t *testing.T, target string) *prometheus {
	t.Helper()
	bin := needPrometheus(t)
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
		port := freePort(t)
		p := &prometheus{url: "http://127.0.0.1:" + strconv.Itoa(port), done: make(chan struct{}), out: &lockedBuffer{}}
		p.cmd = exec.Command(bin,
			"--config.file="+config,
			"--storage.tsdb.path="+filepath.Join(dir, fmt.Sprintf("data%d", attempt)),
			"--web.listen-address=127.0.0.1:"+strconv.Itoa(port),
		)
		p.cmd.Stdout, p.cmd.Stderr = p.out, p.out
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
				p.stop()
				if t.Failed() {
					t.Logf("prometheus's log:\n%s", p.out.String())
				}
			})
			return p
		}
		p.stop()
		errs = append(errs, err)
	}
	t.Fatalf("prometheus did not start: %v", errors.Join(errs...))
	return nil
}

// waitReady waits until /-/ready answers 200, or the process exits.
func (p *prometheus) waitReady() error {
	client := &http.Client{Timeout: time.Second}
	defer client.CloseIdleConnections()
	var last error
	ready := testutil.Wait(promWait, func() bool {
		select {
		case <-p.done:
			last = fmt.Errorf("exited before it was ready: %s", p.out.String())
			return true
		default:
		}
		resp, err := client.Get(p.url + "/-/ready")
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
		return fmt.Errorf("not ready after %v: %v", promWait, last)
	}
	return nil
}

// stop ends Prometheus (SIGTERM, then SIGKILL after 10 s) and waits.
func (p *prometheus) stop() {
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(10 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.done
	}
}

// freePort returns a loopback port free a moment ago: Prometheus's
// address must be known before it listens, so a start that finds the
// port taken retries on another.
func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
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

// TestRealPrometheus: gates on a real Prometheus scraping a test
// application go from pass to breach when the application's error counter
// rises; Prometheus's own replies (several series, a parse error, a range
// vector, no series, a scalar, NaN) are read as the fake's are.
func TestRealPrometheus(t *testing.T) {
	app := newTestApp(t)
	prom := startPrometheus(t, strings.TrimPrefix(app.srv.URL, "http://"))
	ctx := context.Background()

	gates := []Gate{
		{Prometheus: prom.url, Query: `app_errors_total{job="app"}`, Max: 5, Grace: time.Hour},
		// An error count over a minute: 0 with two scrapes of 0, then at
		// least the raw rise (extrapolation only widens it).
		{Prometheus: prom.url, Query: `sum(increase(app_errors_total[1m]))`, Max: 5, Grace: time.Hour},
	}
	set, err := NewSet(gates, WithTimeout(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer set.Close()
	// Before the first scrapes there is no series: the start is accepted.
	results, err := set.Start(ctx, time.Now())
	if err != nil {
		t.Fatalf("start: %v", err)
	}
	for _, r := range results {
		if r.Status == Breach {
			t.Fatalf("a breach at the start: %s", r.Reason)
		}
	}

	// Pass, once Prometheus has scraped the application.
	var last []Result
	testutil.Eventually(t, promWait, func() bool {
		last, err = set.Check(ctx, time.Now())
		return err == nil && last[0].Status == Pass && last[1].Status == Pass
	}, "both gates to pass")
	for _, r := range last {
		if r.Value != 0 {
			t.Fatalf("value %v before any error: %s", r.Value, r.Reason)
		}
	}
	t.Logf("pass: %s", last[0].Reason)

	app.errors.Store(10)
	raised := time.Now()
	testutil.Eventually(t, promWait, func() bool {
		last, err = set.Check(ctx, time.Now())
		return err == nil && last[0].Status == Breach && last[1].Status == Breach
	}, "both gates to breach")
	t.Logf("both gates breached %v after the counter rose (scrape interval 1s)", time.Since(raised).Round(time.Millisecond))
	if last[0].Value != 10 || !strings.Contains(last[0].Reason, `value 10 above max 5 (series app_errors_total{instance="`) {
		t.Errorf("the counter's breach: %v, %s", last[0].Value, last[0].Reason)
	}
	if last[1].Value < 10 || !strings.Contains(last[1].Reason, "above max 5") {
		t.Errorf("the increase's breach: %v, %s", last[1].Value, last[1].Reason)
	}
	t.Logf("breach: %s", last[0].Reason)
	t.Logf("breach: %s", last[1].Reason)

	// Prometheus's replies to queries a gate cannot use.
	for _, tc := range []struct {
		query   string
		want    Status // of Start's result
		wantErr error  // of Start; ErrBadResponse stands for *QueryError
		value   float64
		resErr  error // of the Result, when Start accepts the gate
	}{
		{query: `app_requests_total`, want: Failing, wantErr: ErrSeveralSeries},
		{query: `rate(app_errors_total[`, want: Failing, wantErr: ErrBadResponse},
		{query: `app_errors_total[1m]`, want: Failing, wantErr: ErrResultType},
		{query: `no_such_metric_total`, want: Failing, resErr: ErrNoSeries},
		{query: `scalar(app_errors_total)`, want: Breach, value: 10},
		{query: `sum(app_requests_total{code="500"}) / sum(app_requests_total)`, want: Pass, value: 10.0 / 110},
		{query: `0 / 0`, want: Failing, resErr: ErrNaN},
		// docs/ROLLOUTS.md's ways around NaN and no series.
		{query: `(vector(0) / vector(0)) >= 0 or vector(0)`, want: Pass, value: 0},
		{query: `(vector(0) / vector(0)) or vector(0)`, want: Failing, resErr: ErrNaN},
		{query: `sum(rate(no_such_metric_total[1m])) or vector(0)`, want: Pass, value: 0},
	} {
		c, err := NewChecker(Gate{Prometheus: prom.url, Query: tc.query, Max: 5, Grace: time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		r, err := c.Start(ctx, time.Now())
		_ = c.Close()
		var qe *QueryError
		switch {
		case tc.wantErr == ErrBadResponse:
			if !errors.As(err, &qe) || qe.StatusCode != http.StatusBadRequest || qe.Type != "bad_data" {
				t.Errorf("%s: %v, want Prometheus's bad_data", tc.query, err)
			}
		case tc.wantErr != nil && !errors.Is(err, tc.wantErr):
			t.Errorf("%s: %v, want %v", tc.query, err, tc.wantErr)
		case tc.wantErr == nil && err != nil:
			t.Errorf("%s: %v", tc.query, err)
		}
		if tc.resErr != nil && !errors.Is(r.Err, tc.resErr) {
			t.Errorf("%s: the result's error %v, want %v", tc.query, r.Err, tc.resErr)
		}
		if r.Status != tc.want || (r.HasValue && r.Value != tc.value) {
			t.Errorf("%s: %s %v (%s), want %s %v", tc.query, r.Status, r.Value, r.Reason, tc.want, tc.value)
		}
		t.Logf("%s: %s", tc.query, r.Reason)
	}
}
