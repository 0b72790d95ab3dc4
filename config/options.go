package config

import (
	"bytes"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"time"

	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/holdfast-dev/holdfast/internal/syncer"
	"github.com/holdfast-dev/holdfast/transport"
)

// Option configures a Client. Pass options to New. Client options start
// with With; namespace options (NamespaceOption) do not.
type Option interface{ apply(*options) }

type optionFunc func(*options)

func (f optionFunc) apply(o *options) { f(o) }

type options struct {
	// endpoints are the base URLs of WithEndpoint or WithEndpoints, in
	// order of preference; endpointsSet tells WithEndpoints() apart.
	endpoints     []string
	endpointsSet  bool
	failbackAfter time.Duration
	source        transport.Source
	clientID      string
	logger        *slog.Logger
	// httpOpts configure the HTTP source, in order, after config's own
	// defaults (see New); the source's defaults fill the rest.
	httpOpts []transport.HTTPOption
	// idleTimeout is the HTTP source's (WithStreamIdleTimeout sets both),
	// and bounds fetches and freshness for any source.
	idleTimeout      time.Duration
	backoffInitial   time.Duration
	backoffMax       time.Duration
	unauthorizedWait time.Duration
	callbackQueue    int
	cacheDir         string
	backstop         time.Duration
	rewriteGrace     time.Duration
	meterProvider    metric.MeterProvider
	tracerProvider   trace.TracerProvider
}

func defaultOptions() options {
	return options{
		logger:           slog.New(slog.DiscardHandler),
		idleTimeout:      transport.DefaultIdleTimeout,
		backoffInitial:   500 * time.Millisecond,
		backoffMax:       30 * time.Second,
		unauthorizedWait: time.Minute,
		callbackQueue:    1024,
		backstop:         10 * time.Minute,
		rewriteGrace:     syncer.DefaultRewriteGrace,
		failbackAfter:    transport.DefaultFailbackAfter,
	}
}

// WithEndpoint sets the base URL of the config plane's HTTP data plane, for
// example "https://config.example.com". It is WithEndpoints with one URL.
// One of WithEndpoint, WithEndpoints and WithSource is required.
func WithEndpoint(url string) Option {
	return WithEndpoints(url)
}

// WithEndpoints sets the base URLs of several servers or relays of the
// same config plane, in order of preference: they serve the same store
// (the same store id and revisions), so that the client can move between
// them with its cursor. The client talks to one at a time, the current
// one, starting with the first. When the current one cannot be reached or
// fails (a broken or idle connection, a 5xx, a 429 once its Retry-After
// has been waited), the client moves to the next, wrapping around, and
// resumes every namespace from its cursor, without fetching snapshots
// again. While another serves, the first is probed in the background, and
// the client returns to it once it has answered well for a while
// (WithFailbackAfter, default 30s), not on every blip. Status.Endpoint
// says which endpoint serves; each switch is logged at Info.
//
// Every URL must be http or https, with a host and no query; New fails
// on a malformed one, a repeated one, or none. The HTTP source's options
// (WithHTTPOptions and its wrappers) apply to each endpoint. Passing it
// again replaces the list; WithEndpoint is the one-URL case.
func WithEndpoints(urls ...string) Option {
	urls = append([]string(nil), urls...)
	return optionFunc(func(o *options) { o.endpoints, o.endpointsSet = urls, true })
}

// WithFailbackAfter sets how long the first of WithEndpoints' endpoints
// must answer its health probes, every one of them, before a client that
// moved to another returns to it (default 30s,
// transport.DefaultFailbackAfter). It is probed six times in that window,
// at most every 5s. Ignored with a single endpoint and with WithSource.
func WithFailbackAfter(d time.Duration) Option {
	return optionFunc(func(o *options) { o.failbackAfter = d })
}

// WithSource makes the client talk to the config plane through src instead
// of the HTTP source (for example the etcd source). The client does not
// close src. The HTTP source's options (WithHTTPOptions and its wrappers:
// WithHTTPClient, WithBearerToken, WithWatchMode, WithMaxEventBytes,
// WithMaxSnapshotBytes, WithMaxSnapshotKeys) are ignored with it;
// WithStreamIdleTimeout still bounds fetches and freshness.
func WithSource(src transport.Source) Option {
	return optionFunc(func(o *options) { o.source = src })
}

// WithClientID names this client in acks to the server, so operators can see
// what each instance applied. It also places the client in a staged
// rollout's stages (see the package doc): an id stable across restarts
// keeps a restarted instance on the same side of a stage. Default:
// hostname-pid-random, new at every start.
func WithClientID(id string) Option {
	return optionFunc(func(o *options) { o.clientID = id })
}

