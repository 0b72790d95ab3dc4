package fakeserver

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"time"

	"github.com/holdfast-dev/holdfast/access"
	"github.com/holdfast-dev/holdfast/internal/dataplane"
	"github.com/holdfast-dev/holdfast/transport"
)

// Defaults of the options.
const (
	DefaultHeartbeat       = dataplane.DefaultHeartbeat
	DefaultWatcherBuffer   = dataplane.DefaultWatcherBuffer
	DefaultMaxPublishBytes = 4 << 20
	DefaultMaxWait         = dataplane.DefaultMaxWait
)

type options struct {
	addr            string
	heartbeat       time.Duration
	retention       int64
	watcherBuffer   int
	maxPublishBytes int64
	maxWait         time.Duration
	token           string
	tokens          *access.Tokens // WithTokens; nil: open
	logger          *slog.Logger
	without         map[string]bool // capabilities switched off
	listener        net.Listener    // WithListener
	ackSink         func([]transport.Ack, bool)
	maxSnapshots    int
	retryWindow     time.Duration
}

// Option configures a Server.
type Option interface{ apply(*options) }

type optionFunc func(*options)

func (f optionFunc) apply(o *options) { f(o) }

// WithAddr sets the listen address (default "127.0.0.1:0": a free loopback port).
func WithAddr(addr string) Option { return optionFunc(func(o *options) { o.addr = addr }) }

// WithHeartbeat sets how often a watch stream sends a progress event
// (default DefaultHeartbeat).
func WithHeartbeat(d time.Duration) Option {
	return optionFunc(func(o *options) { o.heartbeat = d })
}

// WithRetention keeps only the last n revisions of history: every publish
// compacts the store to head-n. Zero (the default) keeps all history.
func WithRetention(n int64) Option { return optionFunc(func(o *options) { o.retention = n }) }

// WithWatcherBuffer sets how many change sets may wait for one slow watcher
// before it is disconnected (default DefaultWatcherBuffer).
func WithWatcherBuffer(n int) Option { return optionFunc(func(o *options) { o.watcherBuffer = n }) }

// WithMaxPublishBytes limits the body of a publish or schema request; a
// larger one gets 413 (default DefaultMaxPublishBytes).
func WithMaxPublishBytes(n int64) Option {
	return optionFunc(func(o *options) { o.maxPublishBytes = n })
}

// WithMaxWait caps the wait of a long-poll (default DefaultMaxWait).
func WithMaxWait(d time.Duration) Option { return optionFunc(func(o *options) { o.maxWait = d }) }

// WithBearerToken makes the data plane (/sdk/...) require
// "Authorization: Bearer token"; a request without it gets 401. The control
// API stays open: it is for tests and local tools.
func WithBearerToken(token string) Option { return optionFunc(func(o *options) { o.token = token }) }

// WithoutCapability makes the server not offer capability name, as a
// server that predates it would: transport.CapabilityStream (no
// /sdk/stream, /sdk/stream/events: 404), transport.CapabilityAckBatch
// (a batched ack body is refused, 400) or transport.CapabilityH2C
// (HTTP/1.1 only). It is not listed in Holdfast-Capabilities. For tests
// of clients' fallbacks; Start refuses an unknown name.
func WithoutCapability(name string) Option {
	return optionFunc(func(o *options) {
		if o.without == nil {
			o.without = make(map[string]bool)
		}
		o.without[name] = true
	})
}

// WithListener serves on l (its first run; Restart listens on l's
// address anew) rather than on WithAddr's address.
func WithListener(l net.Listener) Option { return optionFunc(func(o *options) { o.listener = l }) }

// WithAckSink hands every ack received to sink (a relay forwards them
// upstream) instead of recording them; held says they came in a cohort
// report, which a relay downstream held already. sink must not block,
// nor keep the slice once it returns: the next batch is decoded into it.
func WithAckSink(sink func(acks []transport.Ack, held bool)) Option {
	return optionFunc(func(o *options) { o.ackSink = sink })
}

// WithMaxSnapshotsInFlight bounds the snapshot bodies being written at
// once; past it a snapshot request gets 503 with a Retry-After spread
// over 1s..window. Zero (the default) sets no bound. 304 replies are
// never refused: they cost nothing.
func WithMaxSnapshotsInFlight(n int, window time.Duration) Option {
	return optionFunc(func(o *options) { o.maxSnapshots, o.retryWindow = n, window })
}

// WithLogger sets the logger (default: discard).
func WithLogger(l *slog.Logger) Option { return optionFunc(func(o *options) { o.logger = l }) }

func newOptions(opts []Option) (options, error) {
	o := options{
		addr:            "127.0.0.1:0",
		heartbeat:       DefaultHeartbeat,
		watcherBuffer:   DefaultWatcherBuffer,
		maxPublishBytes: DefaultMaxPublishBytes,
		maxWait:         DefaultMaxWait,
	}
	for _, opt := range opts {
		if opt != nil {
			opt.apply(&o)
		}
	}
	switch {
	case o.heartbeat <= 0:
		return o, errors.New("fakeserver: heartbeat must be positive")
	case o.retention < 0:
		return o, errors.New("fakeserver: retention must not be negative")
	case o.watcherBuffer < 1:
		return o, errors.New("fakeserver: watcher buffer must be at least 1")
	case o.maxPublishBytes < 1:
		return o, errors.New("fakeserver: max publish bytes must be positive")
	case o.maxWait < 0:
		return o, errors.New("fakeserver: max wait must not be negative")
	case o.tokens != nil && o.token != "":
		return o, errors.New("fakeserver: WithTokens and WithBearerToken exclude each other")
	}
	for name := range o.without {
		if !dataplane.KnownCapability(name) {
			return o, fmt.Errorf("fakeserver: WithoutCapability(%q): no such capability", name)
		}
	}
	if o.logger == nil {
		o.logger = slog.New(slog.DiscardHandler)
	}
	return o, nil
}
