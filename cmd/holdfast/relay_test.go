package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/holdfast-dev/holdfast/access"
	"github.com/holdfast-dev/holdfast/config"
	"github.com/holdfast-dev/holdfast/internal/listen"
	"github.com/holdfast-dev/holdfast/internal/version"
	"github.com/holdfast-dev/holdfast/relay"
)

func TestParseUpstream(t *testing.T) {
	for _, tc := range []struct {
		in   string
		urls []string
		name string // String()
	}{
		{"http://origin:8080", []string{"http://origin:8080"}, "http://origin:8080"},
		{"https://origin/holdfast/", []string{"https://origin/holdfast/"}, "https://origin/holdfast/"},
		{" http://a:1 , https://b:2 ", []string{"http://a:1", "https://b:2"}, "http://a:1,https://b:2"},
		{"https://user:secret@origin", []string{"https://user:secret@origin"}, "https://user:xxxxx@origin"},
	} {
		up, err := parseUpstream(tc.in)
		if err != nil {
			t.Errorf("%q: %v", tc.in, err)
			continue
		}
		if !reflect.DeepEqual(up.urls, tc.urls) || up.String() != tc.name {
			t.Errorf("%q: %q %q, want %q %q", tc.in, up.urls, up.String(), tc.urls, tc.name)
		}
	}
	for _, tc := range []struct{ in, want string }{
		{"", "-upstream is required"},
		{" , ", "names no upstream"},
		{"ftp://origin", `scheme must be http or https, got "ftp"`},
		{"origin:8080", `-upstream "origin:8080" has no scheme: write http://origin:8080 (or https://origin:8080 for a TLS listener)`},
		{"127.0.0.1:8080", `-upstream "127.0.0.1:8080" has no scheme: write http://127.0.0.1:8080`},
		{"http://a:1,b:2", `-upstream "b:2" has no scheme: write http://b:2`},
		{"//origin:8080", `scheme must be http or https, got ""`},
		{"http://", "has no host"},
		{"http://origin?x=1", "must not have a query or fragment"},
		{"http://origin#top", "must not have a query or fragment"},
		{"etcd://10.0.0.1:2379", "a relay follows holdfast servers, not etcd: run 'holdfast server -etcd 10.0.0.1:2379'"},
		{"http://a:1,etcd://b:2379", "a relay follows holdfast servers, not etcd"},
	} {
		_, err := parseUpstream(tc.in)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: %v, want %q", tc.in, err, tc.want)
			continue
		}
		if !errors.As(err, new(usageError)) {
			t.Errorf("%q: %T is not a usage error", tc.in, err)
		}
	}
}

// TestRelayUsageErrors: bad relay flags exit 2 with a clear reason.
func TestRelayUsageErrors(t *testing.T) {
	base := []string{"relay", "-addr", "127.0.0.1:0"}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"-upstream", "http://a:1", "-namespaces", "payments.prod,Not Valid"}, `-namespaces: transport: invalid namespace name: "Not Valid"`},
		{[]string{"-upstream", "http://a:1", "-allow", "payments.*,[z-"}, `-allow: pattern "[z-": syntax error in pattern`},
		{[]string{"-upstream", "http://a:1", "-heartbeat", "0s"}, "-heartbeat must be positive"},
		{[]string{"-upstream", "http://a:1", "-history", "-1"}, "must not be negative"},
		{[]string{"-upstream", "http://a:1", "-max-namespaces", "0"}, "-max-namespaces must be positive"},
		{[]string{"-upstream", "http://a:1", "-linger", "-1s"}, "-linger must not be negative"},
		{[]string{"-upstream", "http://a:1", "-max-snapshots", "0"}, "-max-snapshots must be positive"},
		{[]string{"-upstream", "http://a:1", "-log-format", "logfmt"}, "must be text or json"},
		{[]string{"-upstream", "http://a:1", "payments.prod"}, "takes no arguments"},
	} {
		args := append(append([]string(nil), base...), tc.args...)
		code, out, errOut := runCapture(args...)
		if code != exitUsage || !strings.Contains(errOut, tc.want) || out != "" {
			t.Errorf("%q: exit %d, stdout %q, stderr:\n%s\nwant exit 2 and %q", args, code, out, errOut, tc.want)
		}
	}
}

