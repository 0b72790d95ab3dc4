package sdksuite

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/holdfast-dev/holdfast/config"
	"github.com/holdfast-dev/holdfast/transport"
)

// Server is a server under test, with the faults the suite injects. The
// reference server (internal/fakeserver) has them all; a harness around
// another server provides them in front of it.
type Server interface {
	// URL is the data plane's base URL; it stays the same across Stop,
	// Restart and ResetStore.
	URL() string
	// Publish commits a change, whether or not the data plane is up.
	Publish(ns string, puts map[string]any, deletes ...string) (int64, error)
	// Compact compacts the store's history up to rev (0: its head).
	Compact(rev int64) (int64, error)
	// Stop takes the data plane down (connections refused); Restart brings
	// it up again on the same address with the same store.
	Stop() error
	Restart() error
	// ResetStore replaces the store by an empty one with a new id and
	// returns the id.
	ResetStore() string
	// DropStreams ends every open watch stream and held long-poll.
	DropStreams()
	// SetBlackhole(true) makes the data plane accept requests and send
	// nothing until SetBlackhole(false).
	SetBlackhole(on bool)
	// FailNext answers the next n data-plane requests with status and a
	// Retry-After of retryAfter.
	FailNext(n, status int, retryAfter time.Duration)
	// Stats counts data-plane requests since the server started.
	Stats() Stats
	// OpenStreams is the number of watch streams open now.
	OpenStreams() int
}

// Stats counts data-plane requests by kind.
type Stats struct {
	Snapshots   int64 // GET /sdk/snapshot
	Events      int64 // GET /sdk/events (long-polls)
	Watches     int64 // GET /sdk/watch (SSE streams)
	Streams     int64 // GET /sdk/stream (multi-namespace SSE streams)
	StreamPolls int64 // GET /sdk/stream/events (multi-namespace long-polls)
}

// Options configure a server for one case.
type Options struct {
	// BearerToken, when set, is the only token the data plane accepts.
	BearerToken string
}

// Heartbeat is the heartbeat a StartFunc gives its server: the cases'
// timings (an idle timeout of three heartbeats) depend on it.
const Heartbeat = 50 * time.Millisecond

// StartFunc starts a server for one case, with Heartbeat, and arranges
// for it to be closed when the case ends.
type StartFunc func(t testing.TB, o Options) Server

// Run runs every case of the suite against servers that start makes.
func Run(t *testing.T, start StartFunc) {
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) { c.run(t, start) })
	}
}

// Timings: a client that declares a stream dead after three heartbeats
// (testIdle) where a case is about that; elsewhere a generous idle
// timeout, so that a machine loaded by -race does not turn slow replies
// into reconnects.
const (
	testIdle    = 3 * Heartbeat
	relaxedIdle = 5 * time.Second
	waitLimit   = 20 * time.Second
)

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

func publish(t testing.TB, srv Server, ns string, puts map[string]any, deletes ...string) int64 {
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

// testLogger logs through t.Log, so a failing case shows what the client did.
func testLogger(t testing.TB) *slog.Logger {
	return slog.New(slog.NewTextHandler(tWriter{t}, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

type tWriter struct{ t testing.TB }

func (w tWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimSpace(string(p)))
	return len(p), nil
}
