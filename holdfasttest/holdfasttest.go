// Package holdfasttest runs holdfast's reference server in-process, for the
// tests of applications that use holdfast. It is the same server the SDK's
// own tests run against, a real config plane rather than a mock: revisions,
// history, compaction, live SSE streams, schemas, acks, and faults to
// inject (refused requests, latency, dropped streams, a black hole, a store
// reset, a crash and restart on the same address).
//
//	srv := holdfasttest.NewServer(t, holdfasttest.WithHeartbeat(100*time.Millisecond))
//	srv.Publish("payments.prod", map[string]any{"retry-timeout-ms": 50})
//	c, _ := config.New(config.WithEndpoint(srv.URL()))
//	...
//	srv.Stop() // the config plane goes down: the client serves stale
//
// The server listens on 127.0.0.1 on a free port. See Server for the whole
// Go API; the same control API is served over HTTP under /control/ (see
// docs/PROTOCOL.md).
//
// Errors of the Go API: ErrInvalid (a malformed name, key, value or
// revision), ErrUnknownNamespace, ErrNoRevision (a revision or time the
// namespace never had), *transport.CompactedError (a revision below the
// compaction point), *SchemaError (a publish that fails the namespace's
// schema), *ConflictError (a publish whose IfRevision is not the
// namespace's revision), ErrClosed; of staged rollouts (StartRollout),
// ErrRolloutRunning, ErrRolloutEnded and ErrUnknownRollout.
//
// Every revision has an audit record (History): who committed it, why,
// and which keys it changed. Compaction drops values, not records, so a
// test can check what an operator did long after; ValuesAt, ValuesAtTime
// and Diff read the values still kept.
package holdfasttest

import (
	"context"
	"encoding/json"
	"errors"
	"github.com/holdfast-dev/holdfast/controlapi"
	"log/slog"
	"testing"
	"time"

	"github.com/holdfast-dev/holdfast/access"
	"github.com/holdfast-dev/holdfast/internal/fakeserver"
	"github.com/holdfast-dev/holdfast/transport"
)

// Server is a running reference server. Start one with Start or NewServer;
// it is safe for concurrent use.
type Server struct {
	s *fakeserver.Server
}

// Option configures a Server.
type Option interface {
	option() fakeserver.Option
}

type option struct{ o fakeserver.Option }

func (o option) option() fakeserver.Option { return o.o }

// Stats counts the data-plane requests a Server has served since it
// started. Each count includes requests that an injected fault refused.
type Stats struct {
	Snapshots   int64 // GET /sdk/snapshot
	NotModified int64 // of which answered 304
	Events      int64 // GET /sdk/events (long-polls)
	Watches     int64 // GET /sdk/watch (SSE streams)
	Acks        int64 // POST /sdk/ack
	Publishes   int64 // committed publishes and rollbacks
	Streams     int64 // GET /sdk/stream (multi-namespace SSE streams)
	StreamPolls int64 // GET /sdk/stream/events (multi-namespace long-polls)
	AckStreams  int64 // POST /sdk/ack/stream (each batch on it counts in Acks)
	Cohorts     int64 // POST /sdk/ack/cohort: relays' cohort reports (each counts in Acks too)
	Conns       int64 // TCP connections accepted
	Shed        int64 // snapshot requests refused 503 by a bound on snapshots in flight (relays)
}

// ClientState is what one client reported about one namespace (its acks
// and nacks). It is also the JSON of one entry of GET /control/clients.
type ClientState = controlapi.ClientState

// NamespaceStatus is a namespace's revision and how many clients reported
// it: the reply of GET /control/namespaces/{ns}/status.
type NamespaceStatus = controlapi.NamespaceStatus

// SchemaError is the error of a publish (or rollback) whose result fails
// its namespace's schema. Nothing was committed.
type SchemaError struct {
	Namespace string
	// Failures lists every failure, each as "<JSON pointer>: <message>".
	Failures []string
}

func (e *SchemaError) Error() string {
	var fe fakeserver.SchemaError
	fe.Namespace, fe.Failures = e.Namespace, e.Failures
	return fe.Error()
}

