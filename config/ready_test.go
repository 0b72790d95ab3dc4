package config_test

import (
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/holdfast-dev/holdfast/config"
	"github.com/holdfast-dev/holdfast/internal/sdksuite"
	"github.com/holdfast-dev/holdfast/internal/testutil"
)

func TestCheckReady(t *testing.T) {
	srv := sdksuite.StartReference(t)
	sdksuite.Publish(t, srv, "pay.prod", map[string]any{"k": 1})
	sdksuite.Publish(t, srv, "flags.prod", map[string]any{"k": 1})
	c := sdksuite.NewClient(t, sdksuite.Endpoint(srv.URL()), config.WithReconnectBackoff(5*time.Millisecond, 20*time.Millisecond))
	pay := sdksuite.Open(t, c, "pay.prod", config.FailClosed(), config.MaxStaleness(300*time.Millisecond), config.Defaults(map[string]any{"k": 0}))
	flags := sdksuite.Open(t, c, "flags.prod", config.MaxStaleness(300*time.Millisecond)) // fail-open

	if err := c.CheckReady(0, "pay.prod", "flags.prod"); err != nil {
		t.Fatalf("fresh namespaces: %v", err)
	}
	if err := c.CheckReady(0); err != nil {
		t.Fatalf("every open namespace, fresh: %v", err)
	}
	err := c.CheckReady(0, "pay.prod", "other.prod")
	var nr *config.NotReadyError
	if !errors.As(err, &nr) || !errors.Is(err, config.ErrNotReady) {
		t.Fatalf("a namespace not open: got %v, want a *NotReadyError", err)
	}
	if nr.Checked != 2 || len(nr.NotReady) != 1 || nr.NotReady[0].Namespace != "other.prod" || nr.NotReady[0].State != config.StateSyncing {
		t.Fatalf("not ready = %+v", nr)
	}
	code, body := probe(t, c.ReadyHandler(0, "pay.prod", "flags.prod"))
	if code != http.StatusOK || body != "ready\n" {
		t.Fatalf("handler when ready: %d %q", code, body)
	}

	// The plane goes away: pay fails closed, flags breaches and serves on.
	if err := srv.Stop(); err != nil {
		t.Fatal(err)
	}
	// Under load the data can go past MaxStaleness before a reconnect has
	// failed: wait for the error the reason should name, too.
	testutil.Eventually(t, waitLimit, func() bool {
		st := pay.Status()
		return st.State == config.StateFailedClosed && st.LastError.Kind == config.ErrorNetwork && flags.Status().State == config.StateBreached
	}, "pay FailedClosed with a network error and flags Breached")
	err = c.CheckReady(0, "pay.prod", "flags.prod")
	if !errors.As(err, &nr) || len(nr.NotReady) != 1 || nr.NotReady[0].Namespace != "pay.prod" || nr.NotReady[0].State != config.StateFailedClosed {
		t.Fatalf("after the plane went away, no staleness limit: %v", err)
	}
	if !strings.Contains(nr.NotReady[0].Reason, "failed closed") || !strings.Contains(nr.NotReady[0].Reason, "last error (network)") {
		t.Errorf("reason %q: want it to say failed closed and the last error", nr.NotReady[0].Reason)
	}
	if err := c.CheckReady(time.Hour, "flags.prod"); err != nil {
		t.Errorf("a breached fail-open namespace within the probe's limit: %v", err)
	}
	err = c.CheckReady(100*time.Millisecond, "flags.prod")
	if !errors.As(err, &nr) || nr.NotReady[0].State != config.StateBreached || !strings.Contains(nr.NotReady[0].Reason, "past the 100ms this check allows") {
		t.Errorf("past the probe's staleness: %v", err)
	}
	code, body = probe(t, c.ReadyHandler(100*time.Millisecond, "pay.prod", "flags.prod"))
	if code != http.StatusServiceUnavailable || !strings.HasPrefix(body, "not ready: 2 of 2 namespaces\npay.prod: failed closed") || !strings.Contains(body, "\nflags.prod: Breached: stale") {
		t.Errorf("handler when not ready: %d %q", code, body)
	}

	// Back: ready again, without a new probe object.
	if err := srv.Restart(); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, waitLimit, func() bool { return c.CheckReady(100*time.Millisecond, "pay.prod", "flags.prod") == nil }, "ready again")

	_ = c.Close()
	if err := c.CheckReady(0, "pay.prod"); !errors.As(err, &nr) || nr.NotReady[0].State != config.StateClosed {
		t.Errorf("after Close: %v", err)
	}
}

func probe(t *testing.T, h http.Handler) (int, string) {
	t.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/readyz", nil))
	if ct := rec.Header().Get("Content-Type"); !strings.HasPrefix(ct, "text/plain") {
		t.Errorf("Content-Type %q", ct)
	}
	b, _ := io.ReadAll(rec.Body)
	return rec.Code, string(b)
}
