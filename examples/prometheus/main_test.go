package main

import (
	"bytes"
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// dashboard is the file in the repository, which telemetry.Dashboard embeds.
var dashboard = filepath.Join("..", "..", "telemetry", "dashboards", "holdfast.json")

// TestDashboardNamesInScrape: after the demo traffic, one scrape of
// /metrics has every metric the dashboard queries.
func TestDashboardNamesInScrape(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var out bytes.Buffer
	if err := run(ctx, &out, settings{addr: "127.0.0.1:0", once: true}); err != nil { // the shipped dashboard
		t.Fatalf("run: %v\n%s", err, out.String())
	}
	t.Log("\n" + out.String())
	for _, want := range []string{
		"ok      holdfast_staleness_seconds",
		"ok      holdfast_propagation_delay_seconds_bucket",
		"ok      holdfast_persist_errors_total",
		"Every metric the dashboard queries is exported.",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q", want)
		}
	}
}

// TestServeForDuration: the serving mode returns once -duration passes.
func TestServeForDuration(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var out bytes.Buffer
	if err := run(ctx, &out, settings{addr: "127.0.0.1:0", duration: 1500 * time.Millisecond}); err != nil {
		t.Fatalf("run: %v\n%s", err, out.String())
	}
	if !strings.Contains(out.String(), "Serving http://127.0.0.1:") {
		t.Errorf("output:\n%s", out.String())
	}
}

func TestDashboardMetricsSkipsDescriptions(t *testing.T) {
	names, err := dashboardMetrics(dashboard)
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range names {
		if n == "holdfast_namespace" || n == "holdfast_callback_duration_seconds" {
			t.Errorf("%s is not a metric a query selects", n)
		}
	}
}