// ConflictError is the error of a publish whose IfRevision is not its
// namespace's revision (HTTP 409 conflict). Nothing was committed.
type ConflictError struct {
	Namespace string
	// Revision is the namespace's revision (0: it has none); IfRevision
	// the one the publish expected.
	Revision, IfRevision int64
}

func (e *ConflictError) Error() string {
	return (*fakeserver.ConflictError)(e).Error()
}

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

// AuditRecord is the record of one committed revision of a namespace: who
// committed it, why, and which keys it put and deleted (sorted; keys
// reserved to holdfast included). It is also the JSON of one entry of GET
// /control/namespaces/{ns}/history.
type AuditRecord = controlapi.AuditRecord

// History is a page of a namespace's audit records, newest first: the
// reply of GET /control/namespaces/{ns}/history.
type History = controlapi.History

// NamespaceValues is a namespace's content as of a revision or a time (keys
// reserved to holdfast left out): the reply of GET
// /control/namespaces/{ns}/values. Revision is the namespace's revision
// live then, CommittedAt its commit time.
type NamespaceValues = controlapi.NamespaceValues

// Diff is what changed in a namespace between two revisions (keys
// reserved to holdfast left out): the reply of GET
// /control/namespaces/{ns}/diff. From and To are the namespace's revisions
// live at the two revisions asked for.
type Diff = controlapi.Diff

// KeyChange is one key of a Diff: Old is nil for a key added, New for a
// key deleted.
type KeyChange = controlapi.KeyChange

// PublishOptions are what PublishWith records and checks.
type PublishOptions struct {
	Actor  string // at most MaxActorBytes, no control characters
	Reason string // at most MaxReasonBytes, no control characters
	// IfRevision, when not nil, commits only if the namespace's revision
	// is *IfRevision (0: it has none), else a *ConflictError: checked
	// atomically with the commit.
	IfRevision *int64
	// AbortRollout reverts the rollout running on the namespace, if any,
	// before the publish; without it, a publish during a rollout fails
	// with ErrRolloutRunning.
	AbortRollout bool
}

// RollbackOptions are what RollbackWith records.
type RollbackOptions struct {
	Actor, Reason string // as in PublishOptions
}

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

	OnTimeoutRevert = fakeserver.OnTimeoutRevert
	OnTimeoutHold   = fakeserver.OnTimeoutHold

	RolloutRunning  = fakeserver.RolloutRunning
	RolloutPromoted = fakeserver.RolloutPromoted
	RolloutReverted = fakeserver.RolloutReverted
)

// RolloutSpec is a staged rollout of a change to one namespace: each
// stage a percentage of the clients the server knows for it (those that
// reported on it), each stage waiting until every client in it has
// reported, then baking; nacks past MaxNacks revert it, and after the
// last stage the change is promoted to every client. RolloutRecord is a
// rollout's state. Both are the control API's (controlapi).
type (
	RolloutSpec   = controlapi.RolloutSpec
	RolloutRecord = controlapi.RolloutRecord
)

