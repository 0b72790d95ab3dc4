package main

import (
	"path/filepath"
	"strings"
	"testing"
)

// TestServerCleanStartAndStopLogs: a clean start and stop of the server
// over each store (embedded, memory, an external etcd cluster) logs no
// WARN and no ERROR. The embedded etcd's start notices and its
// listeners' closed errors at stop are no operator's concern; the
// warning of a store without tokens is, so the server starts with a
// bootstrap token.
func TestServerCleanStartAndStopLogs(t *testing.T) {
	for _, tc := range []struct {
		name  string
		store func(t *testing.T) []string
	}{
		{"embedded", func(t *testing.T) []string { return []string{"-data-dir", t.TempDir()} }},
		{"memory", func(*testing.T) []string { return []string{"-memory"} }},
		{"etcd", func(t *testing.T) []string { return []string{"-etcd", startEtcd(t)} }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			args := append([]string{"server", "-addr", "127.0.0.1:0", "-log-format", "json",
				"-bootstrap-token-file", filepath.Join(t.TempDir(), "admin.token")}, tc.store(t)...)
			s := start(t, args...)
			rec := s.stderr.waitFor(t, "serving", s.done)
			base, _ := rec["url"].(string)
			if code, body, _ := get(t, base+"/readyz"); code != 200 {
				t.Fatalf("/readyz: %d %s", code, body)
			}
			if code := s.stop(t); code != exitOK {
				t.Fatalf("exit %d, want 0:\n%s", code, s.stderr.String())
			}
			s.stderr.waitFor(t, "stopped", nil)
			s.stderr.mu.Lock()
			var bad []string
			for _, r := range s.stderr.records {
				if l, _ := r["level"].(string); l == "WARN" || l == "ERROR" {
					bad = append(bad, l+" "+r["msg"].(string))
				}
			}
			s.stderr.mu.Unlock()
			if len(bad) > 0 {
				t.Errorf("a clean start and stop logged:\n%s\nthe log:\n%s", strings.Join(bad, "\n"), s.stderr.String())
			}
		})
	}
}
