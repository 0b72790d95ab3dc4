package gate

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"
)

// fakeProm is a fake of Prometheus's query API: it answers every query
// with the reply set last, and records the queries it got.
type fakeProm struct {
	srv *httptest.Server

	mu      sync.Mutex
	status  int
	body    string
	hang    bool // wait for the request's end instead of answering
	queries []string
}

func newFakeProm(t *testing.T) *fakeProm {
	t.Helper()
	f := &fakeProm{status: http.StatusOK}
	f.srv = httptest.NewServer(http.HandlerFunc(f.serve))
	t.Cleanup(f.srv.Close)
	return f
}

func (f *fakeProm) serve(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet || !strings.HasSuffix(r.URL.Path, "/api/v1/query") {
		http.Error(w, "not the query API: "+r.Method+" "+r.URL.Path, http.StatusNotFound)
		return
	}
	f.mu.Lock()
	status, body, hang := f.status, f.body, f.hang
	f.queries = append(f.queries, r.URL.RawQuery)
	f.mu.Unlock()
	if hang {
		<-r.Context().Done()
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	fmt.Fprint(w, body)
}

func (f *fakeProm) set(status int, body string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.status, f.body, f.hang = status, body, false
}

func (f *fakeProm) setHang() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.hang = true
}

// Replies of Prometheus's query API, as Prometheus 2.x writes them.
func vector(values ...string) string {
	parts := make([]string, len(values))
	for i, v := range values {
		parts[i] = fmt.Sprintf(`{"metric":{"__name__":"app_errors_total","instance":"i%d","job":"app"},"value":[1733346000.123,%q]}`, i, v)
	}
	return `{"status":"success","data":{"resultType":"vector","result":[` + strings.Join(parts, ",") + `]}}`
}

func scalar(v string) string {
	return `{"status":"success","data":{"resultType":"scalar","result":[1733346000.123,"` + v + `"]}}`
}

const (
	matrixReply  = `{"status":"success","data":{"resultType":"matrix","result":[{"metric":{},"values":[[1733346000,"1"],[1733346001,"2"]]}]}}`
	badDataReply = `{"status":"error","errorType":"bad_data","error":"invalid parameter \"query\": 1:6: parse error: unclosed left parenthesis"}`
	timeoutReply = `{"status":"error","errorType":"timeout","error":"query timed out in expression evaluation"}`
)

var t0 = time.Date(2026, 12, 4, 21, 0, 0, 0, time.UTC)

// step is one check of a gate: the reply Prometheus gives, the time since
// t0, and what the check must find.
type step struct {
	status int    // 0: 200
	body   string // the reply
	hang   bool   // no reply: the query times out
	at     time.Duration
	want   Status
	value  float64 // when want is not Failing and the query answered
	err    error   // errors.Is of Result.Err; nil: none
	reason string  // a part of Result.Reason
}