// TestRelayCommandLines: valid command lines get past the flags to the
// relay (no usage error): with the context already ended, the command
// either serves and stops at once (exit 0), or, while relay.New is not
// implemented, reports its error (exit 1). Several http(s) upstreams are
// logged as one followed, the others ignored (until the failover source).
func TestRelayCommandLines(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	dir := t.TempDir()
	for _, args := range [][]string{
		{"-upstream", "http://127.0.0.1:1", "-token", "secret", "-open", "-cache-dir", dir, "-namespaces", "payments.prod", "-allow", "payments.*"},
		{"-upstream", "http://127.0.0.1:1", "-token", "a-secret-of-the-relay-scope", "-namespaces", "payments.prod"},
		{"-upstream", "https://127.0.0.1:1/prefix", "-heartbeat", "1s", "-history", "10", "-history-bytes", "65536", "-linger", "0s"},
		{"-upstream", "http://127.0.0.1:1,http://127.0.0.1:2", "-admin-addr", "127.0.0.1:0"},
		{"-upstream", "http://127.0.0.1:3", "-id", "relay-a", "-max-namespaces", "5", "-max-snapshots", "2", "-retry-after-window", "1s"},
	} {
		all := append([]string{"relay", "-addr", "127.0.0.1:0", "-log-format", "json"}, args...)
		var out strings.Builder
		logs := newLogRecorder()
		code := run(ctx, all, &out, logs)
		switch code {
		case exitOK:
		case exitFail:
			if !strings.Contains(logs.String(), "holdfast relay: relay: ") {
				t.Errorf("%q: exit 1 without the relay's reason:\n%s", all, logs.String())
			}
		default:
			t.Errorf("%q: exit %d, want 0 or 1:\n%s", all, code, logs.String())
		}
	}
}

// stubRelay stands in for a *relay.Relay: a data plane with a snapshot
// and a watch that holds until Close, and settable readiness and
// namespaces.
type stubRelay struct {
	mu     sync.Mutex
	ready  error
	ns     []relay.NamespaceStatus
	closed chan struct{}
	once   sync.Once
	closes atomic.Int32
}

func newStubRelay() *stubRelay {
	return &stubRelay{closed: make(chan struct{}), ready: errors.New("relay: no data from upstream yet")}
}

func (s *stubRelay) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /sdk/snapshot", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"stub":true}`))
	})
	mux.HandleFunc("GET /sdk/watch", func(w http.ResponseWriter, req *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		_, _ = w.Write([]byte("event: progress\ndata: {}\n\n"))
		w.(http.Flusher).Flush()
		select {
		case <-s.closed: // Close ends the streams
		case <-req.Context().Done():
		}
	})
	return mux
}

func (s *stubRelay) Ready() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.ready
}

func (s *stubRelay) Namespaces() []relay.NamespaceStatus {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]relay.NamespaceStatus(nil), s.ns...)
}

func (s *stubRelay) Close() error {
	s.closes.Add(1)
	s.once.Do(func() { close(s.closed) })
	return nil
}

func (s *stubRelay) set(ready error, ns ...relay.NamespaceStatus) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.ready, s.ns = ready, ns
}

// servedRelay runs serveRelay on a stub relay until stop.
type servedRelay struct {
	stub     *stubRelay
	logs     *logRecorder
	cancel   context.CancelFunc
	done     chan struct{}
	err      error
	data     string // base URLs
	adminURL string
}

func serveStub(t *testing.T, adminAddr string) *servedRelay {
	t.Helper()
	return serveStubTokens(t, adminAddr, nil)
}

func serveStubTokens(t *testing.T, adminAddr string, toks *access.Tokens) *servedRelay {
	t.Helper()
	m, err := newMetrics(relayService)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	s := &servedRelay{stub: newStubRelay(), logs: newLogRecorder(), cancel: cancel, done: make(chan struct{})}
	log := slog.New(slog.NewJSONHandler(s.logs, nil))
	go func() {
		defer close(s.done)
		s.err = serveRelay(ctx, log, s.stub, m, listen.Config{Logger: log}, toks, nil, "127.0.0.1:0", adminAddr, "http://origin:8080")
		s.err = errors.Join(s.err, m.shutdown())
	}()
	t.Cleanup(func() {
		cancel()
		<-s.done
	})
	rec := s.logs.waitFor(t, "relay serving", s.done)
	if v, _ := rec["version"].(string); v != config.Version {
		t.Errorf("relay serving: version %q, want %q", v, config.Version)
	}
	s.data, _ = rec["url"].(string)
	s.adminURL, _ = rec["admin_url"].(string)
	if rec["upstream"] != "http://origin:8080" {
		t.Errorf("relay serving: upstream %v", rec["upstream"])
	}
	return s
}

func (s *servedRelay) stop(t *testing.T) {
	t.Helper()
	s.cancel()
	select {
	case <-s.done:
	case <-time.After(15 * time.Second):
		t.Fatalf("serveRelay did not return within 15s of its context's end:\n%s", s.logs.String())
	}
	if s.err != nil {
		t.Errorf("serveRelay: %v", s.err)
	}
	if n := s.stub.closes.Load(); n != 1 {
		t.Errorf("the relay was closed %d times, want 1", n)
	}
}

