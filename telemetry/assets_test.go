package telemetry_test

import (
	"bytes"
	"encoding/json"
	"slices"
	"strings"
	"testing"

	"github.com/holdfast-dev/holdfast/telemetry"
)

// TestAssets: the shipped dashboard is JSON, the rules a rule file, and
// each call hands out its own copy. (Their contents are checked against the
// exporter's names in the module internal/otelcheck.)
func TestAssets(t *testing.T) {
	var d struct{ UID string }
	if err := json.Unmarshal(telemetry.Dashboard(), &d); err != nil || d.UID != "holdfast" {
		t.Errorf("Dashboard: uid %q, %v", d.UID, err)
	}
	if r := telemetry.AlertRules(); !bytes.Contains(r, []byte("\ngroups:\n")) {
		t.Errorf("AlertRules: no groups:\n%s", r)
	}
	if err := json.Unmarshal(telemetry.ServerDashboard(), &d); err != nil || d.UID != "holdfast-server" {
		t.Errorf("ServerDashboard: uid %q, %v", d.UID, err)
	}
	if r := telemetry.ServerAlertRules(); !bytes.Contains(r, []byte("\ngroups:\n")) {
		t.Errorf("ServerAlertRules: no groups:\n%s", r)
	}
	if s := telemetry.ServerSeries(); !slices.Contains(s, "holdfast_server_head") || slices.ContainsFunc(s, func(x string) bool { return strings.HasPrefix(x, "#") || x == "" }) {
		t.Errorf("ServerSeries: %q", s)
	}
	for name, get := range map[string]func() []byte{"Dashboard": telemetry.Dashboard, "AlertRules": telemetry.AlertRules,
		"ServerDashboard": telemetry.ServerDashboard, "ServerAlertRules": telemetry.ServerAlertRules} {
		b := get()
		b[0] ^= 0xff
		if get()[0] == b[0] {
			t.Errorf("%s: a change to the returned bytes shows in the next call", name)
		}
	}
}
