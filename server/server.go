package server

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.opentelemetry.io/otel/metric"

	"github.com/holdfast-dev/holdfast/access"
	"github.com/holdfast-dev/holdfast/internal/authlimit"
	"github.com/holdfast-dev/holdfast/internal/console"
	"github.com/holdfast-dev/holdfast/internal/httpmetrics"
	"github.com/holdfast-dev/holdfast/internal/watchcache"
	"github.com/holdfast-dev/holdfast/server/control"
	"github.com/holdfast-dev/holdfast/server/store"
	"github.com/holdfast-dev/holdfast/server/tokens"
	"github.com/holdfast-dev/holdfast/transport/etcd"
)

// Defaults of Config.
const (
	DefaultHeartbeat = 5 * time.Second
)

// Config configures a Server.
type Config struct {
	Store store.Config
	// Gates builds a rollout's metric gates from their JSON (nil: a
	// rollout with gates is refused with 400).
	Gates  func(raw json.RawMessage) (control.Gate, error)
	Logger *slog.Logger
	// Heartbeat is the progress interval of the data plane's streams
	// (default DefaultHeartbeat).
	Heartbeat time.Duration
	// MaxPublishBytes bounds a publish body (default
	// control.DefaultMaxPublishBytes).
	MaxPublishBytes int64
	// AuditRetention is how many audit records each namespace keeps
	// (default control.DefaultAuditRetention).
	AuditRetention int
	// AuditRetentionBytes bounds the bytes of each namespace's audit
	// records too (default control.DefaultAuditRetentionBytes; negative:
	// no bound).
	AuditRetentionBytes int64
	// DefragInterval is how often the leader checks whether a store
	// member's file is worth defragmenting (default
	// DefaultDefragInterval); DefragMinFree, how much of it must be free
	// (default DefaultDefragMinFree, and at least half the file).
	DefragInterval time.Duration
	DefragMinFree  int64
	// NoSpaceInterval is how often the server checks the store's NOSPACE
	// alarm, and defragments and disarms it once space is free (default
	// DefaultNoSpaceInterval).
	NoSpaceInterval time.Duration
	// MaxNamespaces bounds the namespaces the watch cache follows at once
	// (default watchcache.DefaultMaxNamespaces: 10000).
	MaxNamespaces int
	// TokenUseInterval is how often the tokens' last uses are written
	// (default tokens.DefaultUseInterval).
	TokenUseInterval time.Duration
	// Console serves the operator's console at /console/ (package
	// console), a client of the control API's handler, its sessions in
	// the store.
	Console bool
	// MeterProvider receives the server's metrics (nil: none): its
	// requests by route and code, its streams, the store's latency and
	// errors, publishes and their propagation, leadership, rollouts
	// (docs/SERVER.md, "Metrics").
	MeterProvider metric.MeterProvider
}

// Server is a holdfast server over one store. Create it with New, serve
// its Handler, Close it when done.
type Server struct {
	log     *slog.Logger
	store   *store.Store
	src     *etcd.Source
	ns      *store.Namespaces
	cache   *watchcache.Cache
	control *control.Handler
	acks    *control.Acks
	tokens  *tokens.Store
	handler http.Handler

	leader  *leader
	metrics metric.Registration // nil without Config.MeterProvider
	noSpace *noSpaceWatch

	closeOnce sync.Once
	closeErr  error
}

// origin is the watch cache's upstream: the store through holdfast's etcd
// source, with the acks its clients send recorded in the server's table.
type origin struct {
	*etcd.Source
	*control.Acks
}

