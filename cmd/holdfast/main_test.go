package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	dto "github.com/prometheus/client_model/go"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(removeBinary{m}) }

// logRecorder is the stderr of a command run with -log-format json: it
// keeps every JSON record and lets a test wait for one.
type logRecorder struct {
	mu      sync.Mutex
	buf     bytes.Buffer // everything written
	partial []byte
	records []map[string]any
	changed chan struct{} // closed and replaced on every write
}

func newLogRecorder() *logRecorder { return &logRecorder{changed: make(chan struct{})} }

func (l *logRecorder) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.buf.Write(p)
	l.partial = append(l.partial, p...)
	for {
		i := bytes.IndexByte(l.partial, '\n')
		if i < 0 {
			break
		}
		var rec map[string]any
		if json.Unmarshal(l.partial[:i], &rec) == nil {
			l.records = append(l.records, rec)
		}
		l.partial = l.partial[i+1:]
	}
	close(l.changed)
	l.changed = make(chan struct{})
	return len(p), nil
}

func (l *logRecorder) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.String()
}

// waitFor returns the first record whose msg is msg, waiting up to 10 s;
// it fails t if none comes, or if done (the command returned) is closed
// first.
func (l *logRecorder) waitFor(t testing.TB, msg string, done <-chan struct{}) map[string]any {
	t.Helper()
	deadline := time.After(10 * time.Second)
	for {
		l.mu.Lock()
		for _, rec := range l.records {
			if rec["msg"] == msg {
				l.mu.Unlock()
				return rec
			}
		}
		changed := l.changed
		l.mu.Unlock()
		select {
		case <-changed:
		case <-done:
			t.Fatalf("the command returned before logging %q:\n%s", msg, l.String())
		case <-deadline:
			t.Fatalf("no %q in the log within 10s:\n%s", msg, l.String())
		}
	}
}

// started is a command running in-process in a goroutine.
type started struct {
	cancel context.CancelFunc
	done   chan struct{}
	code   int
	stdout bytes.Buffer
	stderr *logRecorder
}

// start runs holdfast args in-process until stop.
func start(t *testing.T, args ...string) *started {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	s := &started{cancel: cancel, done: make(chan struct{}), stderr: newLogRecorder()}
	go func() {
		defer close(s.done)
		s.code = run(ctx, args, &s.stdout, s.stderr)
	}()
	t.Cleanup(func() {
		cancel()
		<-s.done
	})
	return s
}

// stop cancels the command's context, as SIGTERM does in main, and
// returns its exit status.
func (s *started) stop(t *testing.T) int {
	t.Helper()
	s.cancel()
	select {
	case <-s.done:
	case <-time.After(15 * time.Second):
		t.Fatalf("the command did not return within 15s of its context's end:\n%s", s.stderr.String())
	}
	return s.code
}

// get fetches url with a client of its own, closed after.
func get(t *testing.T, url string) (int, string, http.Header) {
	t.Helper()
	tr := &http.Transport{}
	defer tr.CloseIdleConnections()
	hc := &http.Client{Transport: tr, Timeout: 10 * time.Second}
	resp, err := hc.Get(url)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	return resp.StatusCode, string(body), resp.Header
}

// parseMetrics checks that text is a valid Prometheus exposition, with
// promtool when it is installed (required under CI=true, as the
// repository's other promtool tests), and returns its families.
func parseMetrics(t *testing.T, text string) map[string]*dto.MetricFamily {
	t.Helper()
	if promtool, err := exec.LookPath("promtool"); err == nil {
		cmd := exec.Command(promtool, "check", "metrics")
		cmd.Stdin = strings.NewReader(text)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("promtool check metrics: %v\n%s\nthe scrape:\n%s", err, out, text)
		}
	} else if os.Getenv("CI") == "true" {
		t.Fatal("promtool is not installed (apt-get install prometheus); under CI=true it is required")
	} else {
		t.Log("promtool is not installed: the scrape is only parsed, not linted")
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	families, err := p.TextToMetricFamilies(strings.NewReader(text))
	if err != nil {
		t.Fatalf("parse the scrape: %v\n%s", err, text)
	}
	return families
}

// metricValue returns the value of family name's sample whose labels
// include want (a histogram's: its count), and whether there is one.
func metricValue(families map[string]*dto.MetricFamily, name string, want map[string]string) (float64, bool) {
	f := families[name]
	if f == nil {
		return 0, false
	}
next:
	for _, m := range f.GetMetric() {
		labels := map[string]string{}
		for _, lp := range m.GetLabel() {
			labels[lp.GetName()] = lp.GetValue()
		}
		for k, v := range want {
			if labels[k] != v {
				continue next
			}
		}
		switch {
		case m.Gauge != nil:
			return m.GetGauge().GetValue(), true
		case m.Counter != nil:
			return m.GetCounter().GetValue(), true
		case m.Untyped != nil:
			return m.GetUntyped().GetValue(), true
		case m.Histogram != nil:
			return float64(m.GetHistogram().GetSampleCount()), true
		}
	}
	return 0, false
}
