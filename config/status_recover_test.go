package config_test

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/holdfast-dev/holdfast/config"
	"github.com/holdfast-dev/holdfast/internal/sdksuite"
	"github.com/holdfast-dev/holdfast/internal/testutil"
)

// TestLastErrorIsPastAfterRecovery: an error stays in Status.LastError
// after the namespace recovers, but says it is past.
func TestLastErrorIsPastAfterRecovery(t *testing.T) {
	srv := sdksuite.StartReference(t)
	sdksuite.Publish(t, srv, "ns", map[string]any{"v": 1})
	c := sdksuite.NewClient(t, sdksuite.Endpoint(srv.URL()))
	ns := sdksuite.Open(t, c, "ns")

	srv.FailNext(1, http.StatusServiceUnavailable, 0)
	srv.DropStreams()
	testutil.Eventually(t, waitLimit, func() bool { return ns.Status().LastError.Kind == config.ErrorResponse }, "the failure in Status")
	// The reconnect after the failure confirms the data again.
	testutil.Eventually(t, waitLimit, func() bool {
		st := ns.Status()
		return st.State == config.StateFresh && st.LastConfirmed.After(st.LastError.Time)
	}, "recovery")
	st := ns.Status()
	if !st.LastError.Recovered {
		t.Fatalf("LastError %+v not marked past though confirmed at %v", st.LastError, st.LastConfirmed)
	}
	if s := st.String(); !strings.Contains(s, "since recovered") || !strings.Contains(s, "HTTP 503") {
		t.Errorf("Status.String() = %q", s)
	}
	if time.Since(st.LastError.Time) > waitLimit {
		t.Errorf("LastError.Time %v", st.LastError.Time)
	}
}
