package main

import (
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/holdfast-dev/holdfast/config"
	"github.com/holdfast-dev/holdfast/internal/testutil"
	"github.com/holdfast-dev/holdfast/internal/version"
)

// TestServer: server -memory answers the data plane and the control API on -addr,
// and /readyz, /healthz, /statusz and /metrics (a valid Prometheus text,
// counting what it served) on -admin-addr; the end of its context (what
// SIGTERM does) stops it with exit status 0 and every goroutine gone
// (TestMain's goleak).
func TestServer(t *testing.T) {
	s := start(t, "server", "-memory", "-addr", "127.0.0.1:0", "-admin-addr", "127.0.0.1:0", "-heartbeat", "100ms", "-log-format", "json")
	rec := s.stderr.waitFor(t, "serving", s.done)
	base, _ := rec["url"].(string)
	admin, _ := rec["admin_url"].(string)
	if !strings.HasPrefix(base, "http://127.0.0.1:") || !strings.HasPrefix(admin, "http://127.0.0.1:") || base == admin {
		t.Fatalf("serving: url %q, admin_url %q", base, admin)
	}
	if v, _ := rec["version"].(string); v != config.Version {
		t.Errorf("serving: version %q, want %q", v, config.Version)
	}

	if code, body, _ := get(t, admin+"/readyz"); code != http.StatusOK || body != "ready\n" {
		t.Errorf("/readyz: %d %q, want 200 ready", code, body)
	}
	if code, body, _ := get(t, admin+"/healthz"); code != http.StatusOK || body != "ok\n" {
		t.Errorf("/healthz: %d %q", code, body)
	}

	tr := &http.Transport{}
	defer tr.CloseIdleConnections()
	hc := &http.Client{Transport: tr, Timeout: 10 * time.Second}
	resp, err := hc.Post(base+"/control/namespaces/payments.prod/publish", "application/json",
		strings.NewReader(`{"puts":{"retry-timeout-ms":50}}`))
	if err != nil {
		t.Fatal(err)
	}
	published, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("publish: %s %s", resp.Status, published)
	}
	if code, body, _ := get(t, base+"/sdk/snapshot?ns=payments.prod"); code != http.StatusOK || !strings.Contains(body, `"retry-timeout-ms":50`) {
		t.Fatalf("snapshot: %d %s", code, body)
	}

	code, body, hdr := get(t, admin+"/statusz")
	var sst serverStatus
	if code != http.StatusOK || hdr.Get("Content-Type") != "application/json" || json.Unmarshal([]byte(body), &sst) != nil {
		t.Fatalf("/statusz: %d %s %q", code, hdr.Get("Content-Type"), body)
	}
	st := sst.Status
	if st.Head < 2 || st.StoreID == "" || st.StoreKind != "memory" || len(st.StoreEndpoints) != 1 {
		t.Errorf("/statusz: %+v, want a head past the publish, a store id, the kind and the endpoints", st)
	}
	if sst.Build != version.Read() || !strings.Contains(body, `"head":`) || !strings.Contains(body, `"go_version":`) {
		t.Errorf("/statusz's build: %+v, want %+v, beside the server's fields:\n%s", sst.Build, version.Read(), body)
	}

	code, body, _ = get(t, admin+"/metrics")
	if code != http.StatusOK {
		t.Fatalf("/metrics: %d %s", code, body)
	}
	families := parseMetrics(t, body)
	for _, m := range []struct {
		name   string
		labels map[string]string
		want   float64
	}{
		{"holdfast_server_publishes_total", nil, 1},
		{"holdfast_server_head", nil, float64(st.Head)},
		{"target_info", map[string]string{"service_name": serverService, "service_version": config.Version}, 1},
	} {
		if v, ok := metricValue(families, m.name, m.labels); !ok || v < m.want {
			t.Errorf("%s%v = %v (present %v), want at least %v", m.name, m.labels, v, ok, m.want)
		}
	}
	for _, name := range []string{"go_goroutines", "process_resident_memory_bytes"} {
		if families[name] == nil {
			t.Errorf("no %s in the scrape", name)
		}
	}

	if code := s.stop(t); code != exitOK {
		t.Fatalf("exit %d after the context ended, want 0\n%s", code, s.stderr.String())
	}
	s.stderr.waitFor(t, "stopped", nil)
	if s.stdout.Len() != 0 {
		t.Errorf("server wrote on stdout: %q", s.stdout.String())
	}
}

// TestServerTextLog: the default log format is slog's text, and -memory
// says on stderr that nothing is kept.
func TestServerTextLog(t *testing.T) {
	s := start(t, "server", "-memory", "-addr", "127.0.0.1:0")
	testutil.Eventually(t, 30*time.Second, func() bool { return strings.Contains(s.stderr.String(), "msg=serving") }, "a serving line")
	// server logs "serving" before it waits for its context: stopping it
	// at once still finds the line.
	if code := s.stop(t); code != exitOK {
		t.Fatalf("exit %d\n%s", code, s.stderr.String())
	}
	out := s.stderr.String()
	if !strings.Contains(out, "msg=serving") || !strings.Contains(out, "url=http://127.0.0.1:") || !strings.Contains(out, "msg=stopped") ||
		!strings.Contains(out, "nothing is kept") {
		t.Fatalf("the text log:\n%s", out)
	}
}
