package main

import (
	"encoding/json"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/holdfast-dev/holdfast/controlapi"
)

// TestLintCommands: lint set, get, list, test and delete against a
// `holdfast server` process with tokens: a lint whose examples fail, a
// malformed one and a costly one are refused with their codes; lint test
// lists the revision of history the lint would have blocked, for the
// unsaved lint and the saved one; a control token may read and test lints
// but not set them.
func TestLintCommands(t *testing.T) {
	bin := buildBinary(t)
	dir := t.TempDir()
	adminFile := filepath.Join(dir, "admin-token")
	srv := startServerProc(t, bin, "-memory", "-bootstrap-token-file", adminFile)
	srv.logs.waitFor(t, "server: created the store's first admin token", srv.copied)
	url := srv.url()
	// as puts the admin's -server and -token-file after the command's
	// words.
	as := func(args ...string) []string {
		n := 1
		if args[0] == "lint" || args[0] == "token" {
			n = 2
		}
		return slices.Concat(args[:n], []string{"-server", url, "-token-file", adminFile}, args[n:])
	}
	mustRun(t, as("publish", "payments.prod", "retry-timeout-ms=100", "circuit-breaker-budget-ms=500")...)
	bad := revisionOf(t, mustRun(t, as("publish", "-o", "json", "payments.prod", "retry-timeout-ms=900")...))
	mustRun(t, as("publish", "payments.prod", "retry-timeout-ms=200")...)

	spec := `{"namespaces": "payments.*",
		"expr": "new[\"retry-timeout-ms\"] < new[\"circuit-breaker-budget-ms\"]",
		"message": "retry-timeout-ms must stay below circuit-breaker-budget-ms",
		"severity": "block", "link": "https://incidents.example/INC-1234",
		"examples": {"pass": [{"new": {"retry-timeout-ms": 50, "circuit-breaker-budget-ms": 500}}],
		             "fail": [{"old": {"retry-timeout-ms": 50}, "new": {"retry-timeout-ms": 600, "circuit-breaker-budget-ms": 500}}]}}`
	file := writeFile(t, spec)

	// Before saving it: what would it have blocked?
	out := mustRun(t, as("lint", "test", "-ns", "payments.prod", "-f", file, "retry-bound")...)
	if !strings.Contains(out, "1 of 3 revisions would have been blocked") || !strings.Contains(out, "must stay below") {
		t.Errorf("lint test of an unsaved lint printed:\n%s", out)
	}
	mustFail(t, exitFail, "not_found", as("lint", "test", "-ns", "payments.prod", "retry-bound")...)

	if out := mustRun(t, as("lint", "set", "-f", file, "retry-bound")...); out != "lint retry-bound set\n" {
		t.Errorf("lint set printed %q", out)
	}
	if out := mustRun(t, as("lint", "get", "retry-bound")...); !strings.Contains(out, "severity:   block") || !strings.Contains(out, "examples:   1 pass, 1 fail") {
		t.Errorf("lint get printed:\n%s", out)
	}
	var info controlapi.LintInfo
	if err := json.Unmarshal([]byte(mustRun(t, as("lint", "get", "-o", "json", "retry-bound")...)), &info); err != nil || info.Link != "https://incidents.example/INC-1234" {
		t.Errorf("lint get -o json: %+v %v", info, err)
	}
	if out := mustRun(t, as("lint", "list")...); !strings.Contains(out, "retry-bound") || !strings.Contains(out, "payments.*") {
		t.Errorf("lint list printed:\n%s", out)
	}
	var res controlapi.LintTestResult
	if err := json.Unmarshal([]byte(mustRun(t, as("lint", "test", "-o", "json", "-ns", "payments.prod", "retry-bound")...)), &res); err != nil ||
		len(res.WouldBlock) != 1 || res.WouldBlock[0] != bad {
		t.Errorf("lint test -o json: %+v %v, want would_block [%d]", res, err, bad)
	}

	// Refusals: nothing changes.
	failing := strings.Replace(spec, `"circuit-breaker-budget-ms": 500}}]`, `"circuit-breaker-budget-ms": 5}}]`, 1)
	errOut := mustFail(t, exitFail, "lint_examples_failed", as("lint", "set", "-f", writeFile(t, failing), "retry-bound")...)
	if !strings.Contains(errOut, "pass example 1: the lint fails it") {
		t.Errorf("the refusal does not name the example:\n%s", errOut)
	}
	mustFail(t, exitFail, "bad_request", as("lint", "set", "-namespaces", "payments.*", "-expr", `new["a"] <`, "retry-bound")...)
	mustFail(t, exitFail, "lint_too_costly", as("lint", "set", "-namespaces", "payments.*", "-expr", `new.all(k, new.all(j, k == j))`, "retry-bound")...)
	mustFail(t, exitUsage, "give the lint", as("lint", "set", "retry-bound")...)
	mustFail(t, exitUsage, "-ns NAMESPACE is required", as("lint", "test", "retry-bound")...)
	if out := mustRun(t, as("lint", "get", "retry-bound")...); !strings.Contains(out, "circuit-breaker-budget-ms") {
		t.Errorf("a refused set changed the lint:\n%s", out)
	}

	// A control token reads and tests lints, and may not set them.
	code, ctl, stderr := cli(t, as("token", "create", "-control", "*", "deployer")...)
	if code != exitOK {
		t.Fatalf("token create: exit %d: %s", code, stderr)
	}
	ctlFile := writeSecret(t, dir, "control-token", strings.TrimSpace(ctl))
	mustRun(t, "lint", "list", "-server", url, "-token-file", ctlFile)
	mustRun(t, "lint", "test", "-server", url, "-token-file", ctlFile, "-ns", "payments.prod", "retry-bound")
	mustFail(t, exitFail, "no admin scope", "lint", "delete", "-server", url, "-token-file", ctlFile, "retry-bound")

	if out := mustRun(t, as("lint", "delete", "retry-bound")...); out != "lint retry-bound deleted\n" {
		t.Errorf("lint delete printed %q", out)
	}
	mustFail(t, exitFail, "not_found", as("lint", "get", "retry-bound")...)
}
