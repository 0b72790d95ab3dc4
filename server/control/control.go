package control

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"sync/atomic"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.opentelemetry.io/otel/metric"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/holdfast-dev/holdfast/access"
	"github.com/holdfast-dev/holdfast/internal/authlimit"
	"github.com/holdfast-dev/holdfast/internal/controlplane"
	"github.com/holdfast-dev/holdfast/internal/presence"
	"github.com/holdfast-dev/holdfast/internal/rollout/controller"
	"github.com/holdfast-dev/holdfast/server/store"
	"github.com/holdfast-dev/holdfast/server/tokens"
	"github.com/holdfast-dev/holdfast/transport"
	"github.com/holdfast-dev/holdfast/transport/etcd"
)

// Defaults.
const (
	// DefaultMaxPublishBytes keeps a publish's transaction, which holds
	// its values twice (the keys and the audit record), below etcd's
	// default request limit of 1.5 MiB.
	DefaultMaxPublishBytes = controlplane.DefaultMaxPublishBytes
)

// SchemaRoot is the key prefix of the namespaces' schemas: namespace N's
// is SchemaRoot + N. Outside etcd.KeyRoot, so no namespace watch sees it.
const SchemaRoot = "/holdfast-schema/"

// Config configures a Handler.
type Config struct {
	Source *etcd.Source // the store, through holdfast's etcd source
	// Namespaces is the store's write path and audit log, over the same
	// client.
	Namespaces *store.Namespaces
	Logger     *slog.Logger
	// MaxPublishBytes bounds a publish or schema body (default
	// DefaultMaxPublishBytes).
	MaxPublishBytes int64
	// Acks is the table of the clients' acks that /control/clients reads.
	Acks *Acks
	// Presence is the data plane's presence table: the clients connected
	// to this server or to the relays behind it (nil: none known). The
	// server shares it through the store (presence.go).
	Presence *presence.Table
	// Dropped counts the entries the data plane's per-client tables
	// (its presence table's included) could not keep (nil: none), for
	// /control/clients.
	Dropped func() int64
	// AuditRetention is how many audit records each namespace keeps
	// (default DefaultAuditRetention); older ones fold into its base.
	AuditRetention int
	// AuditRetentionBytes bounds the bytes of each namespace's audit
	// records too (default DefaultAuditRetentionBytes; negative: no bound).
	AuditRetentionBytes int64
	// Tokens, when set, require a bearer token with control scope on
	// every request (as the data plane's, from the same file): a
	// namespace's endpoint needs control of it, a store-wide one (compact)
	// the pattern "*", GET /control/clients any control scope. The
	// token's name is the actor of every write; the actor a request names
	// is recorded as on_behalf_of.
	Tokens *access.Tokens
	// AuthLimit, with Tokens, slows down a peer that keeps sending tokens
	// that are not accepted (the data plane's, to count both planes').
	AuthLimit *authlimit.Limiter
	// Revision reports the revision of a namespace the server's data
	// plane serves (ok false: not followed), for status and clients.
	Revision func(ns string) (rev int64, ok bool)
	// Streams counts the data plane's open watches of a namespace, for
	// status.
	Streams func(ns string) int
	// TokenStore, when set, serves /control/tokens: token management
	// (admin scope) and the relays' copy of the records (relay scope).
	TokenStore *tokens.Store
	// ServerID names this server among the store's (its rollout reports'
	// summary); default random.
	ServerID string
	// Liveness is how long a client of a rollout's stage may be silent
	// before it holds the stage no more (default 10s: two heartbeats; at
	// least 3s, so that a report through another server arrives first).
	Liveness time.Duration
	// Gates builds a rollout's metric gates from their JSON in the
	// rollout's spec (nil: a rollout with gates is refused).
	Gates func(raw json.RawMessage) (Gate, error)
	// MeterProvider receives the control plane's metrics (nil: none).
	MeterProvider metric.MeterProvider
	// Compacted, if set, is called after a compaction through the API
	// (POST /control/compact): the server's watch of etcd's NOSPACE alarm
	// then looks at once for the space it freed.
	Compacted func()
}

// Gate is a check a rollout's stage must pass while it bakes (a metric
// gate): Check says whether it is breached, with the figures for the
// rollout's decisions and the audit.
type Gate = controller.Gate