func TestCheck(t *testing.T) {
	for _, tc := range []struct {
		name  string
		max   float64
		grace time.Duration
		steps []step
	}{
		{name: "under max", max: 1, grace: time.Minute, steps: []step{
			{body: vector("0.5"), want: Pass, value: 0.5, reason: `value 0.5 at or under max 1 (series app_errors_total{instance="i0",job="app"})`},
			{body: vector("1"), at: time.Second, want: Pass, value: 1},
		}},
		{name: "above max", max: 1, grace: time.Minute, steps: []step{
			{body: vector("0.30000000000000004"), want: Pass, value: 0.30000000000000004},
			{body: vector("1.0000000000000002"), at: 5 * time.Second, want: Breach, value: 1.0000000000000002,
				reason: `value 1.0000000000000002 above max 1 (series app_errors_total{instance="i0",job="app"}); gate on URL, query "app_errors_total"`},
			// A breach does not latch: the next check judges afresh.
			{body: vector("0"), at: 10 * time.Second, want: Pass, value: 0},
		}},
		{name: "scalar", max: 2, grace: time.Minute, steps: []step{
			{body: scalar("2"), want: Pass, value: 2},
			{body: scalar("2.5"), at: time.Second, want: Breach, value: 2.5, reason: "value 2.5 above max 2"},
		}},
		{name: "infinities", max: 1e300, grace: time.Minute, steps: []step{
			{body: vector("-Inf"), want: Pass, value: math.Inf(-1), reason: "value -Inf at or under max 1e+300"},
			{body: vector("+Inf"), at: time.Second, want: Breach, value: math.Inf(1), reason: "value +Inf above max 1e+300"},
		}},
		{name: "NaN is a failure", max: 1, grace: 10 * time.Second, steps: []step{
			{body: vector("NaN"), want: Failing, err: ErrNaN, reason: "failing for 0s of grace 10s: gate: the query returned NaN"},
			{body: vector("NaN"), at: 10 * time.Second, want: Breach, err: ErrNaN, reason: "failing for 10s (grace 10s)"},
		}},
		{name: "no series, grace expiry", max: 1, grace: 30 * time.Second, steps: []step{
			{body: vector(), want: Failing, err: ErrNoSeries},
			{body: vector(), at: 29*time.Second + 123456789, want: Failing, err: ErrNoSeries, reason: "failing for 29.123s of grace 30s"},
			{body: vector(), at: 30 * time.Second, want: Breach, err: ErrNoSeries,
				reason: `failing for 30s (grace 30s): gate: the query returned no series; gate on URL, query "app_errors_total"`},
		}},
		{name: "several series", max: 10, grace: time.Second, steps: []step{
			{body: vector("1", "2", "3", "4"), want: Failing, err: ErrSeveralSeries,
				reason: `4 series (app_errors_total{instance="i0",job="app"}, app_errors_total{instance="i1",job="app"}, app_errors_total{instance="i2",job="app"}, …); aggregate them`},
			{body: vector("1", "2"), at: time.Second, want: Breach, err: ErrSeveralSeries},
		}},
		{name: "range vector", max: 10, grace: time.Second, steps: []step{
			{body: matrixReply, want: Failing, err: ErrResultType},
		}},
		{name: "error status", max: 1, grace: 5 * time.Second, steps: []step{
			{status: 400, body: badDataReply, want: Failing, reason: "Prometheus refused the query (bad_data, HTTP 400): invalid parameter"},
			{status: 503, body: timeoutReply, at: 2 * time.Second, want: Failing, reason: "(timeout, HTTP 503): query timed out"},
			{status: 502, body: "<html>Bad Gateway</html>", at: 4 * time.Second, want: Failing, reason: "gate: HTTP 502, a reply that is not Prometheus's query API (not shown)"},
			{status: 200, body: `{"status":"error","errorType":"internal","error":"boom"}`, at: 5 * time.Second, want: Breach, reason: "failing for 5s (grace 5s): gate: Prometheus refused the query (internal, HTTP 200): boom"},
		}},
		{name: "not Prometheus", max: 1, grace: time.Minute, steps: []step{
			{body: "ok", want: Failing, err: ErrBadResponse},
			{body: `{"status":"success"}`, at: time.Second, want: Failing, err: ErrBadResponse},
			{body: `{"status":"success","data":{"resultType":"vector","result":[{"metric":{},"value":[1,2]}]}}`, at: 2 * time.Second, want: Failing, err: ErrBadResponse, reason: "a value is a string, got 2"},
		}},
		{name: "timeout", max: 1, grace: 10 * time.Second, steps: []step{
			{hang: true, want: Failing, reason: "gate: no answer from Prometheus"},
			{hang: true, at: 10 * time.Second, want: Breach, reason: "failing for 10s (grace 10s): gate: no answer from Prometheus"},
		}},
		{name: "recovery within the grace", max: 1, grace: 30 * time.Second, steps: []step{
			{body: vector(), want: Failing, err: ErrNoSeries},
			{body: vector(), at: 25 * time.Second, want: Failing, err: ErrNoSeries},
			{body: vector("0.5"), at: 29 * time.Second, want: Pass, value: 0.5},
			// Failing again: the grace starts again.
			{status: 503, body: timeoutReply, at: 40 * time.Second, want: Failing, reason: "failing for 0s of grace 30s"},
			{body: vector(), at: 69 * time.Second, want: Failing, reason: "failing for 29s of grace 30s"},
			{body: vector(), at: 70 * time.Second, want: Breach, reason: "failing for 30s (grace 30s)"},
		}},
		{name: "grace 0", max: 1, grace: 0, steps: []step{
			{body: vector("1"), want: Pass, value: 1},
			{body: vector(), at: time.Second, want: Breach, err: ErrNoSeries, reason: "failing for 0s (grace 0s)"},
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := newFakeProm(t)
			g := Gate{Prometheus: p.srv.URL, Query: "app_errors_total", Max: tc.max, Grace: tc.grace}
			c, err := NewChecker(g, WithTimeout(100*time.Millisecond))
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			for i, s := range tc.steps {
				if s.hang {
					p.setHang()
				} else {
					status := s.status
					if status == 0 {
						status = http.StatusOK
					}
					p.set(status, s.body)
				}
				now := t0.Add(s.at)
				r, err := c.Check(context.Background(), now)
				if err != nil {
					t.Fatalf("step %d: %v", i+1, err)
				}
				checkResult(t, fmt.Sprintf("step %d", i+1), r, s, g, now)
			}
		})
	}
}

