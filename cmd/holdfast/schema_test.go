package main

import (
	"strings"
	"testing"
)

// TestSchemaCommands: schema set, get and delete against `holdfast
// server`: a set schema refuses a publish that fails it (exit 1, the
// failure on stderr) and nothing is written; an invalid schema is refused;
// get prints it; after delete the same publish goes through.
func TestSchemaCommands(t *testing.T) {
	s := start(t, "server", "-memory", "-addr", "127.0.0.1:0", "-log-format", "json")
	url := s.stderr.waitFor(t, "serving", s.done)["url"].(string)
	sch := writeFile(t, `{"type":"object","properties":{"n":{"type":"integer","maximum":10}}}`)

	mustFail(t, exitFail, "not_found", "schema", "get", "-server", url, "app")
	if out := mustRun(t, "schema", "set", "-server", url, "app", sch); out != "schema of app set\n" {
		t.Errorf("schema set printed %q", out)
	}
	if out := mustRun(t, "schema", "get", "-server", url, "app"); !strings.Contains(out, `"maximum": 10`) {
		t.Errorf("schema get printed %q", out)
	}
	mustRun(t, "publish", "-server", url, "app", "n=5")
	errOut := mustFail(t, exitFail, "(HTTP 422)", "publish", "-server", url, "app", "n=11")
	if !strings.Contains(errOut, `"/n": must be <= 10 but found 11`) {
		t.Errorf("the refusal does not name the failure:\n%s", errOut)
	}
	if out := mustRun(t, "get", "-server", url, "app", "n"); out != "5\n" {
		t.Errorf("after a refused publish n = %q, want 5", out)
	}
	mustFail(t, exitFail, "(HTTP 400)", "schema", "set", "-server", url, "app", writeFile(t, `{"type":"no-such-type"}`))
	mustFail(t, exitUsage, "is not JSON", "schema", "set", "-server", url, "app", writeFile(t, `{`))
	mustFail(t, exitUsage, "-etcd: schema set is the holdfast server's alone", "schema", "set", "-etcd", "127.0.0.1:2379", "app", sch)

	if out := mustRun(t, "schema", "delete", "-server", url, "app"); out != "schema of app deleted\n" {
		t.Errorf("schema delete printed %q", out)
	}
	mustFail(t, exitFail, "not_found", "schema", "delete", "-server", url, "app")
	mustRun(t, "publish", "-server", url, "app", "n=11")
	if code := s.stop(t); code != exitOK {
		t.Fatalf("server: exit %d\n%s", code, s.stderr.String())
	}
}
