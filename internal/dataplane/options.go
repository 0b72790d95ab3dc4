package dataplane

import (
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/holdfast-dev/holdfast/access"
	"github.com/holdfast-dev/holdfast/internal/authlimit"
	"github.com/holdfast-dev/holdfast/transport"
)

// Defaults of the options.
const (
	DefaultHeartbeat     = 5 * time.Second
	DefaultWatcherBuffer = 1024
	DefaultMaxWait       = 60 * time.Second
)

type options struct {
	heartbeat     time.Duration
	watcherBuffer int
	maxWait       time.Duration
	token         string
	tokens        *access.Tokens // WithTokens; nil: open
	logger        *slog.Logger
	without       map[string]bool // capabilities switched off
	ackSink       func([]transport.Ack, bool)
	observe       func([]transport.Ack)           // WithAckObserver
	expand        func(ns string, rev int64) bool // WithAckObserver
	maxSnapshots  int
	retryWindow   time.Duration
	faults        Faults
	routes        []Route
	idleTimeout   time.Duration // WithIdleTimeout; 0: listen's default
	authLimit     *authlimit.Limiter
	authLimitSet  bool // WithAuthFailureLimit given (nil: none)
}

// Option configures a Server.
type Option interface{ apply(*options) }

type optionFunc func(*options)

func (f optionFunc) apply(o *options) { f(o) }

// WithHeartbeat sets how often a watch stream sends a progress event
// (default DefaultHeartbeat).
func WithHeartbeat(d time.Duration) Option {
	return optionFunc(func(o *options) { o.heartbeat = d })
}

// WithWatcherBuffer sets how many change sets may wait for one slow watcher
// before it is disconnected (default DefaultWatcherBuffer).
func WithWatcherBuffer(n int) Option { return optionFunc(func(o *options) { o.watcherBuffer = n }) }

// WithMaxWait caps the wait of a long-poll (default DefaultMaxWait).
func WithMaxWait(d time.Duration) Option { return optionFunc(func(o *options) { o.maxWait = d }) }

// WithBearerToken makes the data plane require "Authorization: Bearer
// token"; a request without it gets 401. It excludes WithTokens.
func WithBearerToken(token string) Option { return optionFunc(func(o *options) { o.token = token }) }

// WithoutCapability makes the server not offer capability name, as a
// server that predates it would: transport.CapabilityStream (no
// /sdk/stream, /sdk/stream/events: 404), transport.CapabilityAckBatch
// (a batched ack body is refused, 400) or transport.CapabilityH2C
// (HTTP/1.1 only). It is not listed in Holdfast-Capabilities. New
// refuses an unknown name.
func WithoutCapability(name string) Option {
	return optionFunc(func(o *options) {
		if o.without == nil {
			o.without = make(map[string]bool)
		}
		o.without[name] = true
	})
}

// capabilities are those the server can offer, in the order it lists them.
var capabilities = []string{transport.CapabilityStream, transport.CapabilityAckBatch, transport.CapabilityAckStream, transport.CapabilityAckRelay, transport.CapabilityAckCohort, transport.CapabilityH2C, transport.CapabilityRollout, transport.CapabilityPresence, transport.CapabilityReportsKept}

// KnownCapability reports whether name is a capability the server can
// offer (and WithoutCapability switch off).
func KnownCapability(name string) bool { return slices.Contains(capabilities, name) }

// offers reports whether the server offers capability name.
func (o *options) offers(name string) bool {
	if (name == transport.CapabilityAckStream || name == transport.CapabilityAckRelay) && o.without[transport.CapabilityAckBatch] {
		return false // its lines are batches
	}
	if name == transport.CapabilityAckCohort && !o.offers(transport.CapabilityAckRelay) {
		return false // a relay that cannot forward its clients' acks one by one could not report what a cohort does not carry
	}
	return !o.without[name]
}

// WithAckSink hands every ack received to sink (a relay forwards them
// upstream) instead of recording them; held says they came in a cohort
// report, which a relay downstream held already. sink must not block,
// nor keep the slice once it returns: the next batch is decoded into it.
func WithAckSink(sink func(acks []transport.Ack, held bool)) Option {
	return optionFunc(func(o *options) { o.ackSink = sink })
}

