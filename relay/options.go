package relay

import (
	"context"
	"log/slog"
	"time"

	"github.com/holdfast-dev/holdfast/access"
	"github.com/holdfast-dev/holdfast/transport"
	"go.opentelemetry.io/otel/metric"
)

// Defaults of the options.
const (
	DefaultHeartbeat            = 5 * time.Second
	DefaultHistory              = 1000    // change sets kept per namespace
	DefaultHistoryBytes         = 4 << 20 // bytes of change sets kept per namespace
	DefaultLinger               = time.Minute
	DefaultMaxNamespaces        = 10000
	DefaultMaxSnapshotsInFlight = 64
	DefaultRetryAfterWindow     = 10 * time.Second
)

type options struct {
	logger               *slog.Logger
	meter                metric.MeterProvider
	cacheDir             string
	namespaces           []string
	allow                []string
	maxNamespaces        int
	history              int
	historyBytes         int64
	heartbeat            time.Duration
	linger               time.Duration
	maxSnapshotsInFlight int
	retryAfterWindow     time.Duration
	id                   string
	tokens               *access.Tokens
	backfill             Backfill
	confirm              Confirm
	storeID              string
	maxConns             int
	idleTimeout          time.Duration
}

// Option configures a Relay.
type Option interface{ apply(*options) }

type optionFunc func(*options)

func (f optionFunc) apply(o *options) { f(o) }

// Backfill reads namespace ns's change sets after cursor since, up to and
// including revision until, oldest first: at most max of them, else an
// error (see WithBackfill).
type Backfill func(ctx context.Context, ns string, since, until int64, max int) ([]transport.ChangeSet, error)

// WithBackfill lets the relay serve a client that resumes from a cursor
// older than its window (a relay just started, a client failing over
// from another) with the upstream's history rather than a compacted
// error and a new snapshot: holdfast server passes its store's. Without
// it (the default) such a client resnapshots.
func WithBackfill(b Backfill) Option { return optionFunc(func(o *options) { o.backfill = b }) }

// Confirm reads, linearizably, the upstream's head and namespace ns's
// revision there (0: it has none); see WithConfirm.
type Confirm func(ctx context.Context, ns string) (head, rev int64, err error)

// WithConfirm makes the relay's snapshots as current as a read of the
// upstream (a client that published through another server of the store
// sees its change), and lets it serve at once a client whose cursor is
// ahead of the relay's (it came from another server or relay of the same
// store) instead of waiting for the next heartbeat or refusing the cursor
// as ahead. It costs a read of the upstream per snapshot and per cursor
// ahead: holdfast server passes its store's, with concurrent reads of a
// namespace shared.
func WithConfirm(c Confirm) Option { return optionFunc(func(o *options) { o.confirm = c }) }

// WithStoreID names the upstream's store id before its first answer, for
// the replies the relay gives before it (holdfast server knows its
// store's).
func WithStoreID(id string) Option { return optionFunc(func(o *options) { o.storeID = id }) }

// WithLogger sets the logger (default: discard).
func WithLogger(l *slog.Logger) Option { return optionFunc(func(o *options) { o.logger = l }) }

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
	return optionFunc(func(o *options) { o.namespaces = append(o.namespaces, names...) })
}

// WithAllow limits the namespaces served to those matching one of the
// patterns (path.Match syntax, e.g. "payments.*"); a request for another
// gets 403 and no upstream subscription. Without it every name is allowed.
func WithAllow(patterns ...string) Option {
	return optionFunc(func(o *options) { o.allow = append(o.allow, patterns...) })
}

// WithMaxNamespaces bounds how many namespaces the relay follows at once
// (default DefaultMaxNamespaces); a request for one more gets 429.
func WithMaxNamespaces(n int) Option { return optionFunc(func(o *options) { o.maxNamespaces = n }) }

// WithHistory bounds the change sets kept per namespace for clients that
// resume, by count and by bytes (defaults DefaultHistory,
// DefaultHistoryBytes); an older cursor gets 410 and its client
// resnapshots from the relay.
func WithHistory(changes int, bytes int64) Option {
	return optionFunc(func(o *options) { o.history, o.historyBytes = changes, bytes })
}

// WithHeartbeat sets how often the relay's watch streams send progress
// (default DefaultHeartbeat).
func WithHeartbeat(d time.Duration) Option { return optionFunc(func(o *options) { o.heartbeat = d }) }

// WithLinger sets how long a namespace is still followed after its last
// downstream client left (default DefaultLinger).
func WithLinger(d time.Duration) Option { return optionFunc(func(o *options) { o.linger = d }) }

// WithMaxSnapshotsInFlight bounds the snapshot replies being written at
// once (default DefaultMaxSnapshotsInFlight); past it a snapshot request
// gets 503 with a Retry-After spread over window (default
// DefaultRetryAfterWindow), so that a reconnect storm converges.
func WithMaxSnapshotsInFlight(n int, window time.Duration) Option {
	return optionFunc(func(o *options) { o.maxSnapshotsInFlight, o.retryAfterWindow = n, window })
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
	return optionFunc(func(o *options) { o.idleTimeout = d })
}

// WithID sets the client id the relay reports upstream as (default: a
// random one). The acks it forwards keep their own clients' ids.
func WithID(id string) Option { return optionFunc(func(o *options) { o.id = id }) }

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
func WithTokens(t *access.Tokens) Option { return optionFunc(func(o *options) { o.tokens = t }) }
