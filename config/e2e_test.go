package config_test

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/holdfast-dev/holdfast/config"
	"github.com/holdfast-dev/holdfast/internal/fakeserver"
	"github.com/holdfast-dev/holdfast/internal/sdksuite"
	"github.com/holdfast-dev/holdfast/transport"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// Timings for tests: a fast heartbeat, and a client that declares a stream
// dead after three of them (testIdle) where a test is about that; elsewhere
// a generous idle timeout, so a machine loaded by -race and busy readers
// does not turn slow replies into reconnects.
const (
	testHeartbeat = 50 * time.Millisecond
	testIdle      = 3 * testHeartbeat
	relaxedIdle   = 5 * time.Second
	waitLimit     = 20 * time.Second
)

func startServer(t testing.TB, opts ...fakeserver.Option) *fakeserver.Server {
	t.Helper()
	srv, err := fakeserver.Start(append([]fakeserver.Option{fakeserver.WithHeartbeat(testHeartbeat)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Close() })
	return srv
}

func newClient(t testing.TB, url string, opts ...config.Option) *config.Client {
	t.Helper()
	base := []config.Option{
		config.WithEndpoint(url),
		config.WithStreamIdleTimeout(relaxedIdle),
		config.WithReconnectBackoff(5*time.Millisecond, 50*time.Millisecond),
		config.WithWatchMode(transport.WatchSSE),
	}
	c, err := config.New(append(base, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// testLogger logs through t.Log, so a failing test shows what the client did.
func testLogger(t testing.TB) *slog.Logger {
	return slog.New(slog.NewTextHandler(tWriter{t}, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

type tWriter struct{ t testing.TB }

func (w tWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimSpace(string(p)))
	return len(p), nil
}

func publish(t testing.TB, srv *fakeserver.Server, ns string, puts map[string]any, deletes ...string) int64 {
	t.Helper()
	rev, err := srv.Publish(ns, puts, deletes...)
	if err != nil {
		t.Fatal(err)
	}
	return rev
}

func open(t testing.TB, c *config.Client, name string, opts ...config.NamespaceOption) *config.Namespace {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
	defer cancel()
	ns, err := c.Namespace(ctx, name, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return ns
}

func TestInvalidNamespaceName(t *testing.T) {
	srv := startServer(t)
	c := newClient(t, srv.URL())
	for _, name := range []string{"", ".", "..", "../x", "a/b", "/abs", "UPPER", "-lead", string(make([]byte, 200))} {
		_, err := c.Namespace(context.Background(), name)
		if !errors.Is(err, transport.ErrInvalidNamespace) {
			t.Errorf("Namespace(%q) = %v; want ErrInvalidNamespace", name, err)
		}
	}
}

func TestNewValidatesOptions(t *testing.T) {
	tests := []struct {
		name string
		opts []config.Option
	}{
		{"no endpoint", nil},
		{"bad url", []config.Option{config.WithEndpoint("ftp://x")}},
		{"nil logger", []config.Option{config.WithEndpoint("http://127.0.0.1:1"), config.WithLogger(nil)}},
		{"bad backoff", []config.Option{config.WithEndpoint("http://127.0.0.1:1"), config.WithReconnectBackoff(time.Second, time.Millisecond)}},
		{"bad idle", []config.Option{config.WithEndpoint("http://127.0.0.1:1"), config.WithStreamIdleTimeout(0)}},
		{"a client id the server refuses", []config.Option{config.WithEndpoint("http://127.0.0.1:1"), config.WithClientID("host\n1")}},
		{"a client id too long", []config.Option{config.WithEndpoint("http://127.0.0.1:1"), config.WithClientID(strings.Repeat("h", 257))}},
	}
	for _, tt := range tests {
		if c, err := config.New(tt.opts...); err == nil {
			_ = c.Close()
			t.Errorf("%s: New succeeded", tt.name)
		}
	}
}

// TestSDKAgainstTheReferenceServer runs the SDK's end-to-end suite
// against the reference server; the server module runs it against
// holdfast server.
func TestSDKAgainstTheReferenceServer(t *testing.T) {
	sdksuite.Run(t, func(t testing.TB, o sdksuite.Options) sdksuite.Server {
		var opts []fakeserver.Option
		if o.BearerToken != "" {
			opts = append(opts, fakeserver.WithBearerToken(o.BearerToken))
		}
		return referenceServer{startServer(t, append(opts, fakeserver.WithHeartbeat(sdksuite.Heartbeat))...)}
	})
}

// referenceServer is the reference server as the suite sees it.
type referenceServer struct{ *fakeserver.Server }

func (s referenceServer) Stats() sdksuite.Stats {
	st := s.Server.Stats()
	return sdksuite.Stats{Snapshots: st.Snapshots, Events: st.Events, Watches: st.Watches, Streams: st.Streams, StreamPolls: st.StreamPolls}
}
