package proxytest

import (
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/holdfast-dev/holdfast/config"
	"github.com/holdfast-dev/holdfast/internal/fakeserver"
	"github.com/holdfast-dev/holdfast/internal/sdksuite"
	"github.com/holdfast-dev/holdfast/internal/testutil"
)

// answerClock records when the server behind a proxy first answered after
// a mark: the start of a convergence's clock.
type answerClock struct {
	mu     sync.Mutex
	marked bool
	first  time.Time
	failed int // requests the proxy could not forward (502s)
}

func (c *answerClock) proxyFailed() {
	c.mu.Lock()
	c.failed++
	c.mu.Unlock()
}

func (c *answerClock) failures() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.failed
}

func (c *answerClock) mark() {
	c.mu.Lock()
	c.marked, c.first = true, time.Time{}
	c.mu.Unlock()
}

func (c *answerClock) answered() {
	c.mu.Lock()
	if c.marked && c.first.IsZero() {
		c.first = time.Now()
	}
	c.mu.Unlock()
}

func (c *answerClock) firstAnswer() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.first
}

// startGoProxy starts an HTTP/1.1-only reverse proxy (httputil.ReverseProxy
// on httptest.NewServer) in front of target; clock (if not nil) hears of
// every reply the target sends through it.
func startGoProxy(t testing.TB, target string, clock *answerClock) *httptest.Server {
	t.Helper()
	u, err := url.Parse(target)
	if err != nil {
		t.Fatal(err)
	}
	rp := httputil.NewSingleHostReverseProxy(u)
	rp.FlushInterval = -1 // SSE: flush every write
	rp.Transport = &http.Transport{}
	rp.ModifyResponse = func(*http.Response) error {
		if clock != nil {
			clock.answered()
		}
		return nil
	}
	rp.ErrorHandler = func(w http.ResponseWriter, r *http.Request, err error) {
		if clock != nil {
			clock.proxyFailed()
		}
		w.WriteHeader(http.StatusBadGateway)
	}
	p := httptest.NewServer(rp)
	t.Cleanup(func() {
		p.Close()
		rp.Transport.(*http.Transport).CloseIdleConnections()
	})
	return p
}

// A client with the defaults, behind an HTTP/1.1-only reverse proxy, whose
// server restarts with a new store after an outage long enough for the
// client's backoff to grow: it converges within 3 s of the restarted
// server's first answer, although the server lists h2c (the capability is
// the origin's, not the hop's), and no request fails for want of h2c.
func TestHTTP1ProxyServerRestartNewStore(t *testing.T) {
	srv := sdksuite.StartReference(t, fakeserver.WithHeartbeat(fakeserver.DefaultHeartbeat))
	if _, err := srv.Publish("app", map[string]any{"v": 1}); err != nil {
		t.Fatal(err)
	}
	clock := &answerClock{}
	p := startGoProxy(t, srv.URL(), clock)
	logs := &h2Errors{}
	c := sdksuite.NewDefaultClient(t, sdksuite.Endpoint(p.URL), config.WithLogger(slog.New(logs)))
	ns := sdksuite.Open(t, c, "app")

	if err := srv.Stop(); err != nil {
		t.Fatal(err)
	}
	// The outage: four reconnects refused, the backoff past 2 s.
	if !testutil.Wait(30*time.Second, func() bool { return clock.failures() >= 4 }) {
		t.Fatalf("the client did not retry 4 times in 30 s; %d", clock.failures())
	}
	store := srv.ResetStore()
	rev, err := srv.Publish("app", map[string]any{"v": 2})
	if err != nil {
		t.Fatal(err)
	}
	clock.mark()
	if err := srv.Restart(); err != nil {
		t.Fatal(err)
	}
	converged := func() bool { st := ns.Status(); return st.StoreID == store && st.Revision >= rev }
	if !testutil.Wait(30*time.Second, converged) {
		t.Fatalf("not converged after 30 s: %+v", ns.Status())
	}
	took := time.Since(clock.firstAnswer())
	if took > 3*time.Second {
		t.Errorf("converged %v after the restarted server's first answer; want <= 3s", took)
	}
	t.Logf("converged %v after the restarted server's first answer", took)
	if n := logs.count(); n > 0 {
		t.Errorf("%d requests failed over HTTP/2 to an HTTP/1.1-only proxy; want 0 (first: %s)", n, logs.firstErr())
	}
}

// slogOf logs through t.Log at Info and above, and counts HTTP/2's
// errors in h.
func slogOf(t testing.TB, h *h2Errors) *slog.Logger {
	h.next = slog.NewTextHandler(sdksuite.LogWriter(t), &slog.HandlerOptions{Level: slog.LevelInfo})
	return slog.New(h)
}

// h2Errors is a slog handler that counts the records whose error is
// HTTP/2's: requests the protocol choice made fail. It hands records on to
// next, if set.
type h2Errors struct {
	next  slog.Handler
	mu    sync.Mutex
	n     int
	first string
}

func (h *h2Errors) Enabled(context.Context, slog.Level) bool { return true }
func (h *h2Errors) WithAttrs([]slog.Attr) slog.Handler       { return h }
func (h *h2Errors) WithGroup(string) slog.Handler            { return h }
func (h *h2Errors) Handle(ctx context.Context, r slog.Record) error {
	if h.next != nil && h.next.Enabled(ctx, r.Level) {
		_ = h.next.Handle(ctx, r)
	}
	r.Attrs(func(a slog.Attr) bool {
		if v := a.Value.String(); strings.Contains(v, "http2:") {
			h.mu.Lock()
			if h.n == 0 {
				h.first = v
			}
			h.n++
			h.mu.Unlock()
			return false
		}
		return true
	})
	return nil
}

func (h *h2Errors) count() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.n
}

func (h *h2Errors) firstErr() string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.first
}
