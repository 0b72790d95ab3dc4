package otelcheck_test

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"

	"github.com/holdfast-dev/holdfast/telemetry"
)

// alertsDir holds the rules and their promtool tests.
var alertsDir = filepath.Join("..", "..", "telemetry", "alerts")

type ruleFile struct {
	Groups []struct {
		Name  string `yaml:"name"`
		Rules []struct {
			Alert       string            `yaml:"alert"`
			Expr        string            `yaml:"expr"`
			For         string            `yaml:"for"`
			Labels      map[string]string `yaml:"labels"`
			Annotations map[string]string `yaml:"annotations"`
		} `yaml:"rules"`
	} `yaml:"groups"`
}

type ruleTests struct {
	RuleFiles []string `yaml:"rule_files"`
	Tests     []struct {
		InputSeries []struct {
			Series string `yaml:"series"`
		} `yaml:"input_series"`
		AlertRuleTest []struct {
			Alertname string `yaml:"alertname"`
			ExpAlerts []any  `yaml:"exp_alerts"`
		} `yaml:"alert_rule_test"`
	} `yaml:"tests"`
}

// TestAlertRulesUseExportedNames fails if a rule, or a series its tests
// feed promtool, names a metric the SDK does not export under the
// exporter's names: a renamed instrument fails here, not in production.
// It also wants the alerts on-call needs, each tested firing and quiet.
func TestAlertRulesUseExportedNames(t *testing.T) {
	series := seriesNames(exported(t))
	var rules ruleFile
	if err := yaml.Unmarshal(telemetry.AlertRules(), &rules); err != nil {
		t.Fatalf("holdfast.rules.yml: %v", err)
	}
	var alerts []string
	for _, g := range rules.Groups {
		for _, r := range g.Rules {
			alerts = append(alerts, r.Alert)
			names, err := promqlMetricNames(r.Expr)
			if err != nil || len(names) == 0 {
				t.Errorf("%s: expr %q: names %v, %v", r.Alert, r.Expr, names, err)
			}
			for _, n := range names {
				if _, ok := series[n]; !ok {
					t.Errorf("%s: expr %q uses %s, which the SDK does not export", r.Alert, r.Expr, n)
				}
			}
			if !strings.Contains(r.Expr, "by (holdfast_namespace)") {
				t.Errorf("%s: expr %q is not per namespace", r.Alert, r.Expr)
			}
			if r.Labels["severity"] == "" || r.Annotations["summary"] == "" || r.Annotations["description"] == "" {
				t.Errorf("%s: wants a severity label, a summary and a description", r.Alert)
			}
		}
	}
	for _, want := range []string{"HoldfastNamespaceBreached", "HoldfastFailedClosed", "HoldfastStalenessNearLimit",
		"HoldfastUpdatesRejected", "HoldfastPersistErrors", "HoldfastReconnectStorm"} {
		if !slices.Contains(alerts, want) {
			t.Errorf("no alert %s; alerts: %v", want, alerts)
		}
	}

	checkRuleTests(t, "holdfast.test.yml", func(name string) bool { _, ok := series[name]; return ok }, alerts)
}

// checkRuleTests fails t if the promtool tests in alertsDir/file feed a
// series that exported says is not exported, or leave one of alerts
// untested firing or quiet.
func checkRuleTests(t *testing.T, file string, exported func(name string) bool, alerts []string) {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(alertsDir, file))
	if err != nil {
		t.Fatal(err)
	}
	var tests ruleTests
	if err := yaml.Unmarshal(raw, &tests); err != nil {
		t.Fatalf("%s: %v", file, err)
	}
	firing, quiet := map[string]bool{}, map[string]bool{}
	for _, tc := range tests.Tests {
		for _, in := range tc.InputSeries {
			if name, _, _ := strings.Cut(in.Series, "{"); !exported(name) {
				t.Errorf("%s feeds %s, which is not exported", file, in.Series)
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

// TestPromtool runs promtool check rules and promtool test rules (Debian's
// package prometheus has promtool; .ci/run installs it).
func TestPromtool(t *testing.T) { runPromtool(t, "holdfast.rules.yml", "holdfast.test.yml") }

// runPromtool runs promtool check rules on rules and promtool test rules
// on tests, in alertsDir.
func runPromtool(t *testing.T, rules, tests string) {
	t.Helper()
	promtool, err := exec.LookPath("promtool")
	if err != nil {
		const msg = "no promtool: install Debian's prometheus (apt-get install prometheus, as .ci/run does)"
		if os.Getenv("CI") != "" {
			t.Fatalf("%s: %v", msg, err) // CI installs it: missing is a failure
		}
		t.Skipf("%s: %v", msg, err)
	}
	for _, args := range [][]string{
		{"check", "rules", rules},
		{"test", "rules", tests},
	} {
		cmd := exec.Command(promtool, args...)
		cmd.Dir = alertsDir
		out, err := cmd.CombinedOutput()
		var ee *exec.ExitError
		switch {
		case errors.As(err, &ee):
			t.Errorf("promtool %s: %v\n%s", strings.Join(args, " "), err, out)
		case err != nil:
			t.Fatalf("promtool %s: %v", strings.Join(args, " "), err)
		default:
			t.Logf("promtool %s:\n%s", strings.Join(args, " "), out)
		}
	}
}
