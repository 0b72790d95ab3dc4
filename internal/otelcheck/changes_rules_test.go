package otelcheck_test

import (
	"os"
	"os/exec"
	"testing"
)

// TestChangeRulesPromtool runs promtool check rules and test rules on
// holdfast server's change workflow rules (holdfast-changes.rules.yml),
// whose metric, holdfast_changes_overdue_review, cmd/holdfast's
// TestChangeEmergencyOverdue scrapes from a running server.
func TestChangeRulesPromtool(t *testing.T) {
	promtool, err := exec.LookPath("promtool")
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("no promtool: %v", err)
		}
		t.Skipf("no promtool: %v", err)
	}
	for _, args := range [][]string{
		{"check", "rules", "holdfast-changes.rules.yml"},
		{"test", "rules", "holdfast-changes.test.yml"},
	} {
		cmd := exec.Command(promtool, args...)
		cmd.Dir = alertsDir
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Errorf("promtool %v: %v\n%s", args, err, out)
		}
	}
}
