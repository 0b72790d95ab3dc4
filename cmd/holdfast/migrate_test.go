package main

import (
	"encoding/json"
	"fmt"
	"net/http"
	"path/filepath"
	"strings"
	"testing"

	"github.com/holdfast-dev/holdfast/internal/testutil"
)

// TestMoveEmbeddedStoreToCluster: a store grows out of one machine. A
// `holdfast server -data-dir` with two namespaces, a schema, publishes, a
// delete and a rollback, and an SDK client on it; the server stopped, its
// store exported and imported into a new 3-member cluster (Debian's
// etcd), and `holdfast server -etcd` started on the same address: the
// same store id, history, values and schema, and the client resumes by
// cursor (no snapshot) and gets the next publish.
func TestMoveEmbeddedStoreToCluster(t *testing.T) {
	bin := buildBinary(t)
	dir := t.TempDir()
	srv := startServerProc(t, bin, "-data-dir", dir)
	url := srv.url()
	mustRun(t, "schema", "set", "-server", url, "app", writeFile(t, `{"type":"object","properties":{"a":{"type":"integer","maximum":10}}}`))
	mustRun(t, "publish", "-server", url, "-actor", "alice", "-reason", "first", "app", "a=1", "b=2")
	r2 := revisionOf(t, mustRun(t, "publish", "-server", url, "-o", "json", "app", "a=3"))
	mustRun(t, "publish", "-server", url, "other", "x=1")
	mustRun(t, "publish", "-server", url, "-f", writeFile(t, `{"deletes":["b"]}`), "app")
	mustRun(t, "rollback", "-server", url, "-to", fmt.Sprint(r2), "-reason", "undo", "app")
	last := revisionOf(t, mustRun(t, "publish", "-server", url, "-o", "json", "app", "a=4"))

	c, ct := fleetClient(t, []string{url})
	ns := openNS(t, c, "app")
	testutil.Eventually(t, waitLimit, func() bool { return ns.Status().Revision == last }, "the client at the last publish")
	id, _ := serverStatusz(t, url)
	history := mustRun(t, "history", "-server", url, "-o", "json", "app")
	values := mustRun(t, "get", "-server", url, "-o", "json", "-revision", fmt.Sprint(r2), "app")

	srv.stop()
	file := filepath.Join(t.TempDir(), "store.jsonl")
	if out := mustRun(t, "server", "export", "-data-dir", dir, "-o", file); !strings.Contains(out, "exported store "+id) {
		t.Fatalf("export printed %q", out)
	}
	members := startEtcd(t)
	if out := mustRun(t, "server", "import", "-etcd", members, "-i", file); !strings.Contains(out, "imported store "+id) || !strings.Contains(out, "compacted up to 0") {
		t.Fatalf("import printed %q", out)
	}
	mustFail(t, exitFail, "the cluster must be new and empty", "server", "import", "-etcd", members, "-i", file)
	snapshots := ct.snapshots.Load()

	moved := &relayProc{t: t, bin: bin, addr: srv.addr, ready: "serving",
		args: []string{"server", "-addr", srv.addr, "-heartbeat", "200ms", "-log-format", "json", "-etcd", members}}
	moved.start()
	t.Cleanup(moved.kill)
	if got, _ := serverStatusz(t, url); got != id {
		t.Fatalf("store id %q on the cluster, want %q", got, id)
	}
	testutil.Eventually(t, waitLimit, func() bool {
		_, leads := serverStatusz(t, url)
		return leads
	}, "the server on the cluster leads (no election key came over)")
	if got := mustRun(t, "history", "-server", url, "-o", "json", "app"); got != history {
		t.Errorf("history on the cluster:\n%s\nwant:\n%s", got, history)
	}
	if got := mustRun(t, "get", "-server", url, "-o", "json", "-revision", fmt.Sprint(r2), "app"); got != values {
		t.Errorf("values at %d on the cluster:\n%s\nwant:\n%s", r2, got, values)
	}
	mustFail(t, exitFail, "(HTTP 422)", "publish", "-server", url, "app", "a=11")
	next := revisionOf(t, mustRun(t, "publish", "-server", url, "-o", "json", "app", "a=5"))
	testutil.Eventually(t, waitLimit, func() bool { return ns.Status().Revision == next }, "the client at the first publish on the cluster")
	if n := ct.snapshots.Load() - snapshots; n != 0 {
		t.Errorf("the client fetched %d snapshots after the move, want 0", n)
	}
	var v struct{ Values map[string]json.RawMessage }
	code, body, _ := get(t, url+"/control/namespaces/app/values?revision="+fmt.Sprint(next))
	if code != http.StatusOK || json.Unmarshal([]byte(body), &v) != nil || string(v.Values["a"]) != "5" || string(v.Values["b"]) != "2" { // b: deleted, then back with the rollback
		t.Errorf("values after the move: %d %s", code, body)
	}
}
