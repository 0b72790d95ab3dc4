package otelcheck_test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"

	"github.com/holdfast-dev/holdfast/telemetry"
)

// serverSeriesPath lists the series holdfast server and holdfast relay
// export; cmd/holdfast's TestMetricsOfRealProcesses checks it against
// real scrapes, and the tests here check the server's dashboard and
// alert rules against it.
var serverSeriesPath = filepath.Join("..", "..", "telemetry", "dashboards", "holdfast-server.series")

// serverSeries reads serverSeriesPath, plus what every process exports
// (target_info, and Go's and the process's, prefix go_ and process_).
func serverSeries(t *testing.T) map[string]bool {
	t.Helper()
	raw, err := os.ReadFile(serverSeriesPath)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]bool{"target_info": true}
	sc := bufio.NewScanner(bytes.NewReader(raw))
	for sc.Scan() {
		if line := strings.TrimSpace(sc.Text()); line != "" && !strings.HasPrefix(line, "#") {
			out[line] = true
		}
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
	raw, err := os.ReadFile(filepath.Join(alertsDir, "holdfast-server.test.yml"))
	if err != nil {
		t.Fatal(err)
	}
	var tests ruleTests
	if err := yaml.Unmarshal(raw, &tests); err != nil {
		t.Fatalf("holdfast-server.test.yml: %v", err)
	}
	firing, quiet := map[string]bool{}, map[string]bool{}
	for _, tc := range tests.Tests {
		for _, in := range tc.InputSeries {
			if name, _, _ := strings.Cut(in.Series, "{"); !series[name] {
				t.Errorf("holdfast-server.test.yml feeds %s, which holdfast server and relay do not export", in.Series)
			}
		}
		for _, at := range tc.AlertRuleTest {
			if len(at.ExpAlerts) > 0 {
				firing[at.Alertname] = true
			} else {
				quiet[at.Alertname] = true
			}
		}
	}
	for _, a := range alerts {
		if !firing[a] || !quiet[a] {
			t.Errorf("%s: tested firing %v, quiet %v; want both", a, firing[a], quiet[a])
		}
	}
}

// TestServerPromtool runs promtool check rules and promtool test rules on
// the server's rules, as TestPromtool on the SDK's.
func TestServerPromtool(t *testing.T) {
	promtool, err := exec.LookPath("promtool")
	if err != nil {
		const msg = "no promtool: install Debian's prometheus (apt-get install prometheus, as .ci/run does)"
		if os.Getenv("CI") != "" {
			t.Fatalf("%s: %v", msg, err)
		}
		t.Skipf("%s: %v", msg, err)
	}
	for _, args := range [][]string{
		{"check", "rules", "holdfast-server.rules.yml"},
		{"test", "rules", "holdfast-server.test.yml"},
	} {
		cmd := exec.Command(promtool, args...)
		cmd.Dir = alertsDir
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Errorf("promtool %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
}
