package server_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/holdfast-dev/holdfast/server"
	"github.com/holdfast-dev/holdfast/server/store"
)

func startWithHeartbeat(t *testing.T, sc store.Config, hb time.Duration) (*server.Server, *httptest.Server) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s, err := server.New(ctx, server.Config{Store: sc, Heartbeat: hb})
	if err != nil {
		t.Fatal(err)
	}
	return s, httptest.NewServer(s.Handler())
}

// TestBackfillQuietNamespace: a client resuming on a restarted server
// from a cursor below the watch cache's floor, on a namespace quiet since
// then, resumes at once, with the default heartbeat too: the backfill
// ends on a read of the namespace's revision, not on the watch's next
// progress (5 s by default, as long as the backfill may wait).
func TestBackfillQuietNamespace(t *testing.T) {
	for _, hb := range []time.Duration{200 * time.Millisecond, server.DefaultHeartbeat} {
		t.Run(hb.String(), func(t *testing.T) {
			sc := store.Config{Kind: store.KindEmbedded, DataDir: t.TempDir()}
			s1, h1 := startWithHeartbeat(t, sc, hb)
			publish(t, h1.URL, "quiet", map[string]any{"a": 1})
			var snap struct{ Cursor int64 }
			resp, err := http.Get(h1.URL + "/sdk/snapshot?ns=quiet")
			if err != nil {
				t.Fatal(err)
			}
			json.NewDecoder(resp.Body).Decode(&snap)
			resp.Body.Close()
			publish(t, h1.URL, "other", map[string]any{"b": 1})
			h1.CloseClientConnections()
			h1.Close()
			s1.Close()

			s2, h2 := startWithHeartbeat(t, sc, hb)
			defer func() { h2.CloseClientConnections(); h2.Close(); s2.Close() }()
			start := time.Now()
			resp, err = http.Get(fmt.Sprintf("%s/sdk/events?ns=quiet&since=%d&wait=1s", h2.URL, snap.Cursor))
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			took := time.Since(start)
			t.Logf("since=%d: %d in %v: %s", snap.Cursor, resp.StatusCode, took.Round(time.Millisecond), body)
			if resp.StatusCode != 200 || took > 3*time.Second {
				t.Errorf("resume from cursor %d on a restarted server: status %d after %v; want 200 at once", snap.Cursor, resp.StatusCode, took)
			}
		})
	}
}
