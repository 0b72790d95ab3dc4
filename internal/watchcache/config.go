package watchcache

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"path"
	"time"

	"go.opentelemetry.io/otel/metric"

	"github.com/holdfast-dev/holdfast/access"
	"github.com/holdfast-dev/holdfast/internal/authlimit"
	"github.com/holdfast-dev/holdfast/internal/cachedir"
	"github.com/holdfast-dev/holdfast/transport"
)

// Defaults of Config (DefaultConfig).
const (
	DefaultHeartbeat            = 5 * time.Second
	DefaultHistory              = 1000    // change sets kept per namespace
	DefaultHistoryBytes         = 4 << 20 // bytes of change sets kept per namespace
	DefaultLinger               = time.Minute
	DefaultMaxNamespaces        = 10000
	DefaultMaxSnapshotsInFlight = 64
	DefaultRetryAfterWindow     = 10 * time.Second
)

// Config configures a Cache. Start from DefaultConfig: New refuses a
// zero History or Heartbeat.
type Config struct {
	// Logger gets the cache's logs (nil: discard).
	Logger *slog.Logger
	// Meter, when set, gets the cache's instruments, named under
	// MetricPrefix (see register).
	Meter        metric.Meter
	MetricPrefix string
	// History and HistoryBytes bound the change sets kept per namespace
	// for clients that resume, by count (at least 1) and by bytes; an
	// older cursor gets 410 and its client resnapshots.
	History      int
	HistoryBytes int64
	// Heartbeat is how often the cache's watch streams send progress.
	Heartbeat time.Duration
	// Linger is how long a namespace is still followed after its last
	// downstream client left.
	Linger time.Duration
	// MaxNamespaces bounds how many namespaces are followed at once; a
	// request for one more gets 429.
	MaxNamespaces int
	// MaxSnapshotsInFlight bounds the snapshot replies being written at
	// once; past it a snapshot request gets 503 with a Retry-After
	// spread over RetryAfterWindow.
	MaxSnapshotsInFlight int
	RetryAfterWindow     time.Duration
	// IdleTimeout is how long a connection the data plane serves (Listen)
	// is kept open with nothing in flight (0: listen.DefaultIdleTimeout).
	IdleTimeout time.Duration
	// ID is the client id the cache reports its clients' acks upstream
	// as ("": a random one, "relay-…").
	ID string
	// MaxPendingAcks bounds the outcomes waiting to go upstream (0: the
	// ack queue's own bound, 2^18); tests set a small one.
	MaxPendingAcks int
	// KeepReports makes the cache keep each client's last report of each
	// namespace and tell them upstream again whenever its upstream
	// connection for the namespace is new (first connection, reconnection,
	// failover, the upstream's restart), and, to an upstream that does
	// not list transport.CapabilityReportsKept, at every progress while a
	// rollout runs in it (at most every second): what its clients, which
	// it tells they need not repeat themselves, no longer do. A relay's.
	KeepReports bool
	// Tokens, when set, makes the data plane require a token of it from
	// its clients, with data scope over each namespace they read or ack.
	Tokens *access.Tokens
	// AuthLimit, with Tokens, slows down a peer that keeps sending
	// tokens that are not accepted (dataplane.WithAuthFailureLimit; nil:
	// one of the data plane's own).
	AuthLimit *authlimit.Limiter

	// The edge's (holdfast relay):

	// LastGood, when set, keeps the last good of every namespace served
	// across restarts (holdfast relay's cache directory): New serves
	// what it holds before the cache dials its upstream.
	LastGood LastGood
	// Namespaces are followed from the start and never linger out.
	Namespaces []string
	// Allow limits the namespaces served to those matching one of the
	// patterns (path.Match syntax); a request for another gets 403.
	// Empty: every name.
	Allow []string

	// The server's (holdfast server, whose upstream is its store):

	// Backfill, when set, serves a client that resumes from a cursor
	// older than the window with the upstream's history, rather than a
	// compacted error and a new snapshot.
	Backfill Backfill
	// Confirm, when set, makes the snapshots as current as a read of the
	// upstream (a client that published through another server of the
	// store sees its change), and serves at once a client whose cursor
	// is ahead of the cache's, instead of waiting for the next heartbeat
	// or refusing the cursor as ahead. It costs a read of the upstream
	// per snapshot and per cursor ahead.
	Confirm Confirm
	// StoreID names the upstream's store id before its first answer, for
	// the replies given before it.
	StoreID string
}

// DefaultConfig is the configuration of the defaults.
func DefaultConfig() Config {
	return Config{
		History:              DefaultHistory,
		HistoryBytes:         DefaultHistoryBytes,
		Heartbeat:            DefaultHeartbeat,
		Linger:               DefaultLinger,
		MaxNamespaces:        DefaultMaxNamespaces,
		MaxSnapshotsInFlight: DefaultMaxSnapshotsInFlight,
		RetryAfterWindow:     DefaultRetryAfterWindow,
	}
}

// LastGood keeps the last good of every namespace a cache serves across
// restarts. The cache calls Open once, in New, then Submit from its
// syncers, and Close once, when it closes, after the last Submit.
type LastGood interface {
	// Open calls load with each namespace's record it holds; an error
	// fails New.
	Open(load func(*cachedir.Record)) error
	// Submit persists a namespace's last good, in the background: it
	// must not block.
	Submit(*cachedir.Record)
	// Close flushes what was submitted.
	Close() error
}

// Backfill reads namespace ns's change sets after cursor since, up to and
// including revision until, oldest first: at most max of them, else an
// error (see Config.Backfill).
type Backfill func(ctx context.Context, ns string, since, until int64, max int) ([]transport.ChangeSet, error)

// Confirm reads, linearizably, the upstream's head and namespace ns's
// revision there (0: it has none); see Config.Confirm.
type Confirm func(ctx context.Context, ns string) (head, rev int64, err error)

// check checks cfg and fills in what it leaves to the cache: a logger,
// an id. Its errors say "relay:", as holdfast relay's options name them.
func (cfg *Config) check() error {
	switch {
	case cfg.History < 1:
		return errors.New("relay: history must keep at least one change set")
	case cfg.Heartbeat <= 0:
		return errors.New("relay: heartbeat must be positive")
	case cfg.MaxNamespaces < 1:
		return errors.New("relay: max namespaces must be at least 1")
	case cfg.Linger < 0:
		return errors.New("relay: linger must not be negative")
	case cfg.IdleTimeout < 0:
		return errors.New("relay: idle timeout must not be negative")
	}
	for _, p := range cfg.Allow {
		if _, err := path.Match(p, ""); err != nil {
			return fmt.Errorf("relay: allow pattern %q: %w", p, err)
		}
	}
	for _, ns := range cfg.Namespaces {
		if err := transport.ValidateNamespace(ns); err != nil {
			return fmt.Errorf("relay: %w", err)
		}
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.ID != "" {
		if err := transport.ValidateClientID(cfg.ID); err != nil {
			return fmt.Errorf("relay: WithID: %w", err)
		}
	} else {
		var b [8]byte
		_, _ = rand.Read(b[:])
		cfg.ID = "relay-" + hex.EncodeToString(b[:])
	}
	return nil
}
