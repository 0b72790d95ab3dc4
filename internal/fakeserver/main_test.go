package fakeserver

import (
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/holdfast-dev/holdfast/internal/wire"
	"github.com/holdfast-dev/holdfast/transport"
)

// Every test must leave no goroutine behind: Close waits for all of them.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// start starts a server closed at the end of the test.
func start(t testing.TB, opts ...Option) *Server {
	t.Helper()
	s, err := Start(opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := s.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return s
}

// newClient returns an HTTP client whose connections are closed at the end
// of the test (so that goleak sees none of them). It never decompresses on
// its own: the tests look at Content-Encoding.
func newClient(t testing.TB) *http.Client {
	t.Helper()
	tr := &http.Transport{DisableCompression: true, MaxIdleConnsPerHost: 16}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr}
}

// do sends one request and returns the response (body already read and
// closed) and its body.
func do(t testing.TB, c *http.Client, method, url, body string, hdr ...string) (*http.Response, []byte) {
	t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, url, rd)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("%s %s: read body: %v", method, url, err)
	}
	return resp, data
}

func decode[T any](t testing.TB, data []byte) T {
	t.Helper()
	var v T
	if err := json.Unmarshal(data, &v); err != nil {
		t.Fatalf("decode %T from %q: %v", v, data, err)
	}
	return v
}

// waitLimit bounds every wait of these tests on a condition.
const waitLimit = 10 * time.Second

func errorsIs(err, target error) bool { return errors.Is(err, target) }

// reportPresence reports clients live as relay's presence report does
// (POST /sdk/presence, a run of its own).
func reportPresence(t testing.TB, c *http.Client, base, relay string, live ...string) {
	t.Helper()
	body, err := json.Marshal(wire.PresenceReport{RelayID: relay, Epoch: "test", Seq: 1, Full: true, EveryMillis: 60_000, Live: live})
	if err != nil {
		t.Fatal(err)
	}
	if resp, reply := do(t, c, http.MethodPost, base+transport.PathPresence, string(body), "Content-Type", "application/json"); resp.StatusCode != http.StatusNoContent {
		t.Fatalf("presence report: %d %s", resp.StatusCode, reply)
	}
}
