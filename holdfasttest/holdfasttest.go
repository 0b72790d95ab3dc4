package holdfasttest

import (
	"errors"
	"log/slog"
	"net/http"
	"testing"
	"time"

	"github.com/holdfast-dev/holdfast/access"
	"github.com/holdfast-dev/holdfast/controlapi"
	"github.com/holdfast-dev/holdfast/internal/fakeserver"
)

// Server is a running reference server. Start one with Start or
// NewServer; it is safe for concurrent use. Its Go API is the reference
// server's (the embedded *fakeserver.Server, whose methods document it;
// the package's doc lists them), with Delete and Client. Close stops it
// for good and waits for every goroutine it started; Stop and Restart
// take it down and up again on the same address, keeping its store, as a
// crash would.
type Server struct {
	*fakeserver.Server
	client *controlapi.Client
	tr     *http.Transport
}

// Option configures a Server.
type Option = fakeserver.Option

// The types of the Server's Go API.
type (
	// Stats counts the data-plane requests a Server has served since it
	// started. Each count includes requests that an injected fault
	// refused.
	Stats = fakeserver.Stats
	// PublishOptions are what PublishWith records and checks.
	PublishOptions = fakeserver.PublishOptions
	// RollbackOptions are what RollbackWith records.
	RollbackOptions = fakeserver.RollbackOptions
	// SchemaError is the error of a publish (or rollback, or rollout)
	// whose result fails its namespace's schema: Failures lists every
	// failure, each as "<JSON pointer>: <message>". Nothing was committed.
	SchemaError = fakeserver.SchemaError
	// ConflictError is the error of a publish whose IfRevision is not
	// its namespace's revision (HTTP 409 conflict). Nothing was committed.
	ConflictError = fakeserver.ConflictError
)

// The control API's types the Go API returns too (package controlapi).
type (
	ClientState     = controlapi.ClientState
	NamespaceStatus = controlapi.NamespaceStatus
	AuditRecord     = controlapi.AuditRecord
	History         = controlapi.History
	NamespaceValues = controlapi.NamespaceValues
	Diff            = controlapi.Diff
	KeyChange       = controlapi.KeyChange
	// RolloutSpec is a staged rollout of a change to one namespace (each
	// stage a percentage of the clients the server knows for it, waiting
	// for their reports, then baking; nacks past MaxNacks revert it);
	// RolloutRecord is a rollout's state.
	RolloutSpec   = controlapi.RolloutSpec
	RolloutRecord = controlapi.RolloutRecord
)

// Kinds of commit, in AuditRecord.Kind.
const (
	KindPublish        = fakeserver.KindPublish
	KindRollback       = fakeserver.KindRollback
	KindRolloutStage   = fakeserver.KindRolloutStage
	KindRolloutPromote = fakeserver.KindRolloutPromote
	KindRolloutRevert  = fakeserver.KindRolloutRevert
)

// Limits of the audit: an actor's and a reason's length, and the records
// of one History page.
const (
	MaxActorBytes       = fakeserver.MaxActorBytes
	MaxReasonBytes      = fakeserver.MaxReasonBytes
	DefaultHistoryLimit = fakeserver.DefaultHistoryLimit
	MaxHistoryLimit     = fakeserver.MaxHistoryLimit
)

// The defaults of the Server's options.
const (
	DefaultHeartbeat       = fakeserver.DefaultHeartbeat
	DefaultWatcherBuffer   = fakeserver.DefaultWatcherBuffer
	DefaultMaxPublishBytes = fakeserver.DefaultMaxPublishBytes
	DefaultMaxWait         = fakeserver.DefaultMaxWait
)

// Errors of the Server's Go API. Test with errors.Is.
var (
	// ErrInvalid: a malformed name, key, value or revision (HTTP 400).
	ErrInvalid = fakeserver.ErrInvalid
	// ErrUnknownNamespace: the namespace was never published to nor given
	// a schema (HTTP 404).
	ErrUnknownNamespace = fakeserver.ErrUnknownNamespace
	// ErrNoRevision: the namespace has no revision at the revision or
	// time asked for: before its first, above the head or in the future
	// (HTTP 404).
	ErrNoRevision = fakeserver.ErrNoRevision
	// ErrClosed: the server was closed.
	ErrClosed = fakeserver.ErrClosed
	// ErrRolloutRunning: a rollout runs on the namespace: a second one, a
	// Publish or a Rollback is refused (HTTP 409) until it ends
	// (AbortRollout, PromoteRollout).
	ErrRolloutRunning = fakeserver.ErrRolloutRunning
	// ErrRolloutEnded: the rollout has ended; it can be neither aborted
	// nor promoted (HTTP 409).
	ErrRolloutEnded = fakeserver.ErrRolloutEnded
	// ErrUnknownRollout: no rollout of that id on the namespace (HTTP 404).
	ErrUnknownRollout = fakeserver.ErrUnknownRollout
)