// checkResult checks r against what s wants.
func checkResult(t *testing.T, what string, r Result, s step, g Gate, now time.Time) {
	t.Helper()
	if r.Status != s.want {
		t.Fatalf("%s: status %s, want %s (%s)", what, r.Status, s.want, r.Reason)
	}
	if r.Gate != g || !r.At.Equal(now) {
		t.Errorf("%s: gate %+v at %v, want %+v at %v", what, r.Gate, r.At, g, now)
	}
	if s.err != nil && !errors.Is(r.Err, s.err) {
		t.Errorf("%s: error %v, want %v", what, r.Err, s.err)
	}
	answered := r.Err == nil
	if answered != r.HasValue || answered != r.FailingSince.IsZero() {
		t.Errorf("%s: error %v with a value %v and failing since %v", what, r.Err, r.HasValue, r.FailingSince)
	}
	if answered && r.Value != s.value && !(math.IsNaN(r.Value) && math.IsNaN(s.value)) {
		t.Errorf("%s: value %v, want %v", what, r.Value, s.value)
	}
	reason := strings.ReplaceAll(s.reason, "URL", g.Prometheus)
	if !strings.Contains(r.Reason, reason) {
		t.Errorf("%s: reason %q, want it to contain %q", what, r.Reason, reason)
	}
	if !strings.Contains(r.Reason, g.Prometheus) || !strings.Contains(r.Reason, g.Query) {
		t.Errorf("%s: reason %q does not name the gate", what, r.Reason)
	}
}