// checkAdmin checks /readyz, /healthz, /statusz and /metrics at base,
// before and after the relay is ready.
func checkAdmin(t *testing.T, s *servedRelay, base string) {
	t.Helper()
	code, body, hdr := get(t, base+"/readyz")
	if code != http.StatusServiceUnavailable || body != "not ready: relay: no data from upstream yet\n" || hdr.Get("Cache-Control") != "no-store" {
		t.Errorf("/readyz before: %d %q %q", code, body, hdr.Get("Cache-Control"))
	}
	code, body, _ = get(t, base+"/statusz")
	var st relayStatus
	if code != http.StatusOK || json.Unmarshal([]byte(body), &st) != nil {
		t.Fatalf("/statusz: %d %s", code, body)
	}
	want := relayStatus{Ready: false, Reason: "relay: no data from upstream yet", Upstream: "http://origin:8080", Namespaces: []namespaceStatus{}, Build: version.Read()}
	if !reflect.DeepEqual(st, want) {
		t.Errorf("/statusz before:\n%+v\nwant\n%+v", st, want)
	}

	s.stub.set(nil,
		relay.NamespaceStatus{Namespace: "payments.prod", StoreID: "s1", Revision: 7, Cursor: 9, Age: 12500 * time.Millisecond, Unconfirmed: true, Streams: 3, LastError: "upstream: connection refused"},
		relay.NamespaceStatus{Namespace: "search.prod", StoreID: "s1", Revision: 2, Cursor: 9, Streams: 1},
	)
	if code, body, _ := get(t, base+"/readyz"); code != http.StatusOK || body != "ready\n" {
		t.Errorf("/readyz after: %d %q", code, body)
	}
	if code, body, _ := get(t, base+"/healthz"); code != http.StatusOK || body != "ok\n" {
		t.Errorf("/healthz: %d %q", code, body)
	}
	_, body, _ = get(t, base+"/statusz")
	st = relayStatus{}
	if err := json.Unmarshal([]byte(body), &st); err != nil {
		t.Fatal(err)
	}
	want = relayStatus{Ready: true, Upstream: "http://origin:8080", Namespaces: []namespaceStatus{
		{Namespace: "payments.prod", StoreID: "s1", Revision: 7, Cursor: 9, AgeSeconds: 12.5, Unconfirmed: true, Streams: 3, LastError: "upstream: connection refused"},
		{Namespace: "search.prod", StoreID: "s1", Revision: 2, Cursor: 9, Streams: 1},
	}, Build: version.Read()}
	if !reflect.DeepEqual(st, want) {
		t.Errorf("/statusz after:\n%+v\nwant\n%+v", st, want)
	}
	if !strings.Contains(body, `"ns": "payments.prod"`) || !strings.Contains(body, `"age_seconds": 12.5`) {
		t.Errorf("/statusz's JSON names:\n%s", body)
	}

	code, body, _ = get(t, base+"/metrics")
	if code != http.StatusOK {
		t.Fatalf("/metrics: %d", code)
	}
	families := parseMetrics(t, body)
	if _, ok := metricValue(families, "target_info", map[string]string{"service_name": relayService, "service_version": config.Version}); !ok {
		t.Errorf("/metrics has no target_info{service_name=%q,service_version=%q}", relayService, config.Version)
	}
	// The relay's own series come from package relay (a stub here has
	// none): TestMetricsOfRealProcesses scrapes a real relay.
}

// openWatch opens the stub's watch stream at base and returns its
// reader once the first event has arrived.
func openWatch(t *testing.T, base string) (*bufio.Reader, func()) {
	t.Helper()
	tr := &http.Transport{}
	resp, err := (&http.Client{Transport: tr}).Get(base + "/sdk/watch?ns=payments.prod")
	if err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(resp.Body)
	if line, err := br.ReadString('\n'); err != nil || line != "event: progress\n" {
		t.Fatalf("the watch: %q %v", line, err)
	}
	return br, func() {
		resp.Body.Close()
		tr.CloseIdleConnections()
	}
}

// waitEnded fails t unless the stream watch ends within 5s.
func waitEnded(t *testing.T, watch *bufio.Reader) {
	t.Helper()
	ended := make(chan struct{})
	go func() {
		defer close(ended)
		_, _ = io.Copy(io.Discard, watch) // until the stream ends, or openWatch's close
	}()
	select {
	case <-ended:
	case <-time.After(5 * time.Second):
		t.Error("the watch stream is still open 5s after the relay stopped")
	}
}