// New opens the store cfg names and returns a Server over it.
func New(ctx context.Context, cfg Config) (*Server, error) {
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Heartbeat <= 0 {
		cfg.Heartbeat = DefaultHeartbeat
	}
	if cfg.MaxNamespaces <= 0 {
		cfg.MaxNamespaces = watchcache.DefaultMaxNamespaces
	}
	if cfg.Store.Logger == nil {
		cfg.Store.Logger = cfg.Logger
	}
	if cfg.MeterProvider != nil && cfg.Store.MeterProvider == nil {
		cfg.Store.MeterProvider, cfg.Store.MeterScope = cfg.MeterProvider, control.MeterScope
	}
	st, err := store.Open(ctx, cfg.Store)
	if err != nil {
		return nil, err
	}
	s := &Server{log: cfg.Logger, store: st, acks: control.NewAcks(control.DefaultMaxAckEntries)}
	s.src, err = etcd.New(etcd.WithClient(st.Client), etcd.WithLogger(cfg.Logger), etcd.WithHeartbeat(cfg.Heartbeat), etcd.WithStoreID(st.ID))
	if err != nil {
		return nil, errors.Join(fmt.Errorf("server: %w", err), st.Close())
	}
	s.ns, err = store.NewNamespaces(store.NamespacesConfig{Client: st.Client, Logger: cfg.Logger, MaxTxnOps: st.MaxTxnOps,
		Embedded: st.Kind != store.KindExternal})
	if err != nil {
		return nil, errors.Join(fmt.Errorf("server: %w", err), s.src.Close(), st.Close())
	}
	// A store written by a server older than the index of namespaces
	// gets its entries before the API answers.
	if n, err := s.ns.BackfillIndex(ctx); err != nil {
		return nil, errors.Join(fmt.Errorf("server: %w", err), s.ns.Close(), s.src.Close(), st.Close())
	} else if n > 0 {
		cfg.Logger.Info("server: the index of namespaces backfilled", "namespaces", n)
	}
	s.tokens, err = tokens.Open(ctx, st.Client, tokens.Config{Logger: cfg.Logger, UseInterval: cfg.TokenUseInterval})
	if err != nil {
		return nil, errors.Join(fmt.Errorf("server: %w", err), s.ns.Close(), s.src.Close(), st.Close())
	}
	// One authentication for the data plane and the control API: the
	// store's tokens.
	toks := access.FromAuthenticator(s.tokens.Table(), "the store's tokens")
	// One count of a peer's wrong tokens, on both planes.
	authLimit := authlimit.New(authlimit.Config{})
	cc := watchcache.DefaultConfig()
	cc.Logger = cfg.Logger
	cc.Heartbeat = cfg.Heartbeat
	cc.MaxNamespaces = cfg.MaxNamespaces
	cc.Backfill = backfill(s.src, st.Client, cfg.Logger)
	cc.Confirm = newConfirmer(st.Client).confirm
	cc.StoreID = st.ID
	cc.Tokens = toks
	cc.AuthLimit = authLimit
	if cfg.MeterProvider != nil {
		cc.Meter, cc.MetricPrefix = cfg.MeterProvider.Meter(control.MeterScope), "holdfast.server"
	}
	s.cache, err = watchcache.New(origin{s.src, s.acks}, cc)
	if err != nil {
		s.tokens.Close()
		return nil, errors.Join(fmt.Errorf("server: %w", err), s.ns.Close(), s.src.Close(), st.Close())
	}
	s.control, err = control.New(control.Config{
		Source:              s.src,
		Namespaces:          s.ns,
		Logger:              cfg.Logger,
		MaxPublishBytes:     cfg.MaxPublishBytes,
		Acks:                s.acks,
		Presence:            s.cache.Presence(),
		Dropped:             s.cache.Dropped,
		Tokens:              toks,
		AuthLimit:           authLimit,
		TokenStore:          s.tokens,
		AuditRetention:      cfg.AuditRetention,
		AuditRetentionBytes: cfg.AuditRetentionBytes,
		Revision:            s.revision,
		Streams:             s.streams,
		Liveness:            2 * cfg.Heartbeat,
		Gates:               cfg.Gates,
		MeterProvider:       cfg.MeterProvider,
		Compacted: func() {
			if s.noSpace != nil {
				s.noSpace.compacted()
			}
		},
	})
	if err != nil {
		return nil, errors.Join(fmt.Errorf("server: %w", err), s.Close())
	}
	rollouts := s.control.Rollouts()
	s.leader = startLeader(st.Client, cfg.Logger, watchUnaudited(st.Client, cfg.Logger),
		defragment(st.Client, cfg.Logger, cmp.Or(cfg.DefragInterval, DefaultDefragInterval), cmp.Or(cfg.DefragMinFree, DefaultDefragMinFree)),
		func(ctx context.Context, leading clientv3.Cmp) error { return rollouts.Run(ctx, leading) })
	s.noSpace = startNoSpaceWatch(st.Client, cfg.Logger, cmp.Or(cfg.NoSpaceInterval, DefaultNoSpaceInterval))
	data := s.cache.Handler()
	var con http.Handler = http.NotFoundHandler()
	if cfg.Console {
		table := s.tokens.Table()
		c, err := console.New(console.Config{API: s.control, Authenticator: toks, AuthLimit: authLimit, Open: func() bool { return !table.Required() },
			Sessions: control.NewSessions(st.Client), Logger: cfg.Logger})
		if err != nil {
			return nil, errors.Join(fmt.Errorf("server: %w", err), s.Close())
		}
		con = c
	}
	s.handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case strings.HasPrefix(r.URL.Path, "/control/"):
			s.control.ServeHTTP(w, r)
		case cfg.Console && strings.HasPrefix(r.URL.Path, "/console/"):
			con.ServeHTTP(w, r)
		default:
			data.ServeHTTP(w, r)
		}
	})
	if cfg.MeterProvider != nil {
		if s.handler, err = httpmetrics.Wrap(cfg.MeterProvider.Meter(control.MeterScope), "holdfast.server.request.duration", s.handler); err == nil {
			s.metrics, err = s.registerMetrics(cfg.MeterProvider, authLimit)
		}
		if err != nil {
			return nil, errors.Join(err, s.Close())
		}
	}
	return s, nil
}