// TestStart: the first check refuses what can never pass, and accepts a
// metric that does not exist yet.
func TestStart(t *testing.T) {
	for _, tc := range []struct {
		name    string
		status  int
		body    string
		want    Status
		wantErr error  // errors.Is of Start's error; nil: no error
		errText string // a part of the error
	}{
		{name: "under max", status: 200, body: vector("0"), want: Pass},
		{name: "above max: the caller decides", status: 200, body: vector("7"), want: Breach},
		{name: "no series yet", status: 200, body: vector(), want: Failing},
		{name: "NaN", status: 200, body: scalar("NaN"), want: Failing},
		{name: "several series", status: 200, body: vector("1", "2"), want: Failing, wantErr: ErrSeveralSeries,
			errText: `app_errors_total,max=5,grace=30s: gate: the query returned several series: 2 series`},
		{name: "range vector", status: 200, body: matrixReply, want: Failing, wantErr: ErrResultType},
		{name: "bad query", status: 400, body: badDataReply, want: Failing, errText: "Prometheus refused the query (bad_data, HTTP 400)"},
		{name: "not Prometheus", status: 404, body: "404 page not found", want: Failing, errText: "gate: HTTP 404, a reply that is not Prometheus's query API (not shown)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := newFakeProm(t)
			p.set(tc.status, tc.body)
			g := Gate{Prometheus: p.srv.URL + "/prom/", Query: "app_errors_total", Max: 5, Grace: DefaultGrace}
			c, err := NewChecker(g)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			r, err := c.Start(context.Background(), t0)
			if r.Status != tc.want {
				t.Errorf("status %s, want %s (%s)", r.Status, tc.want, r.Reason)
			}
			switch {
			case tc.wantErr == nil && tc.errText == "":
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
			case err == nil:
				t.Fatalf("started, want an error: %s", r.Reason)
			case tc.wantErr != nil && !errors.Is(err, tc.wantErr):
				t.Fatalf("error %v, want %v", err, tc.wantErr)
			case !strings.Contains(err.Error(), tc.errText):
				t.Fatalf("error %q, want it to contain %q", err, tc.errText)
			}
			if err != nil && !c.FailingSince().IsZero() {
				t.Errorf("a refused start left the gate failing since %v", c.FailingSince())
			}
			var qe *QueryError
			if tc.status != 200 && !errors.As(err, &qe) {
				t.Errorf("error %v is no *QueryError", err)
			} else if qe != nil && qe.StatusCode != tc.status {
				t.Errorf("status code %d, want %d", qe.StatusCode, tc.status)
			}
			// The query went to the base URL's path, with the timeout.
			p.mu.Lock()
			q := p.queries
			p.mu.Unlock()
			if len(q) != 1 || q[0] != "query=app_errors_total&timeout=10000ms" {
				t.Errorf("queries %q", q)
			}
		})
	}

	// A Prometheus that does not answer.
	p := newFakeProm(t)
	url := p.srv.URL
	p.srv.Close()
	c, err := NewChecker(Gate{Prometheus: url, Query: "up", Max: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	var qe *QueryError
	if _, err := c.Start(context.Background(), t0); !errors.As(err, &qe) || qe.Err == nil ||
		!strings.Contains(err.Error(), "gate: no answer from Prometheus") || !strings.Contains(qe.Err.Error(), "dial tcp") {
		t.Fatalf("an unreachable Prometheus: %v", err)
	}
}

// TestCheckCallerGivesUp: a context the caller cancels is the caller's
// error, and judges nothing.
func TestCheckCallerGivesUp(t *testing.T) {
	p := newFakeProm(t)
	c, err := NewChecker(Gate{Prometheus: p.srv.URL, Query: "x", Max: 1, Grace: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	p.set(200, vector())
	if r, err := c.Check(context.Background(), t0); err != nil || r.Status != Failing {
		t.Fatalf("no series: %+v, %v", r, err)
	}
	p.setHang()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	if _, err := c.Check(ctx, t0.Add(time.Hour)); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("a cancelled check: %v", err)
	}
	if got := c.FailingSince(); !got.Equal(t0) {
		t.Fatalf("failing since %v after a cancelled check, want %v", got, t0)
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Check(context.Background(), t0); !errors.Is(err, ErrClosed) {
		t.Fatalf("a check after Close: %v", err)
	}
}

// TestResume: a controller that takes a rollout over resumes the grace
// from the stored FailingSince.
func TestResume(t *testing.T) {
	p := newFakeProm(t)
	p.set(200, vector())
	g := Gate{Prometheus: p.srv.URL, Query: "x", Max: 1, Grace: 30 * time.Second}
	first, err := NewChecker(g)
	if err != nil {
		t.Fatal(err)
	}
	defer first.Close()
	r, err := first.Check(context.Background(), t0)
	if err != nil || r.Status != Failing {
		t.Fatalf("%+v, %v", r, err)
	}
	stored, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	var back Result
	if err := json.Unmarshal(stored, &back); err != nil {
		t.Fatal(err)
	}
	second, err := NewChecker(back.Gate)
	if err != nil {
		t.Fatal(err)
	}
	defer second.Close()
	second.Resume(back.FailingSince)
	if r, err := second.Check(context.Background(), t0.Add(30*time.Second)); err != nil || r.Status != Breach {
		t.Fatalf("resumed at the end of the grace: %+v, %v", r, err)
	}
}

func TestResultJSON(t *testing.T) {
	g := Gate{Prometheus: promURL, Query: "x", Max: 1, Grace: time.Second}
	for _, r := range []Result{
		{Gate: g, Status: Breach, Value: math.Inf(1), HasValue: true, Series: `x{a="b"}`, At: t0, Reason: "r"},
		{Gate: g, Status: Pass, Value: 0.30000000000000004, HasValue: true, At: t0, Reason: "r"},
		{Gate: g, Status: Failing, At: t0, FailingSince: t0.Add(-time.Second), Err: ErrNoSeries, Reason: "r"},
	} {
		data, err := json.Marshal(r)
		if err != nil {
			t.Fatal(err)
		}
		var back Result
		if err := json.Unmarshal(data, &back); err != nil {
			t.Fatalf("%s: %v", data, err)
		}
		if back.Status != r.Status || back.Value != r.Value || back.HasValue != r.HasValue || back.Series != r.Series ||
			!back.At.Equal(r.At) || !back.FailingSince.Equal(r.FailingSince) || back.Gate != r.Gate || back.Reason != r.Reason ||
			fmt.Sprint(back.Err) != fmt.Sprint(r.Err) {
			t.Errorf("%s read back as %+v, want %+v", data, back, r)
		}
	}
	data, _ := json.Marshal(Result{Gate: g, Status: Breach, Value: math.Inf(1), HasValue: true, At: t0, Reason: "r"})
	if want := `"value":"+Inf"`; !strings.Contains(string(data), want) {
		t.Errorf("%s, want %s", data, want)
	}
}

// TestReasonBound: a reason is at most MaxReason bytes, its figures whole,
// however long the query and the error.
func TestReasonBound(t *testing.T) {
	p := newFakeProm(t)
	query := strings.Repeat(`"`, MaxQueryLen) // each one quoted as \"
	g := Gate{Prometheus: p.srv.URL, Query: query, Max: 0.1, Grace: time.Hour}
	c, err := NewChecker(g)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	p.set(200, vector("0.30000000000000004"))
	r, err := c.Check(context.Background(), t0)
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Reason) > MaxReason || !strings.HasPrefix(r.Reason, `value 0.30000000000000004 above max 0.1 (series app_errors_total{instance="i0",job="app"}); gate on `+p.srv.URL+`, query "\"\"\"`) ||
		!strings.HasSuffix(r.Reason, `…`) {
		t.Fatalf("%d bytes: %.300q", len(r.Reason), r.Reason)
	}
	p.set(400, `{"status":"error","errorType":"bad_data","error":"`+strings.Repeat("é", 3000)+`"}`)
	r, err = c.Check(context.Background(), t0.Add(2*time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Reason) > MaxReason || !strings.HasPrefix(r.Reason, "failing for 0s of grace 1h0m0s: gate: Prometheus refused the query (bad_data, HTTP 400): éé") ||
		!strings.Contains(r.Reason, "é…; gate on "+p.srv.URL+", query") {
		t.Fatalf("%d bytes: %.300q", len(r.Reason), r.Reason)
	}
}

// TestSet: the gates of one rollout, checked together.
func TestSet(t *testing.T) {
	ok, bad := newFakeProm(t), newFakeProm(t)
	ok.set(200, vector("0"))
	bad.set(200, vector("1", "2"))
	gates := []Gate{
		{Prometheus: ok.srv.URL, Query: "errors", Max: 1, Grace: time.Second},
		{Prometheus: bad.srv.URL, Query: "latency", Max: 1, Grace: time.Second},
	}
	s, err := NewSet(gates, WithTimeout(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if _, err := s.Start(context.Background(), t0); !errors.Is(err, ErrSeveralSeries) || !strings.Contains(err.Error(), "query=latency") {
		t.Fatalf("start with a gate of several series: %v", err)
	}
	bad.set(200, vector("0.5"))
	results, err := s.Start(context.Background(), t0)
	if err != nil || len(results) != 2 || results[0].Status != Pass || results[1].Status != Pass {
		t.Fatalf("start: %+v, %v", results, err)
	}
	if _, breached := Breached(results); breached {
		t.Fatal("a breach among passes")
	}
	bad.set(200, vector("1.5"))
	results, err = s.Check(context.Background(), t0.Add(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if b, breached := Breached(results); !breached || b.Gate != gates[1] || b.Value != 1.5 {
		t.Fatalf("breach %+v, %v in %+v", b, breached, results)
	}
	if _, err := NewSet(append(gates, gates[0])); err == nil {
		t.Fatal("a set with a gate twice")
	}
	if len(s.Checkers()) != 2 || s.Checkers()[1].Gate() != gates[1] {
		t.Fatalf("checkers %v", s.Checkers())
	}
}
