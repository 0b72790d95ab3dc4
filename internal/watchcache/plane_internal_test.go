package watchcache

// Helpers of the tests of the follower store under the data plane.

import (
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/holdfast-dev/holdfast/internal/dataplane"
)

// waitLimit bounds every wait of these tests on a condition.
const waitLimit = 10 * time.Second

// The data plane's pacing (package dataplane): how often at most a
// watcher wakes for progress, and how a relay's beat is spread.
const progressEvery = 250 * time.Millisecond

func beatSpread(heartbeat time.Duration) time.Duration { return min(heartbeat/4, time.Second) }

func recentProgress(heartbeat time.Duration) time.Duration {
	return 2*beatSpread(heartbeat) + progressEvery
}

// urlOf is the base URL of a listening data plane.
func urlOf(s *dataplane.Server) string { return "http://" + s.Addr() }

// newClient returns an HTTP client whose connections are closed at the end
// of the test (so that goleak sees none of them).
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