// Start starts a server. Close it when done.
func Start(opts ...Option) (*Server, error) {
	fo := make([]fakeserver.Option, 0, len(opts))
	for _, o := range opts {
		if o != nil {
			fo = append(fo, o.option())
		}
	}
	s, err := fakeserver.Start(fo...)
	if err != nil {
		return nil, err
	}
	return &Server{s: s}, nil
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
func WithAddr(addr string) Option { return option{fakeserver.WithAddr(addr)} }

// WithHeartbeat sets how often a quiet stream gets a progress event
// (default 5s). The server advertises it (the Holdfast-Heartbeat-Ms
// header), and a client that was given no idle timeout of its own derives
// it from that. Tests usually want it short.
func WithHeartbeat(d time.Duration) Option { return option{fakeserver.WithHeartbeat(d)} }

// WithRetention keeps the last n revisions of history: every publish
// compacts the store to head-n. Zero (the default) keeps all history.
func WithRetention(n int64) Option { return option{fakeserver.WithRetention(n)} }

// WithWatcherBuffer bounds the change sets queued for one slow watcher
// before it is disconnected (default DefaultWatcherBuffer).
func WithWatcherBuffer(n int) Option { return option{fakeserver.WithWatcherBuffer(n)} }

// WithMaxPublishBytes bounds a publish or schema body; a larger one gets
// 413 (default DefaultMaxPublishBytes).
func WithMaxPublishBytes(n int64) Option { return option{fakeserver.WithMaxPublishBytes(n)} }

// WithMaxWait bounds how long a long-poll is held (default DefaultMaxWait).
func WithMaxWait(d time.Duration) Option { return option{fakeserver.WithMaxWait(d)} }

// WithBearerToken makes the data plane require "Authorization: Bearer
// token"; the control API stays open.
func WithBearerToken(token string) Option { return option{fakeserver.WithBearerToken(token)} }

// WithTokens makes the server require a token of t on the data plane and
// the control API: a control token over a namespace to change it, a data
// token over it to read and ack it (see package access). A request
// without a valid token gets 401, one outside its token's scope 403 with
// the reason; on a multi-namespace stream a namespace outside the scope
// ends alone (an ended event, code forbidden). Without WithTokens (or
// WithBearerToken) the server is open, and says so in a warning at start.
// It excludes WithBearerToken.
func WithTokens(t *access.Tokens) Option { return option{fakeserver.WithTokens(t)} }

// WithLogger sets the server's logger (default: discard).
func WithLogger(l *slog.Logger) Option { return option{fakeserver.WithLogger(l)} }

// WithoutCapability makes the server not offer capability name, as a
// server that predates it would, for tests of a client's fallback:
// transport.CapabilityStream (GET /sdk/stream and /sdk/stream/events
// answer 404), transport.CapabilityAckBatch (a batched POST /sdk/ack is
// refused with 400) or transport.CapabilityH2C (HTTP/1.1 only). The
// capability is then not listed in Holdfast-Capabilities. Start fails for
// an unknown name.
func WithoutCapability(name string) Option { return option{fakeserver.WithoutCapability(name)} }

// schemaError gives err's *fakeserver.SchemaError or
// *fakeserver.ConflictError as this package's type.
func schemaError(err error) error {
	var fe *fakeserver.SchemaError
	if errors.As(err, &fe) {
		return &SchemaError{Namespace: fe.Namespace, Failures: fe.Failures}
	}
	var ce *fakeserver.ConflictError
	if errors.As(err, &ce) {
		return (*ConflictError)(ce)
	}
	return err
}

// URL returns the server's base URL, e.g. "http://127.0.0.1:41234", for
// config.WithEndpoint.
func (s *Server) URL() string { return s.s.URL() }

// Addr returns the address the server listens on (and listens on again
// after Restart).
func (s *Server) Addr() string { return s.s.Addr() }

// Close stops the server for good and waits for every goroutine it
// started. It is idempotent.
func (s *Server) Close() error { return s.s.Close() }

// Stop closes the listener and every connection at once, as a crash would:
// the config plane goes down. The store is kept and the Go API keeps
// working, so a test can publish while the server is down. On Linux the
// stopped server keeps its port (bound, not listening: a dial is
// refused), so that no other listener of the machine takes it before
// Restart. Stopping a stopped server does nothing.
func (s *Server) Stop() error { return s.s.Stop() }

// Restart stops the server if it is running and listens again on the same
// address, keeping the store (and its id): clients resume from their
// cursors.
func (s *Server) Restart() error { return s.s.Restart() }

// Publish commits puts and deletes to namespace ns as one new revision and
// returns it. Each put value is marshalled with encoding/json (a
// json.RawMessage is used as is). A publish that changes nothing still gets
// a revision. It fails with ErrInvalid (a bad name, key or value, a key
// reserved to holdfast, or a key both put and deleted), a *SchemaError, or
// ErrRolloutRunning while a rollout runs on ns.
func (s *Server) Publish(ns string, puts map[string]any, deletes ...string) (int64, error) {
	rev, err := s.s.Publish(ns, puts, deletes...)
	return rev, schemaError(err)
}

// PublishRaw is Publish with values given as JSON text, kept as written
// (compacted): "9007199254740993" stays that integer.
func (s *Server) PublishRaw(ns string, puts map[string]json.RawMessage, deletes []string) (int64, error) {
	rev, err := s.s.PublishRaw(ns, puts, deletes)
	return rev, schemaError(err)
}

// Delete removes keys from namespace ns as one new revision and returns
// it: Publish with deletes only.
func (s *Server) Delete(ns string, keys ...string) (int64, error) {
	return s.Publish(ns, nil, keys...)
}

// Rollback publishes namespace ns's content at revision to as a new
// revision and returns it. A revision below the compaction point gives a
// *transport.CompactedError.
func (s *Server) Rollback(ns string, to int64) (int64, error) {
	rev, err := s.s.Rollback(ns, to)
	return rev, schemaError(err)
}

// PublishWith is Publish with an actor and a reason, recorded in the
// revision's audit record, and an optional IfRevision, checked atomically
// with the commit. Besides Publish's errors it fails with ErrInvalid (an
// actor or reason too long or with control characters, a negative
// IfRevision) or a *ConflictError.
func (s *Server) PublishWith(ns string, puts map[string]any, deletes []string, opts PublishOptions) (int64, error) {
	rev, err := s.s.PublishWith(ns, puts, deletes, fakeserver.PublishOptions{Actor: opts.Actor, Reason: opts.Reason, IfRevision: opts.IfRevision, AbortRollout: opts.AbortRollout})
	return rev, schemaError(err)
}

// RollbackWith is Rollback with an actor and a reason, recorded in the
// revision's audit record (kind KindRollback, RollbackOf to).
func (s *Server) RollbackWith(ns string, to int64, opts RollbackOptions) (int64, error) {
	rev, err := s.s.RollbackWith(ns, to, fakeserver.RollbackOptions(opts))
	return rev, schemaError(err)
}

// History returns up to limit (0: DefaultHistoryLimit; at most
// MaxHistoryLimit) of namespace ns's audit records below revision before
// (0: from the newest), newest first. Records outlive compaction; a
// RestoreTo drops those above its revision, a ResetStore all. It fails
// with ErrInvalid or ErrUnknownNamespace.
func (s *Server) History(ns string, limit int, before int64) (*History, error) {
	return s.s.History(ns, limit, before)
}

// ValuesAt returns namespace ns's content live at store revision rev: that
// of its last revision at or below rev. It fails with ErrInvalid,
// ErrUnknownNamespace, ErrNoRevision (rev above the head or before ns's
// first revision) or a *transport.CompactedError (that content was
// replaced at or below the compaction point).
func (s *Server) ValuesAt(ns string, rev int64) (*NamespaceValues, error) {
	return s.s.ValuesAt(ns, rev)
}

// ValuesAtTime is ValuesAt for the last revision committed at or before t.
// A t before ns's first revision or after now is ErrNoRevision.
func (s *Server) ValuesAtTime(ns string, t time.Time) (*NamespaceValues, error) {
	return s.s.ValuesAtTime(ns, t)
}

// Diff returns the keys whose values differ between namespace ns's content
// at store revisions from and to (either may be the larger), each read as
// ValuesAt reads it, with the same errors.
func (s *Server) Diff(ns string, from, to int64) (*Diff, error) { return s.s.Diff(ns, from, to) }

// SetSchema makes every later publish to ns whose result fails the JSON
// Schema schemaJSON a *SchemaError. It creates ns if needed. An invalid
// schema gives an error wrapping ErrInvalid and changes nothing.
func (s *Server) SetSchema(ns string, schemaJSON []byte) error { return s.s.SetSchema(ns, schemaJSON) }

// Compact discards history at and below revision rev (0: the head) and
// returns the compaction point: a client whose cursor is below it
// resnapshots. Compacting below the current point does nothing.
func (s *Server) Compact(rev int64) (int64, error) { return s.s.Compact(rev) }

// CompactRevision returns the store's compaction point.
func (s *Server) CompactRevision() int64 { return s.s.CompactRevision() }

// Head returns the store's latest revision.
func (s *Server) Head() int64 { return s.s.Head() }

// StoreID returns the store's current id.
func (s *Server) StoreID() string { return s.s.StoreID() }

// Snapshot returns namespace ns at the head, as GET /sdk/snapshot would.
func (s *Server) Snapshot(ns string) (*transport.Snapshot, error) { return s.s.Snapshot(ns) }

// Status returns namespace ns's revision and what its clients reported.
func (s *Server) Status(ns string) (NamespaceStatus, error) { return s.s.Status(ns) }

// Clients returns every client's state, sorted by client id and namespace.
func (s *Server) Clients() []ClientState { return s.s.Clients() }

// Stats returns the request counters.
func (s *Server) Stats() Stats { return Stats(s.s.Stats()) }

// OpenStreams returns how many watch streams are open now, so that a test
// can wait until its client is watching.
func (s *Server) OpenStreams() int { return s.s.OpenStreams() }

// FailNext makes the next n data-plane requests (snapshot, events, watch;
// not acks) fail with status and a Retry-After of retryAfter, in whole
// seconds rounded to the nearest. n = 0 clears the fault.
func (s *Server) FailNext(n int, status int, retryAfter time.Duration) {
	s.s.FailNext(n, status, retryAfter)
}

// SetLatency delays every data-plane request by d (0: no delay).
func (s *Server) SetLatency(d time.Duration) { s.s.SetLatency(d) }

// DropStreams ends every open watch stream (and held long-poll) now.
// Clients resume from their cursors.
func (s *Server) DropStreams() { s.s.DropStreams() }

// SetBlackhole, when on, makes the data plane accept connections and
// requests and then send nothing at all, on new requests and open streams
// alike, as a dead network path would; once it returns, not a byte more is
// sent. Off heals.
func (s *Server) SetBlackhole(on bool) { s.s.SetBlackhole(on) }

// ResetStore replaces the store by an empty one with a new id (revisions
// restart at 1; schemas, acks and audit records are dropped: a new
// history) and ends every stream. It
// returns the new id. Clients resnapshot.
func (s *Server) ResetStore() string { return s.s.ResetStore() }

// RestoreTo rewinds the store to revision rev, as a restore from a backup
// taken at rev would: the same store id, every change after rev gone (and
// its audit record), and later revision numbers reused with other content.
// Every stream is cut.
// It fails, changing nothing, with ErrInvalid for rev outside 0..Head()
// and a *transport.CompactedError for rev below the compaction point.
func (s *Server) RestoreTo(rev int64) error { return s.s.RestoreTo(rev) }

// StartRollout starts a staged rollout of spec's change to namespace ns:
// its first stage is committed as a new revision (Revisions[0]) before
// it returns. It fails with ErrInvalid (a bad spec), ErrUnknownNamespace,
// a *SchemaError (the change fails ns's schema) or ErrRolloutRunning.
func (s *Server) StartRollout(ns string, spec RolloutSpec) (RolloutRecord, error) {
	rec, err := s.s.StartRollout(ns, spec)
	return RolloutRecord(rec), schemaError(err)
}

// Rollout returns the record of rollout id of namespace ns, running or
// ended, or ErrUnknownRollout.
func (s *Server) Rollout(ns, id string) (RolloutRecord, error) {
	rec, err := s.s.Rollout(ns, id)
	return RolloutRecord(rec), err
}

// Rollouts returns the records of namespace ns's rollouts, newest first.
func (s *Server) Rollouts(ns string) ([]RolloutRecord, error) {
	in, err := s.s.Rollouts(ns)
	out := make([]RolloutRecord, len(in))
	for i, r := range in {
		out[i] = RolloutRecord(r)
	}
	return out, err
}

// WaitRollout waits until rollout id of namespace ns has ended (promoted
// or reverted) and returns its record; or until ctx is done, returning
// its record then and ctx's error.
func (s *Server) WaitRollout(ctx context.Context, ns, id string) (RolloutRecord, error) {
	rec, err := s.s.WaitRollout(ctx, ns, id)
	return RolloutRecord(rec), err
}

// AbortRollout reverts the running rollout id now: one new revision
// without the staged change. It returns the ended record, or fails with
// ErrUnknownRollout or ErrRolloutEnded.
func (s *Server) AbortRollout(ns, id string) (RolloutRecord, error) {
	rec, err := s.s.AbortRollout(ns, id)
	return RolloutRecord(rec), err
}

// PromoteRollout skips the running rollout id to its promotion now: one
// new revision that makes the change the base for every client. It
// returns the ended record, or fails with ErrUnknownRollout or
// ErrRolloutEnded.
func (s *Server) PromoteRollout(ns, id string) (RolloutRecord, error) {
	rec, err := s.s.PromoteRollout(ns, id)
	return RolloutRecord(rec), err
}
