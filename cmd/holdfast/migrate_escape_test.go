package main

import (
	"net/http"
	"path/filepath"
	"strings"
	"testing"
)

// TestImportOfAmpersand: a value with "&" (as curl or a tool publishes
// it, not through the CLI, which re-encodes values) survives export and
// import: the audit record holds it as written, so the import writes the
// same bytes again and its read-back check passes.
func TestImportOfAmpersand(t *testing.T) {
	bin := buildBinary(t)
	dir := t.TempDir()
	srv := startServerProc(t, bin, "-data-dir", dir)
	url := srv.url()
	if code, body := request(t, "POST", url+"/control/namespaces/app/publish", "", `{"puts":{"u":"https://x/?a=1&b=2","t":"<b>"}}`); code != http.StatusOK {
		t.Fatalf("publish: %d %s", code, body)
	}
	srv.stop()
	file := filepath.Join(t.TempDir(), "store.jsonl")
	mustRun(t, "server", "export", "-data-dir", dir, "-o", file)
	members := startEtcd(t)
	if out := mustRun(t, "server", "import", "-etcd", members, "-i", file); !strings.Contains(out, "imported store") {
		t.Fatalf("import printed %q", out)
	}
}
