package server_test

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/holdfast-dev/holdfast/controlapi"
	"github.com/holdfast-dev/holdfast/internal/testutil"
)

// TestStoreOutage: a server over an external etcd that stops answering
// (here: an etcd of the test's own, closed) is not ready and says why;
// the control API and the data plane answer 503 with Retry-After, never
// an empty namespace as if it existed; a namespace its cache holds is
// still served.
func TestStoreOutage(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	etcdStore, s, url := startOverOwnEtcd(t, 200*time.Millisecond)
	publish(t, url, "cached", map[string]any{"v": 1})
	get := func(path string) (*http.Response, string) {
		t.Helper()
		resp, err := http.Get(url + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var b strings.Builder
		buf := make([]byte, 4096)
		n, _ := resp.Body.Read(buf)
		b.Write(buf[:n])
		return resp, b.String()
	}
	if resp, body := get("/sdk/snapshot?ns=cached"); resp.StatusCode != http.StatusOK {
		t.Fatalf("snapshot before the outage: %s %s", resp.Status, body)
	}
	if err := s.Ready(ctx); err != nil {
		t.Fatalf("not ready before the outage: %v", err)
	}

	if err := etcdStore.Close(); err != nil {
		t.Fatal(err)
	}
	if err := s.Ready(ctx); err == nil || !strings.Contains(err.Error(), "the store does not answer") {
		t.Errorf("Ready during the outage = %v, want the store's silence", err)
	}
	for _, path := range []string{"/sdk/snapshot?ns=unknown", "/control/namespaces/unknown/history"} {
		resp, body := get(path)
		if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") == "" {
			t.Errorf("GET %s during the outage: %s (Retry-After %q) %s; want 503 with Retry-After", path, resp.Status, resp.Header.Get("Retry-After"), body)
		}
	}
	if resp, body := get("/sdk/snapshot?ns=cached"); resp.StatusCode != http.StatusOK {
		t.Errorf("the cached namespace during the outage: %s %s; want it served", resp.Status, body)
	}
	// A publish says so in an operator's words, with what to do.
	_, err := controlClient(t, url).Publish(ctx, "cached", controlapi.PublishRequest{Puts: testutil.JSONValues(t, map[string]any{"v": 2})})
	var ae *controlapi.Error
	if !errors.As(err, &ae) || ae.StatusCode != http.StatusServiceUnavailable || !strings.HasPrefix(ae.Message, "the store did not answer") ||
		!strings.Contains(ae.Message, "quorum") || strings.Contains(ae.Message, "context deadline") {
		t.Errorf("a publish during the outage: %v", err)
	}
}