// Handler serves the control API (package controlplane) over the store
// in etcd (store.go), and runs the server's background work: the audit
// log's trimming, the rollout reports' summaries, the follow of the
// running rollouts; holdfast server runs its rollout controller on the
// leader.
type Handler struct {
	cfg Config
	cli *clientv3.Client
	api *controlplane.Handler
	log *slog.Logger

	schemas   schemaCache
	publishes atomic.Int64
	trim      *trimmer
	rollouts  *controller.Controller
	reports   *reportSync
	active    *activeRollouts
	metrics   controlMetrics
}

// Close stops the handler's background work (the audit log's trimming,
// the rollout reports' summaries) and waits for it. Call it once the
// handler serves no more.
func (h *Handler) Close() {
	h.trim.close()
	h.reports.close()
	h.active.close()
	h.rollouts.Close()
	h.metrics.close()
}

// Publishes counts the publishes and rollbacks this handler committed.
func (h *Handler) Publishes() int64 { return h.publishes.Load() }

// New returns the control API over cfg.Source.
func New(cfg Config) (*Handler, error) {
	if cfg.Source == nil {
		return nil, errors.New("control: nil source")
	}
	if cfg.Namespaces == nil {
		return nil, errors.New("control: nil namespaces")
	}
	if cfg.Namespaces == nil {
		return nil, errors.New("control: nil namespaces")
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.AuditRetention <= 0 {
		cfg.AuditRetention = DefaultAuditRetention
	}
	if cfg.AuditRetentionBytes == 0 {
		cfg.AuditRetentionBytes = DefaultAuditRetentionBytes
	}
	if cfg.Acks == nil {
		cfg.Acks = NewAcks(DefaultMaxAckEntries)
	}
	if cfg.Revision == nil {
		cfg.Revision = func(string) (int64, bool) { return 0, false }
	}
	if cfg.Streams == nil {
		cfg.Streams = func(string) int { return 0 }
	}
	if cfg.Presence == nil {
		cfg.Presence = presence.NewTable(10*time.Second, 0, cfg.Logger)
	}
	cfg.Acks.live = cfg.Presence
	if cfg.Dropped == nil {
		cfg.Dropped = func() int64 { return 0 }
	}
	if cfg.ServerID == "" {
		var b [8]byte
		_, _ = rand.Read(b[:])
		cfg.ServerID = hex.EncodeToString(b[:])
	}
	if cfg.Liveness <= 0 {
		cfg.Liveness = 10 * time.Second
	}
	// A report through another server reaches the leader within two
	// summary intervals: a client must not count as gone before.
	cfg.Liveness = max(cfg.Liveness, 3*reportsEvery)
	h := &Handler{cfg: cfg, cli: cfg.Source.Client(), log: cfg.Logger,
		trim: newTrimmer(cfg.Namespaces, cfg.Logger, store.AuditLimit{Records: cfg.AuditRetention, Bytes: max(0, cfg.AuditRetentionBytes)})}
	h.active = newActiveRollouts(h.cli, cfg.Logger)
	h.reports = newReportSync(h.cli, cfg.Acks, cfg.Presence, h.active, cfg.ServerID, cfg.Liveness, cfg.Logger)
	h.rollouts = controller.New(controller.Config{Store: rolloutStore{h}, Reports: h.reports.reports, Partials: h.reports.partials,
		Missing: h.reports.missing, Gates: cfg.Gates,
		Liveness: cfg.Liveness, Settle: 2 * reportsEvery, Logger: cfg.Logger})
	api := controlplane.Config{Store: etcdStore{h}, Lints: lintStore{h.cli}, Changes: etcdStore{h}, MaxPublishBytes: cfg.MaxPublishBytes, MapError: mapError, Logger: cfg.Logger}
	if cfg.Tokens != nil {
		api.Authenticator, api.AuthLimit = cfg.Tokens, cfg.AuthLimit
	}
	if cfg.TokenStore != nil {
		api.Tokens = tokenStore{cfg.TokenStore}
	}
	var err error
	if h.api, err = controlplane.New(api); err != nil {
		h.Close()
		return nil, err
	}
	if cfg.MeterProvider != nil {
		if h.metrics, err = newControlMetrics(h, cfg.MeterProvider); err != nil {
			h.Close()
			return nil, err
		}
	}
	return h, nil
}

// ServeHTTP serves /control/... requests.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) { h.api.ServeHTTP(w, r) }

// mapError maps etcd's errors, and the etcd store's own, to their
// replies: a store that does not answer is a 503, one out of space a
// 507, a stored schema that does not compile the server's trouble (500).
func mapError(err error) (int, transport.ErrorBody, bool) {
	var conflict *store.ConflictError
	switch {
	case errors.Is(err, errStoredSchema):
		return http.StatusInternalServerError, transport.ErrorBody{Error: transport.CodeInternal, Message: err.Error()}, true
	case errors.As(err, &conflict):
		return http.StatusConflict, transport.ErrorBody{Error: transport.CodeConflict, Message: err.Error(), Revision: conflict.Revision}, true
	case errors.Is(err, rpctypes.ErrRequestTooLarge), errors.Is(err, rpctypes.ErrTooManyOps):
		return http.StatusRequestEntityTooLarge, transport.ErrorBody{Error: transport.CodeTooLarge, Message: err.Error()}, true
	case errors.Is(err, store.ErrInvalidArgument):
		return http.StatusBadRequest, transport.ErrorBody{Error: transport.CodeBadRequest, Message: err.Error()}, true
	case errors.Is(err, rpctypes.ErrNoSpace):
		return http.StatusInsufficientStorage, transport.ErrorBody{Error: transport.CodeUnavailable, Message: "the store is out of space (etcd's quota, its NOSPACE alarm raised): every write is refused, reads are served. " +
			"Compact the store's history (POST /control/compact): the servers then defragment it and disarm the alarm within seconds; " +
			"or raise etcd's --quota-backend-bytes, restart its members and run 'etcdctl alarm disarm'"}, true
	case storeDown(err):
		return http.StatusServiceUnavailable, transport.ErrorBody{Error: transport.CodeUnavailable, Message: storeDownMessage(err)}, true
	}
	return 0, transport.ErrorBody{}, false
}

// storeDownMessage says, in an operator's words, that the store did not
// answer, why when etcd told, and what to do; the server's log has err.
func storeDownMessage(err error) string {
	why := "no answer in time"
	switch {
	case errors.Is(err, etcd.ErrClosed), errors.Is(err, store.ErrClosed):
		return "the server is stopping: retry against another server of the store"
	case errors.Is(err, rpctypes.ErrNoLeader), errors.Is(err, rpctypes.ErrTimeoutDueToLeaderFail), errors.Is(err, rpctypes.ErrLeaderChanged):
		why = "etcd has no leader"
	case errors.Is(err, rpctypes.ErrTooManyRequests):
		why = "etcd is overloaded"
	}
	return "the store did not answer (" + why + "): etcd may have lost its quorum (a majority of its members down or cut off) " +
		"or be unreachable from this server; check its members ('etcdctl endpoint health --cluster'). " +
		"A publish refused so may or may not have committed: read the history back before publishing again"
}

// storeDown reports whether err says the store did not answer (as
// opposed to refusing the request).
func storeDown(err error) bool {
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, etcd.ErrClosed) || errors.Is(err, store.ErrClosed) || errors.Is(err, rpctypes.ErrNoLeader) ||
		errors.Is(err, rpctypes.ErrTimeout) || errors.Is(err, rpctypes.ErrTimeoutDueToLeaderFail) {
		return true
	}
	// clientv3 turns some gRPC errors into rpctypes.EtcdError, which
	// carries the code but no gRPC status: a leader change, a member
	// stopping, too many requests.
	var ee rpctypes.EtcdError
	if errors.As(err, &ee) && (ee.Code() == codes.Unavailable || ee.Code() == codes.DeadlineExceeded || ee.Code() == codes.ResourceExhausted && !errors.Is(err, rpctypes.ErrRequestTooLarge)) {
		return true
	}
	for e := err; e != nil; e = errors.Unwrap(e) {
		if st, ok := status.FromError(e); ok && (st.Code() == codes.Unavailable || st.Code() == codes.DeadlineExceeded) {
			return true
		}
	}
	return false
}