// WithLogger sets the logger. Default: discard.
func WithLogger(l *slog.Logger) Option {
	return optionFunc(func(o *options) { o.logger = l })
}

// WithHTTPOptions passes options to the HTTP source that WithEndpoint
// makes (transport.NewHTTPSource; with WithEndpoints, to the source of
// each endpoint), after config's own defaults (the
// client's logger, transport.WatchAuto), so that any of them can be
// overridden; what no option sets keeps the source's default
// (transport.DefaultMaxEventBytes, DefaultMaxSnapshotBytes,
// DefaultMaxSnapshotKeys, DefaultIdleTimeout, DefaultLongPollWait,
// DefaultUserAgent). Options passed later win. An invalid one fails New
// with the source's error. Ignored with WithSource.
//
// WithHTTPClient, WithBearerToken, WithWatchMode, WithMaxEventBytes,
// WithMaxSnapshotBytes and WithMaxSnapshotKeys are shorthands for it.
// transport.WithIdleTimeout here changes only the source's timeout: use
// WithStreamIdleTimeout, which also bounds the client's fetches.
func WithHTTPOptions(opts ...transport.HTTPOption) Option {
	return optionFunc(func(o *options) { o.httpOpts = append(o.httpOpts, opts...) })
}

// WithHTTPClient sets the HTTP client of the HTTP source
// (transport.WithHTTPClient). Its Transport, CheckRedirect and Jar serve
// every request. Its Timeout, if any, bounds each snapshot fetch and ack,
// but not watches: the source runs SSE streams and long-polls without it,
// guarded by the stream idle timeout instead, so a Timeout does not cut
// healthy streams. The default client has dial, TLS handshake and
// response-header timeouts and no overall Timeout; nil keeps it.
func WithHTTPClient(hc *http.Client) Option {
	if hc == nil {
		return optionFunc(func(*options) {}) // as before: nil is the default client
	}
	return WithHTTPOptions(transport.WithHTTPClient(hc))
}

// WithTLSConfig sets the TLS configuration of https endpoints: the CAs to
// trust (RootCAs; default the system's) and, for mutual TLS, a client
// certificate (transport.WithTLSConfig). It is cloned; nil keeps the
// default. It excludes WithHTTPClient.
func WithTLSConfig(c *tls.Config) Option {
	return WithHTTPOptions(transport.WithTLSConfig(c))
}

// WithBearerToken sends "Authorization: Bearer token" with every request
// to the endpoint's host, never to another host a redirect leads to
// (transport.WithBearerToken).
func WithBearerToken(token string) Option {
	return WithHTTPOptions(transport.WithBearerToken(token))
}

// WithWatchMode chooses how the HTTP source watches: transport.WatchSSE,
// transport.WatchLongPoll, or transport.WatchAuto (the client's default,
// unlike the bare source's SSE: SSE, falling back to long-poll when
// streams keep failing while plain requests succeed, as behind a proxy
// that buffers streams). It is transport.WithWatchMode.
func WithWatchMode(m transport.WatchMode) Option {
	return WithHTTPOptions(transport.WithWatchMode(m))
}

// WithStreamIdleTimeout sets how long a watch may go without a whole event
// (a change or a progress heartbeat; keepalive comments and partial events
// do not count) before the client drops it as dead and reconnects, and how
// long a namespace stays Fresh without a confirmation; it also bounds each
// fetch (twice it, plus 10s). It sets the HTTP source's
// transport.WithIdleTimeout. Without it, the HTTP source drops a stream
// after three of the heartbeats its server advertises (0.5s to 3m; 15s for
// a server that advertises none: see transport.HTTPSource.IdleTimeout),
// the namespace stays Fresh for the source's QuietLimit, and each fetch is
// bounded by 40s (twice transport.DefaultIdleTimeout, plus 10s).
func WithStreamIdleTimeout(d time.Duration) Option {
	return optionFunc(func(o *options) {
		o.idleTimeout = d
		o.httpOpts = append(o.httpOpts, transport.WithIdleTimeout(d))
	})
}

// WithMaxEventBytes bounds one change event (transport.WithMaxEventBytes;
// default transport.DefaultMaxEventBytes, 1 MiB).
func WithMaxEventBytes(n int) Option {
	return WithHTTPOptions(transport.WithMaxEventBytes(n))
}