// The defaults of a RolloutSpec, what it does on a stage's timeout, and
// the states of a rollout.
const (
	DefaultRolloutReportTimeout = fakeserver.DefaultRolloutReportTimeout
	DefaultRolloutStageTimeout  = fakeserver.DefaultRolloutStageTimeout

	OnTimeoutRevert = controlapi.OnTimeoutRevert
	OnTimeoutHold   = controlapi.OnTimeoutHold

	RolloutRunning  = controlapi.RolloutRunning
	RolloutPromoted = controlapi.RolloutPromoted
	RolloutReverted = controlapi.RolloutReverted
)

// Start starts a server. Close it when done.
func Start(opts ...Option) (*Server, error) {
	s, err := fakeserver.Start(opts...)
	if err != nil {
		return nil, err
	}
	tr := &http.Transport{}
	c, err := controlapi.NewClient(s.URL(), controlapi.WithHTTPClient(&http.Client{Transport: tr}))
	if err != nil {
		return nil, errors.Join(err, s.Close())
	}
	return &Server{Server: s, client: c, tr: tr}, nil
}

// Client returns a client of the server's control API, over HTTP as an
// operator's tool calls it (controlapi.NewClient(srv.URL()) is another);
// its connections close with the server.
func (s *Server) Client() *controlapi.Client { return s.client }

// Close stops the server for good and waits for every goroutine it
// started, and closes Client's connections. It is idempotent.
func (s *Server) Close() error {
	err := s.Server.Close()
	s.tr.CloseIdleConnections()
	return err
}

// Delete removes keys from namespace ns as one new revision and returns
// it: Publish with deletes only.
func (s *Server) Delete(ns string, keys ...string) (int64, error) {
	return s.Publish(ns, nil, keys...)
}

// NewServer starts a server for tb and closes it when tb ends; it fails tb
// if the server cannot start.
func NewServer(tb testing.TB, opts ...Option) *Server {
	tb.Helper()
	srv, err := Start(opts...)
	if err != nil {
		tb.Fatalf("holdfasttest: %v", err)
	}
	tb.Cleanup(func() { _ = srv.Close() })
	return srv
}

// WithAddr sets the listen address (default "127.0.0.1:0": a free loopback
// port).
func WithAddr(addr string) Option { return fakeserver.WithAddr(addr) }

// WithHeartbeat sets how often a quiet stream gets a progress event
// (default 5s). The server advertises it (the Holdfast-Heartbeat-Ms
// header), and a client that was given no idle timeout of its own derives
// it from that. Tests usually want it short.
func WithHeartbeat(d time.Duration) Option { return fakeserver.WithHeartbeat(d) }

// WithRetention keeps the last n revisions of history: every publish
// compacts the store to head-n. Zero (the default) keeps all history.
func WithRetention(n int64) Option { return fakeserver.WithRetention(n) }

// WithWatcherBuffer bounds the change sets queued for one slow watcher
// before it is disconnected (default DefaultWatcherBuffer).
func WithWatcherBuffer(n int) Option { return fakeserver.WithWatcherBuffer(n) }

// WithMaxPublishBytes bounds a publish or schema body; a larger one gets
// 413 (default DefaultMaxPublishBytes).
func WithMaxPublishBytes(n int64) Option { return fakeserver.WithMaxPublishBytes(n) }

// WithMaxWait bounds how long a long-poll is held (default DefaultMaxWait).
func WithMaxWait(d time.Duration) Option { return fakeserver.WithMaxWait(d) }

// WithBearerToken makes the data plane require "Authorization: Bearer
// token"; the control API stays open.
func WithBearerToken(token string) Option { return fakeserver.WithBearerToken(token) }

// WithTokens makes the server require a token of t on the data plane and
// the control API: a control token over a namespace to change it, a data
// token over it to read and ack it (see package access). A request
// without a valid token gets 401, one outside its token's scope 403 with
// the reason; on a multi-namespace stream a namespace outside the scope
// ends alone (an ended event, code forbidden). Without WithTokens (or
// WithBearerToken) the server is open, and says so in a warning at start.
// It excludes WithBearerToken. A token with Admin (access.Token) may set
// policies and lints, so a test can try its own (ExampleWithTokens_policy).
func WithTokens(t *access.Tokens) Option { return fakeserver.WithTokens(t) }

// WithLogger sets the server's logger (default: discard).
func WithLogger(l *slog.Logger) Option { return fakeserver.WithLogger(l) }

// WithoutCapability makes the server not offer capability name, as a
// server that predates it would, for tests of a client's fallback:
// transport.CapabilityStream (GET /sdk/stream and /sdk/stream/events
// answer 404), transport.CapabilityAckBatch (a batched POST /sdk/ack is
// refused with 400) or transport.CapabilityH2C (HTTP/1.1 only). The
// capability is then not listed in Holdfast-Capabilities. Start fails for
// an unknown name.
func WithoutCapability(name string) Option { return fakeserver.WithoutCapability(name) }
