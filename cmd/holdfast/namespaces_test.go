package main

import (
	"encoding/json"
	"net/http"
	"reflect"
	"strings"
	"testing"

	"github.com/holdfast-dev/holdfast/controlapi"
	"github.com/holdfast-dev/holdfast/holdfasttest"
)

// TestNamespacesCommand: holdfast namespaces lists every namespace with
// its revision, last change and live clients, filtered by -prefix, cut by
// -limit (saying where to go on), and -o json is the API's answer.
func TestNamespacesCommand(t *testing.T) {
	srv := holdfasttest.NewServer(t)
	s := []string{"-server", srv.URL()}
	cmd := func(args ...string) []string { return append(append([]string{"namespaces"}, s...), args...) }
	if out := mustRun(t, cmd()...); out != "no namespaces\n" {
		t.Errorf("an empty store: %q", out)
	}
	mustRun(t, "publish", "-server", srv.URL(), "-actor", "alice", "-reason", "CHG-7", "pay.prod", "a=1")
	mustRun(t, "publish", "-server", srv.URL(), "pay.dev", "a=1")
	mustRun(t, "publish", "-server", srv.URL(), "search.prod", "a=1")
	postAck(t, srv, "svc-1", "pay.prod", srv.Head(), "")

	out := mustRun(t, cmd()...)
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 4 || !strings.HasPrefix(lines[0], "NS ") || !strings.Contains(lines[0], "LAST CHANGE") || !strings.HasSuffix(lines[0], "LIVE CLIENTS") ||
		!strings.HasPrefix(lines[1], "pay.dev ") || !strings.HasPrefix(lines[2], "pay.prod ") || !strings.HasPrefix(lines[3], "search.prod ") {
		t.Fatalf("namespaces:\n%s", out)
	}
	if f := strings.Fields(lines[2]); f[1] != "1" || !strings.Contains(lines[2], "alice") || !strings.Contains(lines[2], "CHG-7") || f[len(f)-1] != "1" {
		t.Errorf("pay.prod's row: %q", lines[2])
	}
	if out := mustRun(t, cmd("-prefix", "pay.")...); strings.Contains(out, "search.prod") || strings.Count(out, "\n") != 3 {
		t.Errorf("-prefix pay.:\n%s", out)
	}
	if out := mustRun(t, cmd("-limit", "1")...); !strings.Contains(out, "pay.dev") || strings.Contains(out, "pay.prod ") || !strings.Contains(out, "-after pay.dev") {
		t.Errorf("-limit 1:\n%s", out)
	}
	if out := mustRun(t, cmd("-after", "pay.prod")...); !strings.Contains(out, "search.prod") || strings.Count(out, "\n") != 2 {
		t.Errorf("-after pay.prod:\n%s", out)
	}

	var printed, api controlapi.Namespaces
	if err := json.Unmarshal([]byte(mustRun(t, cmd("-o", "json")...)), &printed); err != nil {
		t.Fatal(err)
	}
	code, body, _ := get(t, srv.URL()+"/control/namespaces")
	if code != http.StatusOK {
		t.Fatalf("GET /control/namespaces: %d %s", code, body)
	}
	if err := json.Unmarshal([]byte(body), &api); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(printed, api) || len(api.Namespaces) != 3 || api.Namespaces[1].LiveClients != 1 {
		t.Errorf("-o json printed %+v\nthe API answered %+v", printed, api)
	}
	mustFail(t, exitUsage, "-limit", cmd("-limit", "-1")...)
	mustFail(t, exitUsage, "", cmd("extra")...)
}
