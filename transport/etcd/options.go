package etcd

import (
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// Defaults of the options.
const (
	DefaultDialTimeout      = 5 * time.Second
	DefaultRequestTimeout   = 10 * time.Second
	DefaultHeartbeat        = 5 * time.Second
	DefaultIdleTimeout      = 15 * time.Second
	DefaultMaxValueBytes    = 1 << 20
	DefaultMaxEventBytes    = 16 << 20
	DefaultMaxSnapshotBytes = 64 << 20
)

// Option configures a Source. Pass options to New.
type Option interface{ apply(*options) }

type optionFunc func(*options)

func (f optionFunc) apply(o *options) { f(o) }

type options struct {
	storeID          string
	endpoints        []string
	tls              *tls.Config
	username         string
	password         string
	dialTimeout      time.Duration
	requestTimeout   time.Duration
	logger           *slog.Logger
	client           *clientv3.Client
	heartbeat        time.Duration
	idleTimeout      time.Duration
	maxValueBytes    int
	maxEventBytes    int
	maxSnapshotBytes int
	progressRequests bool
}

func defaultOptions() options {
	return options{
		dialTimeout:      DefaultDialTimeout,
		requestTimeout:   DefaultRequestTimeout,
		logger:           slog.New(slog.DiscardHandler),
		heartbeat:        DefaultHeartbeat,
		idleTimeout:      DefaultIdleTimeout,
		maxValueBytes:    DefaultMaxValueBytes,
		maxEventBytes:    DefaultMaxEventBytes,
		maxSnapshotBytes: DefaultMaxSnapshotBytes,
	}
}

// WithEndpoints sets the etcd members to talk to, for example
// "https://10.0.0.1:2379". Give every member (or the gRPC proxy): the client
// balances over them and fails over when one goes away. One of
// WithEndpoints and WithClient is required.
func WithEndpoints(endpoints ...string) Option {
	return optionFunc(func(o *options) { o.endpoints = append([]string(nil), endpoints...) })
}

// WithTLS sets the TLS configuration: the CA in RootCAs, and client
// certificates (etcd's --client-cert-auth) in Certificates.
func WithTLS(cfg *tls.Config) Option {
	return optionFunc(func(o *options) { o.tls = cfg })
}

// WithStoreID makes the Source report store id id, whatever the cluster
// holds: holdfast server passes the id it read at start, so that a read
// of StoreIDKey that fails can never make an answer name another store.
func WithStoreID(id string) Option { return optionFunc(func(o *options) { o.storeID = id }) }

// WithAuth sets the user name and password of etcd's authentication. The
// user needs read access to the namespaces' key ranges (KeyRoot with a
// prefix permission) and to StoreIDKey; a prefix permission on
// "/holdfast" covers both.
func WithAuth(username, password string) Option {
	return optionFunc(func(o *options) { o.username, o.password = username, password })
}

// WithDialTimeout bounds connecting to a member. Default 5s.
func WithDialTimeout(d time.Duration) Option {
	return optionFunc(func(o *options) { o.dialTimeout = d })
}

// WithRequestTimeout bounds every unary request (a snapshot read, a
// progress check, the store id's read), on top of the caller's context.
// Default 10s.
func WithRequestTimeout(d time.Duration) Option {
	return optionFunc(func(o *options) { o.requestTimeout = d })
}

// WithLogger sets the logger. Default: discard. The etcd client's own zap
// logger is silenced unless WithClient hands in a client that has one.
func WithLogger(l *slog.Logger) Option {
	return optionFunc(func(o *options) { o.logger = l })
}

// WithClient makes the Source use a client the caller owns and configured
// (endpoints, TLS, auth, timeouts, call sizes). Close does not close it.
// It excludes WithEndpoints, WithTLS, WithAuth and WithDialTimeout.
func WithClient(c *clientv3.Client) Option {
	return optionFunc(func(o *options) { o.client = c })
}

// WithHeartbeat sets how often a watch confirms its namespace current (a
// linearizable read of the namespace's meta key, or a progress request:
// see WithProgressRequests). Each confirmation marks the data fresh and
// advances the cursor, so a quiet namespace is not pushed past compaction.
// Default 5s.
func WithHeartbeat(d time.Duration) Option {
	return optionFunc(func(o *options) { o.heartbeat = d })
}

// WithIdleTimeout sets how long a watch may receive nothing — no change, no
// progress — before it ends with transport.ErrStreamIdle (a member that
// stopped answering, or every member down while the etcd client retries
// quietly); and how long it waits for a change that a heartbeat found in
// the store but the watch has not delivered, while the watch delivers
// nothing else. Default 15s: three default heartbeats. It must exceed the
// heartbeat.
func WithIdleTimeout(d time.Duration) Option {
	return optionFunc(func(o *options) { o.idleTimeout = d })
}

// WithMaxValueBytes bounds one key's value, in snapshots and watches.
// Default 1 MiB (etcd's own default request limit is 1.5 MiB).
func WithMaxValueBytes(n int) Option {
	return optionFunc(func(o *options) { o.maxValueBytes = n })
}

// WithMaxEventBytes bounds one change set: the sum of its values. Default
// 16 MiB.
func WithMaxEventBytes(n int) Option {
	return optionFunc(func(o *options) { o.maxEventBytes = n })
}

// WithMaxSnapshotBytes bounds one snapshot: the gRPC message of the range
// read (for a client the Source creates) and the sum of its values.
// Default 64 MiB.
func WithMaxSnapshotBytes(n int) Option {
	return optionFunc(func(o *options) { o.maxSnapshotBytes = n })
}

// WithProgressRequests makes each heartbeat ask the watch's member for a
// progress notification (clientv3 RequestProgress), checked by a
// serializable read, instead of confirming by a linearizable read of the
// namespace's meta key (the default). It is cheaper for the cluster, but
// use it only on etcd >= 3.4.25 or >= 3.5.8: before those, etcd may send a
// requested notification ahead of an event of the same revision, and the etcd client, which resumes a broken watch after the
// last revision it heard of, then skips that event. The source still
// notices: it confirms nothing past the skipped change, and after the idle
// timeout ends the watch, and the client's resume from its cursor delivers
// the change (or, when a later change came first, the chain breaks and the
// client resnapshots). Requests that go unanswered (etcd's grpc-proxy)
// fall back to the read.
func WithProgressRequests(on bool) Option {
	return optionFunc(func(o *options) { o.progressRequests = on })
}

func (o *options) validate() error {
	var errs []error
	switch {
	case o.client == nil && len(o.endpoints) == 0:
		errs = append(errs, errors.New("etcd: no endpoints: pass WithEndpoints or WithClient"))
	case o.client != nil && (len(o.endpoints) > 0 || o.tls != nil || o.username != "" || o.password != ""):
		errs = append(errs, errors.New("etcd: WithClient excludes WithEndpoints, WithTLS and WithAuth: configure the client instead"))
	}
	for _, ep := range o.endpoints {
		if ep == "" {
			errs = append(errs, errors.New("etcd: empty endpoint"))
		}
	}
	if o.password != "" && o.username == "" {
		errs = append(errs, errors.New("etcd: password without a user name"))
	}
	if o.logger == nil {
		errs = append(errs, errors.New("etcd: logger is nil"))
	}
	if o.dialTimeout <= 0 || o.requestTimeout <= 0 {
		errs = append(errs, fmt.Errorf("etcd: timeouts must be positive (dial %v, request %v)", o.dialTimeout, o.requestTimeout))
	}
	if o.heartbeat <= 0 || o.idleTimeout <= o.heartbeat {
		errs = append(errs, fmt.Errorf("etcd: heartbeat %v must be positive and below the idle timeout %v", o.heartbeat, o.idleTimeout))
	}
	if o.maxValueBytes <= 0 || o.maxEventBytes <= 0 || o.maxSnapshotBytes <= 0 {
		errs = append(errs, errors.New("etcd: size limits must be positive"))
	}
	return errors.Join(errs...)
}
