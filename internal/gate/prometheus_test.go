package gate

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/holdfast-dev/holdfast/internal/promtest"
	"github.com/holdfast-dev/holdfast/internal/testutil"
)

// The gates against a real Prometheus (internal/promtest), scraping a
// test application every second.

// TestRealPrometheus: gates on a real Prometheus scraping a test
// application go from pass to breach when the application's error counter
// rises; Prometheus's own replies (several series, a parse error, a range
// vector, no series, a scalar, NaN) are read as the fake's are.
func TestRealPrometheus(t *testing.T) {
	app := promtest.NewApp(t)
	prom := promtest.Start(t, app.Target())
	ctx := context.Background()

	gates := []Gate{
		{Prometheus: prom.URL, Query: `app_errors_total{job="app"}`, Max: 5, Grace: time.Hour},
		// An error count over a minute: 0 with two scrapes of 0, then at
		// least the raw rise (extrapolation only widens it).
		{Prometheus: prom.URL, Query: `sum(increase(app_errors_total[1m]))`, Max: 5, Grace: time.Hour},
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
	testutil.Eventually(t, promtest.Wait, func() bool {
		last, err = set.Check(ctx, time.Now())
		return err == nil && last[0].Status == Pass && last[1].Status == Pass
	}, "both gates to pass")
	for _, r := range last {
		if r.Value != 0 {
			t.Fatalf("value %v before any error: %s", r.Value, r.Reason)
		}
	}
	t.Logf("pass: %s", last[0].Reason)

	app.Errors.Store(10)
	raised := time.Now()
	testutil.Eventually(t, promtest.Wait, func() bool {
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
		c, err := NewChecker(Gate{Prometheus: prom.URL, Query: tc.query, Max: 5, Grace: time.Minute})
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