// WithMaxSnapshotBytes bounds one snapshot, decompressed
// (transport.WithMaxSnapshotBytes; default
// transport.DefaultMaxSnapshotBytes, 64 MiB).
func WithMaxSnapshotBytes(n int64) Option {
	return WithHTTPOptions(transport.WithMaxSnapshotBytes(n))
}

// WithMaxSnapshotKeys bounds the keys of one snapshot, and so what
// decoding it can cost in memory (a snapshot the client accepts retains at
// most about 8x its size on the wire). A larger one is refused with
// transport.ErrTooLarge in Status, and the last good keeps serving. It is
// transport.WithMaxSnapshotKeys; default transport.DefaultMaxSnapshotKeys,
// 1,048,576.
func WithMaxSnapshotKeys(n int) Option {
	return WithHTTPOptions(transport.WithMaxSnapshotKeys(n))
}

// WithReconnectBackoff sets the exponential backoff between reconnects:
// it starts at initial and grows to max, with jitter, and never gives up.
// Default 500ms to 30s.
func WithReconnectBackoff(initial, max time.Duration) Option {
	return optionFunc(func(o *options) { o.backoffInitial, o.backoffMax = initial, max })
}

// WithUnauthorizedBackoff sets the least wait after the server refuses the
// client's credentials (401/403), so a misconfigured fleet does not hammer
// the server. Default one minute.
func WithUnauthorizedBackoff(d time.Duration) Option {
	return optionFunc(func(o *options) { o.unauthorizedWait = d })
}

// WithCallbackQueue bounds the change sets waiting for callbacks in each
// namespace. Past it, queued changes coalesce: each key keeps its newest
// value. Default 1024.
func WithCallbackQueue(n int) Option {
	return optionFunc(func(o *options) { o.callbackQueue = n })
}

// WithCacheDir keeps each namespace's last good data in dir (one file per
// namespace, the directory 0700 and files 0600), written after every update
// off the apply path, and read when the namespace opens, before the network,
// so a process that restarts while the config plane is down serves what it
// had. A file that fails its checks is never served: it is moved aside
// (".corrupt") and logged. Write errors are logged and shown in
// Status.PersistError; serving goes on.
func WithCacheDir(dir string) Option {
	return optionFunc(func(o *options) { o.cacheDir = dir })
}

// WithBackstop sets how often a namespace confirms its data with a full,
// conditional snapshot (a 304 when nothing changed), even while its watch is
// healthy: a backstop against a stream that silently diverged. Default 10
// minutes.
func WithBackstop(d time.Duration) Option {
	return optionFunc(func(o *options) { o.backstop = d })
}

// WithHistoryRewriteGrace sets how long a server must keep showing history
// behind what the client applied, under the same store id, before the
// client takes it as new history (a store restored from a backup) rather
// than a lagging replica: until then it refuses the older data and serves
// its last good, Stale. A linearizable source (etcd) proves new history at
// once. Default 10s.
func WithHistoryRewriteGrace(d time.Duration) Option {
	return optionFunc(func(o *options) { o.rewriteGrace = d })
}

// WithMeterProvider sets where the client's metrics go (package telemetry
// lists them). Default: otel.GetMeterProvider(), so instruments made before
// the application sets its provider are forwarded.
func WithMeterProvider(mp metric.MeterProvider) Option {
	return optionFunc(func(o *options) { o.meterProvider = mp })
}

// WithTracerProvider sets where the client's spans go (snapshot fetches and
// resnapshots). Default: otel.GetTracerProvider().
func WithTracerProvider(tp trace.TracerProvider) Option {
	return optionFunc(func(o *options) { o.tracerProvider = tp })
}

func (o *options) validate() error {
	var errs []error
	if o.clientID != "" {
		if err := transport.ValidateClientID(o.clientID); err != nil {
			errs = append(errs, fmt.Errorf("config: WithClientID: %w", err))
		}
	}
	if o.source == nil {
		switch {
		case !o.endpointsSet || len(o.endpoints) == 1 && o.endpoints[0] == "":
			errs = append(errs, errors.New("config: no endpoint: pass WithEndpoint, WithEndpoints or WithSource"))
		case len(o.endpoints) == 0:
			errs = append(errs, errors.New("config: WithEndpoints: no URL"))
		}
		if o.failbackAfter <= 0 {
			errs = append(errs, fmt.Errorf("config: failback window %v is not positive", o.failbackAfter))
		}
	}
	if o.logger == nil {
		errs = append(errs, errors.New("config: logger is nil"))
	}
	if o.idleTimeout <= 0 {
		errs = append(errs, fmt.Errorf("config: stream idle timeout %v is not positive", o.idleTimeout))
	}
	if o.backoffInitial <= 0 || o.backoffMax < o.backoffInitial {
		errs = append(errs, fmt.Errorf("config: reconnect backoff %v..%v is not a positive range", o.backoffInitial, o.backoffMax))
	}
	if o.backstop <= 0 {
		errs = append(errs, fmt.Errorf("config: backstop interval %v is not positive", o.backstop))
	}
	if o.rewriteGrace <= 0 {
		errs = append(errs, fmt.Errorf("config: history rewrite grace %v is not positive", o.rewriteGrace))
	}
	if o.callbackQueue <= 0 {
		errs = append(errs, fmt.Errorf("config: callback queue %d is not positive", o.callbackQueue))
	}
	return errors.Join(errs...)
}

