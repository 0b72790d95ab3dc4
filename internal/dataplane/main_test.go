package dataplane

import (
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"go.uber.org/goleak"
)

// Every test must leave no goroutine behind: Close waits for all of them.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// waitLimit bounds how long a test waits for what must happen.
const waitLimit = 10 * time.Second

// newClient returns an HTTP client whose connections are closed at the end
// of the test (so that goleak sees none of them).
func newClient(t testing.TB) *http.Client {
	t.Helper()
	tr := &http.Transport{DisableCompression: true, MaxIdleConnsPerHost: 16}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr}
}

func decode[T any](t testing.TB, data []byte) T {
	t.Helper()
	var v T
	if err := json.Unmarshal(data, &v); err != nil {
		t.Fatalf("decode %T from %q: %v", v, data, err)
	}
	return v
}