// TestServeRelaySameListener: without -admin-addr the admin endpoints are
// in front of the relay's data plane on -addr, which speaks HTTP/1.1 and
// h2c; the end of the context closes the relay, which ends its streams,
// and serveRelay returns nil.
func TestServeRelaySameListener(t *testing.T) {
	s := serveStub(t, "")
	if s.adminURL != s.data {
		t.Fatalf("admin_url %q, url %q: want the same", s.adminURL, s.data)
	}
	checkAdmin(t, s, s.data)
	if code, body, _ := get(t, s.data+"/sdk/snapshot?ns=payments.prod"); code != http.StatusOK || body != `{"stub":true}` {
		t.Errorf("the data plane: %d %q", code, body)
	}

	var protos http.Protocols
	protos.SetUnencryptedHTTP2(true)
	h2c := &http.Transport{Protocols: &protos}
	resp, err := (&http.Client{Transport: h2c, Timeout: 10 * time.Second}).Get(s.data + "/sdk/snapshot?ns=payments.prod")
	if err != nil {
		t.Fatalf("over h2c: %v", err)
	}
	resp.Body.Close()
	h2c.CloseIdleConnections()
	if resp.ProtoMajor != 2 || resp.StatusCode != http.StatusOK {
		t.Errorf("over h2c: %s %s", resp.Proto, resp.Status)
	}

	watch, closeWatch := openWatch(t, s.data)
	defer closeWatch()
	start := time.Now()
	s.stop(t)
	waitEnded(t, watch)
	if d := time.Since(start); d >= shutdownTimeout {
		t.Errorf("stopping took %v: the open stream held the shutdown to its timeout", d)
	}
}

// TestServeRelayAdminAddr: with -admin-addr the data plane is alone on
// -addr, and the admin endpoints are on their own listener only.
func TestServeRelayAdminAddr(t *testing.T) {
	s := serveStub(t, "127.0.0.1:0")
	if s.adminURL == s.data || s.adminURL == "" {
		t.Fatalf("admin_url %q, url %q: want two listeners", s.adminURL, s.data)
	}
	checkAdmin(t, s, s.adminURL)
	if code, body, _ := get(t, s.data+"/sdk/snapshot?ns=payments.prod"); code != http.StatusOK || body != `{"stub":true}` {
		t.Errorf("the data plane: %d %q", code, body)
	}
	if code, _, _ := get(t, s.data+"/metrics"); code != http.StatusNotFound {
		t.Errorf("/metrics on the data listener: %d, want 404", code)
	}
	watch, closeWatch := openWatch(t, s.data)
	defer closeWatch()
	s.stop(t)
	waitEnded(t, watch)
}

// TestAdminScopeOnDataListener: with tokens and no -admin-addr, /statusz
// and /metrics need a token with the admin scope (control "*"); the
// probes stay open. On -admin-addr they are open as before.
func TestAdminScopeOnDataListener(t *testing.T) {
	toks, err := access.New(
		access.Token{Name: "app", Secret: "app-secret-0123456789", Data: []string{"*"}},
		access.Token{Name: "ops", Secret: "ops-secret-0123456789", Control: []string{"*"}},
	)
	if err != nil {
		t.Fatal(err)
	}
	s := serveStubTokens(t, "", toks)
	do := func(path, secret string) int {
		req, _ := http.NewRequest(http.MethodGet, s.data+path, nil)
		if secret != "" {
			req.Header.Set("Authorization", "Bearer "+secret)
		}
		tr := &http.Transport{}
		defer tr.CloseIdleConnections()
		resp, err := (&http.Client{Transport: tr, Timeout: 10 * time.Second}).Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	for _, tc := range []struct {
		path, secret string
		want         int
	}{
		{"/statusz", "", http.StatusUnauthorized},
		{"/metrics", "", http.StatusUnauthorized},
		{"/statusz", "wrong-secret-0123456789", http.StatusUnauthorized},
		{"/statusz", "app-secret-0123456789", http.StatusForbidden},
		{"/metrics", "app-secret-0123456789", http.StatusForbidden},
		{"/statusz", "ops-secret-0123456789", http.StatusOK},
		{"/metrics", "ops-secret-0123456789", http.StatusOK},
		{"/healthz", "", http.StatusOK},
		{"/readyz", "", http.StatusServiceUnavailable}, // open: the stub is not ready
	} {
		if got := do(tc.path, tc.secret); got != tc.want {
			t.Errorf("%s with %q: %d, want %d", tc.path, tc.secret, got, tc.want)
		}
	}
	s.stop(t)

	s = serveStubTokens(t, "127.0.0.1:0", toks)
	if code, _, _ := get(t, s.adminURL+"/statusz"); code != http.StatusOK {
		t.Errorf("/statusz on -admin-addr: %d, want 200", code)
	}
	s.stop(t)
}
