package store

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/server/v3/embed"
	"go.opentelemetry.io/otel/metric"
	"go.uber.org/zap"
	"google.golang.org/grpc"

	"github.com/holdfast-dev/holdfast/transport/etcd"
)

// The kinds of store.
const (
	KindEmbedded = "embedded"
	KindExternal = "etcd"
	KindMemory   = "memory"
)

// DefaultStartTimeout bounds Open: the embedded member's start, the first
// answer of the cluster and the store id.
const DefaultStartTimeout = 30 * time.Second

// Config says which store to open.
type Config struct {
	// Kind is KindEmbedded, KindExternal or KindMemory.
	Kind string
	// DataDir is the embedded member's directory (KindEmbedded).
	DataDir string
	// Endpoints are the external cluster's members, "HOST:PORT" or URLs
	// (KindExternal).
	Endpoints []string
	// Logger receives the embedded member's logs, and the store's own
	// (default: discard).
	Logger *slog.Logger
	// StartTimeout bounds Open (default DefaultStartTimeout).
	StartTimeout time.Duration
	// Retention is how much of etcd's history an embedded member keeps:
	// a count of revisions ("100000") or a duration ("24h"); empty keeps
	// everything. etcd compacts older revisions by itself; the audit log
	// outlives them. An external cluster compacts by its own
	// --auto-compaction-retention.
	Retention string
	// DialOptions are added to the etcd client's (instrumentation: the
	// tests count the server's requests to etcd with an interceptor).
	DialOptions []grpc.DialOption
	// Security is how the server reaches an external cluster: TLS and
	// etcd's authentication (KindExternal only).
	Security Security
	// MeterProvider receives the latency and errors of the server's
	// requests to the store (nil: none), under MeterScope.
	MeterProvider metric.MeterProvider
	MeterScope    string
}

// Security is how a client reaches an etcd cluster that requires TLS or
// authentication.
type Security struct {
	// TLS, when set, is the client's TLS configuration: the cluster's CA
	// in RootCAs, a client certificate (etcd's --client-cert-auth) in
	// Certificates. The members' endpoints are then https.
	TLS *tls.Config
	// Username and Password log in to etcd's authentication (etcdctl
	// auth enable). The user needs read and write access to the keys
	// beginning with "/holdfast" (one prefix permission); compaction
	// (holdfast compact) needs etcd's root role.
	Username, Password string
}

// Endpoints returns eps with the scheme Security asks for: https with
// TLS (etcd's client drops TLS for an http:// endpoint), http without.
func (sec Security) Endpoints(eps []string) []string {
	out := make([]string, len(eps))
	for i, ep := range eps {
		rest, ok := strings.CutPrefix(ep, "http://")
		if !ok {
			rest, ok = strings.CutPrefix(ep, "https://")
		}
		switch {
		case !ok:
			out[i] = ep
		case sec.TLS != nil:
			out[i] = "https://" + rest
		default:
			out[i] = "http://" + rest
		}
	}
	return out
}

// Store is an open store. Its Client is shared: close the Store, not the
// Client.
type Store struct {
	Kind      string
	Endpoints []string // the etcd client's endpoints
	DataDir   string   // KindEmbedded and KindMemory
	ID        string   // the store id
	Client    *clientv3.Client
	// MaxTxnOps is how many operations the store takes in one
	// transaction: the embedded member's EmbeddedMaxTxnOps, an external
	// cluster's --max-txn-ops as probed at Open (0: the probe failed; a
	// publish refused for it probes again). A publish changes up to
	// MaxTxnOps-PublishOverheadOps keys.
	MaxTxnOps int

	member *embed.Etcd // nil for KindExternal
	// closing is set as Close stops the member: its listeners' closed
	// errors are then expected (see slogCore).
	closing atomic.Bool
	fatal   *fatalHook // the embedded member's
	lock    *dirLock   // KindEmbedded
	tmp     string     // KindMemory: removed at Close

	dialOpts []grpc.DialOption
	sec      Security // KindExternal
}

// ErrLocked is returned by Open when another process holds the data
// directory.
var ErrLocked = errors.New("store: data directory in use")

// Open opens the store cfg names; the caller closes it.
func Open(ctx context.Context, cfg Config) (*Store, error) {
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.StartTimeout <= 0 {
		cfg.StartTimeout = DefaultStartTimeout
	}
	ctx, cancel := context.WithTimeout(ctx, cfg.StartTimeout)
	defer cancel()
	s := &Store{Kind: cfg.Kind, dialOpts: cfg.DialOptions}
	var err error
	if cfg.MeterProvider != nil {
		opt, err := requestMetrics(cfg.MeterProvider, cfg.MeterScope)
		if err != nil {
			return nil, err
		}
		s.dialOpts = append(slices.Clip(s.dialOpts), opt)
	}
	if _, _, err := compaction(cfg.Retention); err != nil {
		return nil, err
	}
	if cfg.Kind != KindExternal && (cfg.Security.TLS != nil || cfg.Security.Username != "") {
		return nil, errors.New("store: TLS and authentication are for an external cluster; the embedded store listens on loopback only")
	}
	switch cfg.Kind {
	case KindEmbedded:
		if cfg.DataDir == "" {
			return nil, errors.New("store: an embedded store needs a data directory")
		}
		err = s.openEmbedded(ctx, cfg, cfg.DataDir)
	case KindMemory:
		if s.tmp, err = os.MkdirTemp("", "holdfast-memory-"); err != nil {
			return nil, fmt.Errorf("store: %w", err)
		}
		err = s.openEmbedded(ctx, cfg, s.tmp)
	case KindExternal:
		if cfg.Retention != "" {
			return nil, errors.New("store: an external cluster compacts by its own --auto-compaction-retention, not the server's retention")
		}
		if len(cfg.Endpoints) == 0 {
			return nil, errors.New("store: an external store needs its members' endpoints")
		}
		s.Endpoints = cfg.Security.Endpoints(cfg.Endpoints)
		s.sec = cfg.Security
	default:
		return nil, fmt.Errorf("store: unknown kind %q", cfg.Kind)
	}
	if err == nil {
		err = s.connect(ctx)
	}
	if err != nil {
		return nil, errors.Join(err, s.Close())
	}
	if s.member != nil {
		s.MaxTxnOps = EmbeddedMaxTxnOps
	} else if s.MaxTxnOps, err = ProbeMaxTxnOps(ctx, s.Client); err != nil {
		cfg.Logger.Warn("store: etcd's limit on a transaction's operations (--max-txn-ops) could not be probed; a publish it refuses probes it again", "err", err)
	}
	if s.MaxTxnOps > 0 {
		cfg.Logger.Info("store: a publish changes up to this many keys (one etcd transaction; etcd's --max-txn-ops less the publish's own operations)",
			"max_keys_per_publish", s.MaxTxnOps-PublishOverheadOps, "max_txn_ops", s.MaxTxnOps)
	}
	return s, nil
}

