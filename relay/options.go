package relay

import (
	"log/slog"
	"time"

	"github.com/holdfast-dev/holdfast/access"
	"github.com/holdfast-dev/holdfast/internal/watchcache"
	"go.opentelemetry.io/otel/metric"
)

// Defaults of the options.
const (
	DefaultHeartbeat            = watchcache.DefaultHeartbeat
	DefaultHistory              = watchcache.DefaultHistory      // change sets kept per namespace
	DefaultHistoryBytes         = watchcache.DefaultHistoryBytes // bytes of change sets kept per namespace
	DefaultLinger               = watchcache.DefaultLinger
	DefaultMaxNamespaces        = watchcache.DefaultMaxNamespaces
	DefaultMaxSnapshotsInFlight = watchcache.DefaultMaxSnapshotsInFlight
	DefaultRetryAfterWindow     = watchcache.DefaultRetryAfterWindow
)

// options are the watch cache's configuration and what the relay adds to
// it.
type options struct {
	cache    watchcache.Config
	cacheDir string
	meter    metric.MeterProvider
	maxConns int
}

// Option configures a Relay.
type Option interface{ apply(*options) }

type optionFunc func(*options)

func (f optionFunc) apply(o *options) { f(o) }

// WithLogger sets the logger (default: discard).
func WithLogger(l *slog.Logger) Option { return optionFunc(func(o *options) { o.cache.Logger = l }) }

// WithMeterProvider sets where the relay's metrics go (default: the
// global OpenTelemetry provider, a no-op unless the program set one).
func WithMeterProvider(mp metric.MeterProvider) Option {
	return optionFunc(func(o *options) { o.meter = mp })
}

// WithCacheDir persists the last good of every namespace served in dir
// (the SDK's file format and atomic write) and loads it before the relay
// dials its upstream. Without it nothing is persisted.
func WithCacheDir(dir string) Option { return optionFunc(func(o *options) { o.cacheDir = dir }) }

// WithNamespaces makes the relay follow these namespaces from the start,
// not only on a downstream client's first demand; they never linger out.
func WithNamespaces(names ...string) Option {
	return optionFunc(func(o *options) { o.cache.Namespaces = append(o.cache.Namespaces, names...) })
}

// WithAllow limits the namespaces served to those matching one of the
// patterns (path.Match syntax, e.g. "payments.*"); a request for another
// gets 403 and no upstream subscription. Without it every name is allowed.
func WithAllow(patterns ...string) Option {
	return optionFunc(func(o *options) { o.cache.Allow = append(o.cache.Allow, patterns...) })
}

// WithMaxNamespaces bounds how many namespaces the relay follows at once
// (default DefaultMaxNamespaces); a request for one more gets 429.
func WithMaxNamespaces(n int) Option {
	return optionFunc(func(o *options) { o.cache.MaxNamespaces = n })
}

// WithHistory bounds the change sets kept per namespace for clients that
// resume, by count and by bytes (defaults DefaultHistory,
// DefaultHistoryBytes); an older cursor gets 410 and its client
// resnapshots from the relay.
func WithHistory(changes int, bytes int64) Option {
	return optionFunc(func(o *options) { o.cache.History, o.cache.HistoryBytes = changes, bytes })
}

// WithHeartbeat sets how often the relay's watch streams send progress
// (default DefaultHeartbeat).
func WithHeartbeat(d time.Duration) Option {
	return optionFunc(func(o *options) { o.cache.Heartbeat = d })
}

// WithLinger sets how long a namespace is still followed after its last
// downstream client left (default DefaultLinger).
func WithLinger(d time.Duration) Option { return optionFunc(func(o *options) { o.cache.Linger = d }) }

// WithMaxSnapshotsInFlight bounds the snapshot replies being written at
// once (default DefaultMaxSnapshotsInFlight); past it a snapshot request
// gets 503 with a Retry-After spread over window (default
// DefaultRetryAfterWindow), so that a reconnect storm converges. A reply
// that makes no progress for a second stops counting, and one peer
// cannot take the last quarter of the bound (docs/SECURITY.md,
// "Snapshot admission").
func WithMaxSnapshotsInFlight(n int, window time.Duration) Option {
	return optionFunc(func(o *options) { o.cache.MaxSnapshotsInFlight, o.cache.RetryAfterWindow = n, window })
}

// WithMaxConns caps the connections Serve keeps open (0, the default:
// listen.DefaultMaxConns, as holdfast relay's -max-conns; negative: no
// cap). A connection past the cap is closed at once, a plaintext one
// after an HTTP/1.1 503, so that its client retries elsewhere or later.
func WithMaxConns(n int) Option { return optionFunc(func(o *options) { o.maxConns = n }) }

// WithIdleTimeout sets how long a connection Serve keeps open with
// nothing in flight: an HTTP/1.1 one between requests, an HTTP/2 one with
// no open stream (0, the default: listen.DefaultIdleTimeout). An SDK
// client holds its watch stream, so it never idles.
func WithIdleTimeout(d time.Duration) Option {
	return optionFunc(func(o *options) { o.cache.IdleTimeout = d })
}

// WithID sets the client id the relay reports upstream as (default: a
// random one). The acks it forwards keep their own clients' ids.
func WithID(id string) Option { return optionFunc(func(o *options) { o.cache.ID = id }) }

// WithTokens makes the relay require a token of t from its clients, with
// data scope over each namespace they read or ack (see package access;
// the same configuration as the origin's serves): 401 without a valid
// token, 403 outside its scope, before the relay follows anything for the
// request. Without it every client may read every namespace the relay
// serves, and New says so in a warning.
//
// The relay's own identity at its upstream is its upstream source's
// (transport.WithBearerToken): that token needs data scope over every
// namespace the relay serves, for it reads them and forwards its clients'
// acks of them under it; the upstream drops acks outside it.
func WithTokens(t *access.Tokens) Option { return optionFunc(func(o *options) { o.cache.Tokens = t }) }
