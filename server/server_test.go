package server_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/holdfast-dev/holdfast/config"
	"github.com/holdfast-dev/holdfast/controlapi"
	"github.com/holdfast-dev/holdfast/internal/testutil"
	"github.com/holdfast-dev/holdfast/server"
	"github.com/holdfast-dev/holdfast/server/store"
)

// startServer starts a Server over cfg and serves it on a loopback port.
func startServer(t *testing.T, sc store.Config) (*server.Server, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s, err := server.New(ctx, server.Config{Store: sc, Heartbeat: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(s.Handler())
	t.Cleanup(func() {
		hs.CloseClientConnections()
		hs.Close()
		if err := s.Close(); err != nil {
			t.Error(err)
		}
	})
	return s, hs.URL
}

// startOverOwnEtcd starts a Server over an etcd the test owns (an
// embedded store opened apart, the server's external cluster), which the
// test may write to past the server, or close. A Server's Close is an
// error unless the test closed its etcd first.
func startOverOwnEtcd(t *testing.T, heartbeat time.Duration) (*store.Store, *server.Server, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	etcdStore, err := store.Open(ctx, store.Config{Kind: store.KindEmbedded, DataDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = etcdStore.Close() })
	s, err := server.New(ctx, server.Config{Store: store.Config{Kind: store.KindExternal, Endpoints: etcdStore.Endpoints}, Heartbeat: heartbeat})
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(s.Handler())
	t.Cleanup(func() {
		hs.CloseClientConnections()
		hs.Close()
		if err := s.Close(); err != nil && etcdStore.Client != nil {
			t.Error(err)
		}
	})
	return etcdStore, s, hs.URL
}

// controlClient returns a client of the control API of the server at
// base, sending the token's secret when one is given.
func controlClient(t testing.TB, base string, token ...string) *controlapi.Client {
	t.Helper()
	var opts []controlapi.ClientOption
	if len(token) > 0 {
		opts = append(opts, controlapi.WithToken(token[0]))
	}
	c, err := controlapi.NewClient(base, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// statusOf is the HTTP status a control API call's error carries: 0 when
// the call succeeded, -1 when it got no reply of the API.
func statusOf(err error) int {
	var e *controlapi.Error
	switch {
	case err == nil:
		return 0
	case errors.As(err, &e):
		return e.StatusCode
	}
	return -1
}

// rawControl sends a control API request whose body is sent as it is
// (the bad bodies a typed client cannot send) and returns the status.
func rawControl(t *testing.T, method, url string, body any, out any) int {
	t.Helper()
	var rd io.Reader
	switch b := body.(type) {
	case nil:
	case []byte:
		rd = bytes.NewReader(b)
	default:
		j, err := json.Marshal(b)
		if err != nil {
			t.Fatal(err)
		}
		rd = bytes.NewReader(j)
	}
	req, err := http.NewRequest(method, url, rd)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	if out != nil && resp.StatusCode < 300 {
		if err := json.Unmarshal(data, out); err != nil {
			t.Fatalf("%s %s: %v: %s", method, url, err, data)
		}
	}
	return resp.StatusCode
}

func publish(t *testing.T, base, ns string, puts map[string]any) int64 {
	t.Helper()
	rev, err := controlClient(t, base).Publish(t.Context(), ns, controlapi.PublishRequest{Puts: testutil.JSONValues(t, puts), Actor: "test"})
	if err != nil {
		t.Fatalf("publish to %s: %v", ns, err)
	}
	return rev
}

func TestPublishReachesAClient(t *testing.T) {
	_, base := startServer(t, store.Config{Kind: store.KindMemory})
	rev := publish(t, base, "payments.prod", map[string]any{"retry-timeout-ms": 50})

	cl, err := config.New(config.WithEndpoint(base), config.WithCacheDir(t.TempDir()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ns, err := cl.Namespace(ctx, "payments.prod")
	if err != nil {
		t.Fatal(err)
	}
	if got := ns.Int("retry-timeout-ms", 0); got != 50 {
		t.Fatalf("retry-timeout-ms = %d, want 50", got)
	}
	changed := make(chan config.Change, 1)
	defer ns.OnChange("retry-timeout-ms", func(c config.Change) { changed <- c })()
	rev2 := publish(t, base, "payments.prod", map[string]any{"retry-timeout-ms": 75})
	if rev2 <= rev {
		t.Fatalf("second publish at %d, not above %d", rev2, rev)
	}
	select {
	case <-changed:
	case <-ctx.Done():
		t.Fatal("no OnChange after the second publish")
	}
	if got := ns.Int("retry-timeout-ms", 0); got != 75 {
		t.Fatalf("retry-timeout-ms = %d, want 75", got)
	}
}

func TestReservedKeysAndBadPublishesWriteNothing(t *testing.T) {
	_, base := startServer(t, store.Config{Kind: store.KindMemory})
	rev := publish(t, base, "app", map[string]any{"a": 1})
	for _, tc := range []struct {
		name string
		body any
		want int
	}{
		{"reserved key", map[string]any{"puts": map[string]any{"$holdfast/rollout": 1}}, http.StatusBadRequest},
		{"invalid key", map[string]any{"puts": map[string]any{"": 1}}, http.StatusBadRequest},
		{"unknown field", map[string]any{"putz": map[string]any{"a": 2}}, http.StatusBadRequest},
		{"not JSON", []byte("{"), http.StatusBadRequest},
		{"put and delete", map[string]any{"puts": map[string]any{"a": 2}, "deletes": []string{"a"}}, http.StatusBadRequest},
		{"stale if_revision", map[string]any{"puts": map[string]any{"a": 2}, "if_revision": rev - 1}, http.StatusConflict},
		{"too large", map[string]any{"puts": map[string]any{"a": string(make([]byte, 2<<20))}}, http.StatusRequestEntityTooLarge},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if st := rawControl(t, "POST", base+"/control/namespaces/app/publish", tc.body, nil); st != tc.want {
				t.Fatalf("status %d, want %d", st, tc.want)
			}
		})
	}
	hist, err := controlClient(t, base).History(t.Context(), "app", controlapi.HistoryOptions{})
	if err != nil || len(hist.Revisions) != 1 || hist.Revisions[0].Revision != rev {
		t.Fatalf("history after refused publishes: %v, %+v; want the one publish at %d", err, hist, rev)
	}
}

func TestSchemaIsEnforcedAndSurvivesARestart(t *testing.T) {
	dir := t.TempDir()
	sc := store.Config{Kind: store.KindEmbedded, DataDir: dir}
	s, base := startServer(t, sc)
	id := s.StoreID()
	sch := []byte(`{"type":"object","properties":{"n":{"type":"integer","maximum":10}}}`)
	if err := controlClient(t, base).PutSchema(t.Context(), "app", sch); err != nil {
		t.Fatalf("PUT schema: %v", err)
	}
	rev := publish(t, base, "app", map[string]any{"n": 5})
	_, err := controlClient(t, base).Publish(t.Context(), "app", controlapi.PublishRequest{Puts: testutil.JSONValues(t, map[string]any{"n": 11})})
	if st := statusOf(err); st != http.StatusUnprocessableEntity {
		t.Fatalf("publish against the schema: %d (%v), want 422", st, err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}

	s2, base2 := startServer(t, sc)
	if s2.StoreID() != id {
		t.Fatalf("store id after restart %q, want %q", s2.StoreID(), id)
	}
	c2 := controlClient(t, base2)
	_, err = c2.Publish(t.Context(), "app", controlapi.PublishRequest{Puts: testutil.JSONValues(t, map[string]any{"n": 11})})
	if st := statusOf(err); st != http.StatusUnprocessableEntity {
		t.Fatalf("publish against the schema after restart: %d (%v), want 422", st, err)
	}
	v, err := c2.ValuesAt(t.Context(), "app", rev)
	if err != nil || string(v.Values["n"]) != "5" {
		t.Fatalf("values at %d after restart: %v %+v", rev, err, v)
	}
	if _, err := c2.GetSchema(t.Context(), "app"); err != nil {
		t.Fatalf("GET schema after restart: %v", err)
	}
}

func TestASecondServerOfADataDirIsRefused(t *testing.T) {
	dir := t.TempDir()
	startServer(t, store.Config{Kind: store.KindEmbedded, DataDir: dir})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err := server.New(ctx, server.Config{Store: store.Config{Kind: store.KindEmbedded, DataDir: dir}})
	if err == nil || !bytes.Contains([]byte(err.Error()), []byte("pid")) {
		t.Fatalf("second server of one data dir: %v, want ErrLocked naming the holder's pid", err)
	}
}

// TestAuditOutlivesCompaction: after POST /control/compact the history,
// values and diff still answer from the audit log; past -audit-retention
// the oldest records fold into the base, and history says it is
// truncated.
func TestAuditOutlivesCompaction(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s, err := server.New(ctx, server.Config{Store: store.Config{Kind: store.KindMemory}, AuditRetention: 3})
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(s.Handler())
	defer func() {
		hs.Close()
		if err := s.Close(); err != nil {
			t.Error(err)
		}
	}()
	base := hs.URL
	var revs []int64
	for i := 1; i <= 6; i++ {
		revs = append(revs, publish(t, base, "app", map[string]any{"n": i}))
	}
	c := controlClient(t, base)
	if _, err := c.Compact(t.Context(), 0); err != nil {
		t.Fatalf("compact: %v", err)
	}
	var h *controlapi.History
	testutil.Eventually(t, 10*time.Second, func() bool {
		if h, err = c.History(t.Context(), "app", controlapi.HistoryOptions{}); err != nil {
			t.Fatalf("history: %v", err)
		}
		return h.Truncated && len(h.Revisions) == 3
	}, "the history trimmed to 3 records")
	if h.Revisions[0].Revision != revs[5] || h.Revisions[2].Revision != revs[3] {
		t.Fatalf("history %+v, want revisions %v", h, revs[3:])
	}
	for _, tc := range []struct {
		rev    int64
		status int
		n      string
	}{
		{revs[4], http.StatusOK, "5"}, // below the compaction point, in the log
		{revs[2], http.StatusOK, "3"}, // the base
		{revs[1], http.StatusGone, ""},
	} {
		v, err := c.ValuesAt(t.Context(), "app", tc.rev)
		st := statusOf(err)
		if st == 0 {
			st = http.StatusOK
		}
		if st != tc.status || tc.n != "" && string(v.Values["n"]) != tc.n {
			t.Errorf("values at %d: %d %v %+v, want %d n=%s", tc.rev, st, err, v, tc.status, tc.n)
		}
	}
	if d, err := c.Diff(t.Context(), "app", revs[2], revs[5]); err != nil || len(d.Changes) != 1 {
		t.Errorf("diff from the base: %v %+v", err, d)
	}
}

// TestAuditRetentionInBytes: past -audit-retention-bytes the oldest
// records fold into the base though the record count is far from its
// bound: a few large publishes cannot grow the audit log without end.
func TestAuditRetentionInBytes(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s, err := server.New(ctx, server.Config{Store: store.Config{Kind: store.KindMemory}, AuditRetention: 1000, AuditRetentionBytes: 50_000})
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(s.Handler())
	defer func() {
		hs.Close()
		if err := s.Close(); err != nil {
			t.Error(err)
		}
	}()
	big := strings.Repeat("x", 10_000)
	var last int64
	for i := range 12 {
		last = publish(t, hs.URL, "app", map[string]any{"blob": fmt.Sprint(i, big)})
	}
	var h *controlapi.History
	testutil.Eventually(t, 10*time.Second, func() bool {
		if h, err = controlClient(t, hs.URL).History(t.Context(), "app", controlapi.HistoryOptions{}); err != nil {
			t.Fatalf("history: %v", err)
		}
		// Each record holds ~10 KB: 50 KB keeps four of them.
		return h.Truncated && len(h.Revisions) == 4
	}, "the history trimmed to the records that fit 50,000 bytes")
	if h.Revisions[0].Revision != last {
		t.Fatalf("history %+v: the newest record is not %d", h, last)
	}
}
