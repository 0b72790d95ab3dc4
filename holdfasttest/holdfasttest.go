// Package holdfasttest runs holdfast's reference server in-process, for the
// tests of applications that use holdfast. It is the same server the SDK's
// own tests run against, a real config plane rather than a mock: revisions,
// history, compaction, live SSE streams, schemas, acks, and faults to
// inject (refused requests, latency, dropped streams, a black hole, a store
// reset, a crash and restart on the same address).
//
//	srv := holdfasttest.NewServer(t, holdfasttest.WithHeartbeat(100*time.Millisecond))
//	srv.Publish("payments.prod", map[string]any{"retry-timeout-ms": 50})
//	c, _ := config.New(config.WithEndpoint(srv.URL()))
//	...
//	srv.Stop() // the config plane goes down: the client serves stale
//
// The server listens on 127.0.0.1 on a free port. See Server for the whole
// Go API; the same control API is served over HTTP under /control/ (see
// docs/PROTOCOL.md).
package holdfasttest

import (
	"log/slog"
	"testing"
	"time"

	"github.com/holdfast-dev/holdfast/internal/fakeserver"
)

// Server is a running reference server.
type Server = fakeserver.Server

// Option configures a Server.
type Option = fakeserver.Option

// Stats counts the data-plane requests a Server has served.
type Stats = fakeserver.Stats

// ClientState is what a client reported for a namespace (acks and nacks).
type ClientState = fakeserver.ClientState

// SchemaError is the error of a publish that fails its namespace's schema.
type SchemaError = fakeserver.SchemaError

// The defaults of the Server's options.
const (
	DefaultHeartbeat       = fakeserver.DefaultHeartbeat
	DefaultWatcherBuffer   = fakeserver.DefaultWatcherBuffer
	DefaultMaxPublishBytes = fakeserver.DefaultMaxPublishBytes
	DefaultMaxWait         = fakeserver.DefaultMaxWait
)

// Errors of the Server's Go API.
var (
	ErrInvalid          = fakeserver.ErrInvalid
	ErrUnknownNamespace = fakeserver.ErrUnknownNamespace
	ErrClosed           = fakeserver.ErrClosed
)

// Start starts a server. Close it when done.
func Start(opts ...Option) (*Server, error) { return fakeserver.Start(opts...) }

// NewServer starts a server for tb and closes it when tb ends; it fails tb
// if the server cannot start.
func NewServer(tb testing.TB, opts ...Option) *Server {
	tb.Helper()
	srv, err := fakeserver.Start(opts...)
	if err != nil {
		tb.Fatalf("holdfasttest: %v", err)
	}
	tb.Cleanup(func() { _ = srv.Close() })
	return srv
}

// WithAddr sets the listen address (default "127.0.0.1:0").
func WithAddr(addr string) Option { return fakeserver.WithAddr(addr) }

// WithHeartbeat sets how often a quiet stream gets a progress event
// (default 5s). Tests usually want it short.
func WithHeartbeat(d time.Duration) Option { return fakeserver.WithHeartbeat(d) }

// WithRetention keeps the last n revisions of history (0: all).
func WithRetention(n int64) Option { return fakeserver.WithRetention(n) }

// WithWatcherBuffer bounds the change sets queued for one watcher.
func WithWatcherBuffer(n int) Option { return fakeserver.WithWatcherBuffer(n) }

// WithMaxPublishBytes bounds a publish body.
func WithMaxPublishBytes(n int64) Option { return fakeserver.WithMaxPublishBytes(n) }

// WithMaxWait bounds how long a long-poll is held.
func WithMaxWait(d time.Duration) Option { return fakeserver.WithMaxWait(d) }

// WithBearerToken makes the data plane require "Authorization: Bearer token".
func WithBearerToken(token string) Option { return fakeserver.WithBearerToken(token) }

// WithLogger sets the server's logger (default: discard).
func WithLogger(l *slog.Logger) Option { return fakeserver.WithLogger(l) }