// NamespaceOption configures one namespace. Pass options to
// Client.Namespace. Namespace options are named by what they set, without
// a With prefix: MaxStaleness, FailOpen, FailClosed, Defaults, Schema.
type NamespaceOption interface{ applyNamespace(*nsOptions) }

type nsOptionFunc func(*nsOptions)

func (f nsOptionFunc) applyNamespace(o *nsOptions) { f(o) }

func namespaceOptions(opts []NamespaceOption) nsOptions {
	var o nsOptions
	for _, opt := range opts {
		opt.applyNamespace(&o)
	}
	return o
}

// sameAs reports, as an error wrapping ErrOptionsDiffer that names the
// first option that differs, whether opts differ from o.
func (o nsOptions) sameAs(opts []NamespaceOption) error {
	p := namespaceOptions(opts)
	var which string
	switch {
	case p.maxStaleness != o.maxStaleness:
		which = fmt.Sprintf("MaxStaleness %v, open with %v", p.maxStaleness, o.maxStaleness)
	case p.failClosed != o.failClosed:
		which = fmt.Sprintf("FailClosed %v, open with %v", p.failClosed, o.failClosed)
	case !bytes.Equal(p.schema, o.schema):
		which = "Schema differs"
	case !sameDefaults(p.defaults, o.defaults):
		which = "Defaults differ"
	default:
		return nil
	}
	return fmt.Errorf("%w: %s", ErrOptionsDiffer, which)
}

// sameDefaults compares Defaults as the JSON they are served as.
func sameDefaults(a, b map[string]any) bool {
	if len(a) != len(b) {
		return false
	}
	ja, errA := json.Marshal(a)
	jb, errB := json.Marshal(b)
	return errA == nil && errB == nil && bytes.Equal(ja, jb)
}

type nsOptions struct {
	maxStaleness time.Duration // 0: never stale by policy
	failClosed   bool
	defaults     map[string]any
	schema       []byte
}

// Schema checks every update of the namespace against a JSON Schema
// (draft 2020-12 unless it says otherwise) before it is served: the
// application's own contract, what this build can parse. The document
// checked is the whole namespace after the update, key to value. An update
// that fails is rejected whole: the last good keeps serving, the rejection
// shows in Status and is reported to the server (a nack); a later revision
// that passes applies normally. A first snapshot that fails, with no last
// good, serves Defaults (fail-open) or refuses to open (fail-closed).
func Schema(schemaJSON []byte) NamespaceOption {
	return nsOptionFunc(func(o *nsOptions) { o.schema = schemaJSON })
}

// MaxStaleness sets how old the namespace's data may be: the time since the
// client last confirmed it was current (a snapshot, a change, or a progress
// event). Past it, a fail-open namespace keeps serving and reports a breach;
// a fail-closed one serves its Defaults. Zero (the default) never breaches.
func MaxStaleness(d time.Duration) NamespaceOption {
	return nsOptionFunc(func(o *nsOptions) { o.maxStaleness = d })
}

// FailOpen keeps serving the last good data past MaxStaleness, reporting a
// breach in Status. It is the default.
func FailOpen() NamespaceOption {
	return nsOptionFunc(func(o *nsOptions) { o.failClosed = false })
}

// FailClosed serves Defaults (or each getter's own default) past
// MaxStaleness, until fresh data returns, and makes Client.Namespace refuse
// to open without data fresher than MaxStaleness.
func FailClosed() NamespaceOption {
	return nsOptionFunc(func(o *nsOptions) { o.failClosed = true })
}

// Defaults sets baked-in values served when a fail-closed namespace has no
// fresh enough data. Values must marshal to JSON.
func Defaults(values map[string]any) NamespaceOption {
	return nsOptionFunc(func(o *nsOptions) { o.defaults = values })
}
