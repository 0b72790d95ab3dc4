package otelcheck_test

import (
	"encoding/json"
	"regexp"
	"slices"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"

	"github.com/holdfast-dev/holdfast/telemetry"
)

// serverSeriesPath lists the series holdfast server and holdfast relay
// export (telemetry.ServerSeries); cmd/holdfast's
// TestMetricsOfRealProcesses checks it against real scrapes, and the
// tests here check the server's dashboard and alert rules against it.
const serverSeriesPath = "telemetry/dashboards/holdfast-server.series"

// serverSeries is telemetry.ServerSeries, plus what every process
// exports (target_info).
func serverSeries(t *testing.T) map[string]bool {
	t.Helper()
	out := map[string]bool{"target_info": true}
	for _, s := range telemetry.ServerSeries() {
		out[s] = true
	}
	if len(out) < 20 {
		t.Fatalf("%s lists %d series", serverSeriesPath, len(out))
	}
	return out
}

// checkServerQuery fails t if expr selects a series the server and
// relay do not export, reads buckets without histogram_quantile, or
// drops le under one. It returns the series it selects.
func checkServerQuery(t *testing.T, where, expr string, series map[string]bool) []string {
	t.Helper()
	names, err := promqlMetricNames(expr)
	if err != nil || len(names) == 0 {
		t.Errorf("%s: query %q: names %v, %v", where, expr, names, err)
		return nil
	}
	for _, n := range names {
		if !series[n] {
			t.Errorf("%s: query %q uses %s, which holdfast server and relay do not export (%s)", where, expr, n, serverSeriesPath)
		}
		if strings.HasSuffix(n, "_bucket") && !strings.Contains(expr, "histogram_quantile") && !strings.Contains(expr, `le="`) {
			t.Errorf("%s: query %q reads buckets without histogram_quantile or one le", where, expr)
		}
	}
	if strings.Contains(expr, "histogram_quantile") && !regexp.MustCompile(`\bby\s*\([^)]*\ble\b`).MatchString(expr) {
		t.Errorf("%s: query %q: histogram_quantile needs the le label kept (by (le, ...))", where, expr)
	}
	return names
}

// TestServerDashboardQueriesExportedSeries: every query of the server's
// dashboard, its template variables' included, selects only series the
// server and relay export; every series family has a panel.
func TestServerDashboardQueriesExportedSeries(t *testing.T) {
	series := serverSeries(t)
	raw := telemetry.ServerDashboard()
	exprs := allExprs(t, raw)
	if len(exprs) < 20 {
		t.Fatalf("only %d queries in the server dashboard", len(exprs))
	}
	var d dashboard
	if err := json.Unmarshal(raw, &d); err != nil {
		t.Fatal(err)
	}
	for _, v := range d.Templating.List {
		if v.Type != "query" {
			continue
		}
		m := labelValuesRE.FindStringSubmatch(v.Definition)
		if m == nil {
			t.Errorf("variable %s: definition %q is not label_values(series, label)", v.Name, v.Definition)
			continue
		}
		exprs = append(exprs, m[1])
	}
	used := map[string]bool{}
	for _, expr := range exprs {
		for _, n := range checkServerQuery(t, "holdfast-server.json", expr, series) {
			used[strings.TrimSuffix(strings.TrimSuffix(strings.TrimSuffix(n, "_bucket"), "_count"), "_sum")] = true
		}
	}
	for s := range series {
		family := strings.TrimSuffix(strings.TrimSuffix(strings.TrimSuffix(s, "_bucket"), "_count"), "_sum")
		if strings.HasPrefix(s, "holdfast_") && !used[family] {
			t.Errorf("the server dashboard has no panel of %s", family)
		}
	}
}

// TestServerAlertRules: the server's rules query only series the server
// and relay export, the alerts on-call needs are there, each with a
// severity, a summary and a description, and each is tested firing and
// quiet by holdfast-server.test.yml, whose input series exist too.
func TestServerAlertRules(t *testing.T) {
	series := serverSeries(t)
	var rules ruleFile
	if err := yaml.Unmarshal(telemetry.ServerAlertRules(), &rules); err != nil {
		t.Fatalf("holdfast-server.rules.yml: %v", err)
	}
	var alerts []string
	for _, g := range rules.Groups {
		for _, r := range g.Rules {
			alerts = append(alerts, r.Alert)
			checkServerQuery(t, r.Alert, r.Expr, series)
			if r.Labels["severity"] == "" || r.Annotations["summary"] == "" || r.Annotations["description"] == "" {
				t.Errorf("%s: wants a severity label, a summary and a description", r.Alert)
			}
		}
	}
	for _, want := range []string{"HoldfastServerNoLeader", "HoldfastServerStoreUnreachable", "HoldfastServerWatchLag",
		"HoldfastServerPublishSlow", "HoldfastPropagationSlow", "HoldfastRelayBehind", "HoldfastRelayUpstreamDown"} {
		if !slices.Contains(alerts, want) {
			t.Errorf("no alert %s; alerts: %v", want, alerts)
		}
	}
	checkRuleTests(t, "holdfast-server.test.yml", func(name string) bool { return series[name] }, alerts)
}

// TestServerPromtool runs promtool check rules and promtool test rules on
// the server's rules, as TestPromtool on the SDK's.
func TestServerPromtool(t *testing.T) {
	runPromtool(t, "holdfast-server.rules.yml", "holdfast-server.test.yml")
}