// WithAckObserver, at an origin (no WithAckSink), hands every batch of
// acks recorded (see Server.Clients) to observe, a rollout controller;
// expand says which outcomes of a cohort report it needs as acks of
// each client, by namespace and revision. Neither may block.
func WithAckObserver(observe func(acks []transport.Ack), expand func(ns string, rev int64) bool) Option {
	return optionFunc(func(o *options) { o.observe, o.expand = observe, expand })
}

// WithMaxSnapshotsInFlight bounds the snapshot bodies being written at
// once, counting those that make progress, fairly across peers
// (admission); past it a snapshot request gets 503 with a Retry-After
// spread over 1s..window. Zero (the default) sets no bound. 304 replies are
// never refused: they cost nothing.
func WithMaxSnapshotsInFlight(n int, window time.Duration) Option {
	return optionFunc(func(o *options) { o.maxSnapshots, o.retryWindow = n, window })
}

// WithAuthFailureLimit sets what slows down a peer that keeps sending
// wrong tokens (with WithTokens): past its failures, its requests get 429
// with Retry-After before their token is looked at, save a token
// accepted from that peer lately (authlimit.Limiter.Authenticate). The
// default is one of authlimit's defaults of the server's own; pass the
// same Limiter to every listener of a server to count a peer's failures
// across them, or nil for none.
func WithAuthFailureLimit(l *authlimit.Limiter) Option {
	return optionFunc(func(o *options) { o.authLimit, o.authLimitSet = l, true })
}

// WithLogger sets the logger (default: discard).
func WithLogger(l *slog.Logger) Option { return optionFunc(func(o *options) { o.logger = l }) }

// WithIdleTimeout sets how long a connection Listen serves may stay open
// with nothing in flight (an HTTP/1.1 one between requests, an HTTP/2 one
// with no open stream) before it is closed (default
// listen.DefaultIdleTimeout).
func WithIdleTimeout(d time.Duration) Option {
	return optionFunc(func(o *options) { o.idleTimeout = d })
}

// WithFaults gives the data plane the faults of a test server (see
// Faults). Without it there are none.
func WithFaults(f Faults) Option { return optionFunc(func(o *options) { o.faults = f }) }

// Route is a handler the server mounts beside the data plane: the
// reference server's control API. With WithTokens the request's identity
// is on its context (access.FromContext); the route checks its scope.
type Route struct {
	Method, Path string
	Handler      http.HandlerFunc
}

// WithRoutes mounts routes beside the data plane (paths outside /sdk/).
func WithRoutes(routes ...Route) Option {
	return optionFunc(func(o *options) { o.routes = append(o.routes, routes...) })
}

func newOptions(opts []Option) (options, error) {
	o := options{
		heartbeat:     DefaultHeartbeat,
		watcherBuffer: DefaultWatcherBuffer,
		maxWait:       DefaultMaxWait,
	}
	for _, opt := range opts {
		if opt != nil {
			opt.apply(&o)
		}
	}
	switch {
	case o.heartbeat <= 0:
		return o, errors.New("dataplane: heartbeat must be positive")
	case o.watcherBuffer < 1:
		return o, errors.New("dataplane: watcher buffer must be at least 1")
	case o.maxWait < 0:
		return o, errors.New("dataplane: max wait must not be negative")
	case o.idleTimeout < 0:
		return o, errors.New("dataplane: idle timeout must not be negative")
	case o.tokens != nil && o.token != "":
		return o, errors.New("dataplane: WithTokens and WithBearerToken exclude each other")
	}
	for name := range o.without {
		if !KnownCapability(name) {
			return o, fmt.Errorf("dataplane: WithoutCapability(%q): no such capability", name)
		}
	}
	for _, rt := range o.routes {
		if rt.Handler == nil || strings.HasPrefix(rt.Path, "/sdk/") {
			return o, fmt.Errorf("dataplane: route %s %s: a handler outside /sdk/ is needed", rt.Method, rt.Path)
		}
	}
	if o.logger == nil {
		o.logger = slog.New(slog.DiscardHandler)
	}
	if o.faults == nil {
		o.faults = noFaults{}
	}
	if o.tokens != nil && !o.authLimitSet {
		o.authLimit = authlimit.New(authlimit.Config{})
	}
	return o, nil
}