// Dial returns an etcd client of the members at endpoints, for what
// must not open a store as a server does (Import: a new cluster gets the
// old store's id, not one of its own). The caller closes it.
func Dial(endpoints []string, sec Security, opts ...grpc.DialOption) (*clientv3.Client, error) {
	cli, err := clientv3.New(clientv3.Config{
		Endpoints:   sec.Endpoints(endpoints),
		DialTimeout: 5 * time.Second,
		Logger:      zap.NewNop(),
		Context:     context.Background(), // the client outlives the caller's ctx
		DialOptions: opts,
		// The members' limit (--max-request-bytes) is the one that
		// counts, not gRPC's default of 2 MiB.
		MaxCallSendMsgSize: maxSendBytes,
		TLS:                sec.TLS,
		Username:           sec.Username,
		Password:           sec.Password,
	})
	if err != nil {
		return nil, fmt.Errorf("store: etcd client: %w", err)
	}
	return cli, nil
}

// connect dials the members and reads (or creates) the store id, which
// also proves the cluster answers.
func (s *Store) connect(ctx context.Context) error {
	cli, err := Dial(s.Endpoints, s.sec, s.dialOpts...)
	if err != nil {
		return err
	}
	s.Client = cli
	for {
		s.ID, err = createStoreID(ctx, cli)
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("store: %s did not answer: %w", s.describe(), err)
		case <-time.After(200 * time.Millisecond):
		}
	}
}

func (s *Store) describe() string {
	if s.member != nil {
		return "the embedded etcd in " + s.DataDir
	}
	return fmt.Sprintf("etcd %v", s.Endpoints)
}

// Err reports a failure of the embedded member after it started: a
// receive means the store is gone. Nil (never ready) for an external
// store, whose client reconnects by itself.
func (s *Store) Err() <-chan error {
	if s.member == nil {
		return nil
	}
	return s.member.Err()
}

// Close closes the client, stops the embedded member and releases the
// data directory (or removes the memory store's). It is safe to call
// more than once.
func (s *Store) Close() error {
	var errs []error
	if s.Client != nil {
		errs = append(errs, s.Client.Close())
		s.Client = nil
	}
	if s.fatal != nil {
		close(s.fatal.release)
	}
	if s.member != nil {
		s.closing.Store(true)
		closeMember(s.member, s.fatal != nil && s.fatal.failed.Load())
		s.member = nil
	}
	s.fatal = nil
	if s.lock != nil {
		errs = append(errs, s.lock.release())
		s.lock = nil
	}
	if s.tmp != "" {
		errs = append(errs, os.RemoveAll(s.tmp))
		s.tmp = ""
	}
	return errors.Join(errs...)
}

// compaction parses a retention into etcd's auto-compaction mode and
// retention.
func compaction(retention string) (mode, value string, err error) {
	if retention == "" {
		return embed.CompactorModePeriodic, "0", nil
	}
	if n, err := strconv.ParseInt(retention, 10, 64); err == nil {
		if n < 1 {
			return "", "", fmt.Errorf("store: retention %q: want at least 1 revision", retention)
		}
		return embed.CompactorModeRevision, retention, nil
	}
	d, err := time.ParseDuration(retention)
	if err != nil || d < time.Minute {
		return "", "", fmt.Errorf("store: retention %q: want a count of revisions or a duration of at least 1m", retention)
	}
	return embed.CompactorModePeriodic, retention, nil
}

// createStoreID returns the store id of the store cli reaches, creating it
// (16 random bytes, hex) with a compare-and-set if no server has yet: two
// servers starting at once agree on one.
func createStoreID(ctx context.Context, cli *clientv3.Client) (string, error) {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", err
	}
	resp, err := cli.Txn(ctx).
		If(clientv3.Compare(clientv3.CreateRevision(etcd.StoreIDKey), "=", 0)).
		Then(clientv3.OpPut(etcd.StoreIDKey, hex.EncodeToString(b[:]))).
		Else(clientv3.OpGet(etcd.StoreIDKey)).
		Commit()
	if err != nil {
		return "", fmt.Errorf("etcd: store id: %w", err)
	}
	if resp.Succeeded {
		return hex.EncodeToString(b[:]), nil
	}
	kvs := resp.Responses[0].GetResponseRange().GetKvs()
	if len(kvs) == 0 || len(kvs[0].Value) == 0 {
		return "", fmt.Errorf("etcd: store id: %s is empty", etcd.StoreIDKey)
	}
	return string(kvs[0].Value), nil
}