// Handler serves the data plane, the control API and (Config.Console)
// the console.
func (s *Server) Handler() http.Handler { return s.handler }

// Tokens is the store's tokens (Bootstrap, and their cache).
func (s *Server) Tokens() *tokens.Store { return s.tokens }

// StoreID is the store's id.
func (s *Server) StoreID() string { return s.store.ID }

// StoreErr reports the embedded store's failure (nil channel otherwise).
func (s *Server) StoreErr() <-chan error { return s.store.Err() }

// Publishes counts the publishes and rollbacks this server committed.
func (s *Server) Publishes() int64 { return s.control.Publishes() }

// OverdueReviews counts the emergency publishes whose retro review is
// overdue (read from the store).
func (s *Server) OverdueReviews(ctx context.Context) (int, error) {
	return s.control.OverdueReviews(ctx)
}

// revision is the revision of ns in the watch cache.
func (s *Server) revision(ns string) (int64, bool) {
	for _, n := range s.cache.Namespaces() {
		if n.Namespace == ns && n.Ready {
			return n.Revision, true
		}
	}
	return 0, false
}

// streams counts the open watches of ns in the watch cache.
func (s *Server) streams(ns string) int {
	for _, n := range s.cache.Namespaces() {
		if n.Namespace == ns {
			return n.Streams
		}
	}
	return 0
}

// Ready returns nil while the store answers a linearizable read and the
// watch cache is current: no namespace it serves has lost its watch.
// Otherwise it says why not. A namespace that a client just asked for,
// not yet loaded, does not count: one client must not take a server out of
// its balancer's rotation.
func (s *Server) Ready(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	if _, err := s.store.Client.Get(ctx, etcd.StoreIDKey); err != nil {
		return fmt.Errorf("the store does not answer: %w", err)
	}
	for _, ns := range s.cache.Namespaces() {
		if ns.Ready && ns.Unconfirmed {
			return fmt.Errorf("the watch cache is not current: namespace %q is unconfirmed for %v (%s)", ns.Namespace, ns.Age.Round(time.Millisecond), ns.LastError)
		}
	}
	return nil
}

// Status is what /statusz shows of a server.
type Status struct {
	StoreID         string   `json:"store_id"`
	StoreKind       string   `json:"store_kind"`
	StoreEndpoints  []string `json:"store_endpoints"`
	DataDir         string   `json:"data_dir,omitempty"`
	Head            int64    `json:"head"`
	CompactRevision int64    `json:"compact_revision"`
	Namespaces      int      `json:"namespaces_cached"`
	Leader          bool     `json:"leader"` // this server runs the store's single-writer jobs
	Error           string   `json:"error,omitempty"`
}

// Status reads the store's head and compaction point.
func (s *Server) Status(ctx context.Context) Status {
	st := Status{StoreID: s.store.ID, StoreKind: s.store.Kind, StoreEndpoints: s.store.Endpoints, DataDir: s.store.DataDir,
		Namespaces: len(s.cache.Namespaces()), Leader: s.leader.Leading()}
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	head, compact, err := control.Points(ctx, s.store.Client)
	if err != nil {
		st.Error = err.Error()
	}
	st.Head, st.CompactRevision = head, compact
	return st
}

// Close stops serving, closes the watch cache and the store. It is safe
// to call more than once.
func (s *Server) Close() error {
	s.closeOnce.Do(func() {
		var errs []error
		if s.metrics != nil {
			_ = s.metrics.Unregister()
		}
		if s.leader != nil {
			s.leader.close()
		}
		if s.noSpace != nil {
			s.noSpace.stop()
		}
		if s.control != nil {
			s.control.Close()
		}
		if s.cache != nil {
			errs = append(errs, s.cache.Close())
		}
		if s.tokens != nil {
			s.tokens.Close()
		}
		errs = append(errs, s.ns.Close(), s.src.Close(), s.store.Close())
		s.closeErr = errors.Join(errs...)
	})
	return s.closeErr
}
