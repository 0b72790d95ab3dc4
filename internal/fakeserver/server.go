package fakeserver

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/holdfast-dev/holdfast/controlapi"
	"github.com/holdfast-dev/holdfast/internal/dataplane"
	"github.com/holdfast-dev/holdfast/internal/rollout"
	"github.com/holdfast-dev/holdfast/internal/wire"
	"github.com/holdfast-dev/holdfast/schema"
	"github.com/holdfast-dev/holdfast/transport"
)

// Server is the reference server. Start one with Start; it is safe for
// concurrent use.
type Server struct {
	opts  options
	log   *slog.Logger
	id    string // the server's, in /control/clients
	store *store // the MVCC store
	// dp serves the data plane over store, with the faults and the
	// control API.
	dp       *dataplane.Server
	faults   faults
	stats    counters
	rollouts *rollouts  // the rollout controller
	lints    lintStore  // the control API's lints
	book     changeBook // the change workflow's changes and policies

	closing chan struct{} // closed by Close: WaitRollout returns
	// life is canceled by Close: StartRollout refuses from then on.
	life    context.Context
	endLife context.CancelFunc

	mu     sync.Mutex
	addr   string // fixed by the first listen, reused by Restart
	closed bool
	port   portKeeper // the port while stopped (port.go)
}

// Start starts a server listening on WithAddr's address (default a free
// port on 127.0.0.1). Close it when done.
func Start(opts ...Option) (*Server, error) {
	o, err := newOptions(opts)
	if err != nil {
		return nil, err
	}
	st := newStore(o.retention)
	s := &Server{opts: o, log: o.logger, id: newStoreID(), store: st, addr: o.addr, closing: make(chan struct{})}
	s.life, s.endLife = context.WithCancel(context.Background())
	s.faults.init()
	control, err := s.controlRoutes()
	if err != nil {
		return nil, fmt.Errorf("fakeserver: %w", err)
	}
	s.rollouts = s.newRollouts()
	dpOpts := []dataplane.Option{
		dataplane.WithHeartbeat(o.heartbeat),
		dataplane.WithWatcherBuffer(o.watcherBuffer),
		dataplane.WithMaxWait(o.maxWait),
		dataplane.WithLogger(o.logger),
		dataplane.WithMaxSnapshotsInFlight(o.maxSnapshots, o.retryWindow),
		dataplane.WithFaults(&s.faults),
		dataplane.WithRoutes(control...),
	}
	switch {
	case o.tokens != nil:
		dpOpts = append(dpOpts, dataplane.WithTokens(o.tokens))
	case o.token != "":
		dpOpts = append(dpOpts, dataplane.WithBearerToken(o.token))
	}
	for name := range o.without {
		dpOpts = append(dpOpts, dataplane.WithoutCapability(name))
	}
	if o.ackSink != nil {
		dpOpts = append(dpOpts, dataplane.WithAckSink(o.ackSink))
	} else {
		dpOpts = append(dpOpts, dataplane.WithAckObserver(s.rollouts.observe, s.rollouts.wants))
	}
	if s.dp, err = dataplane.New(st, dpOpts...); err != nil {
		s.rollouts.close()
		return nil, fmt.Errorf("fakeserver: %w", err)
	}
	s.rollouts.present.Store(s.dp.Presence())
	st.onCommit = func(c *dataplane.Change) { s.dp.Enqueue(dataplane.HubItem{C: c, Gen: c.Gen}) }
	st.onReset = func(gen uint64) { s.dp.Enqueue(dataplane.HubItem{Gen: gen}) }
	s.logAccess()
	ln := o.listener
	if ln == nil {
		if ln, err = net.Listen("tcp", o.addr); err != nil {
			_ = s.dp.Close()
			s.rollouts.close()
			return s, fmt.Errorf("fakeserver: listen: %w", err)
		}
	}
	if err := s.listen(ln); err != nil {
		_ = s.dp.Close()
		s.rollouts.close()
		return s, err
	}
	return s, nil
}

// listen serves on ln, which keeps its port once closed.
func (s *Server) listen(ln net.Listener) error {
	if err := s.dp.Listen(&keptListener{Listener: ln, keeper: &s.port}); err != nil {
		_ = ln.Close()
		return err
	}
	s.addr = ln.Addr().String()
	return nil
}

// Handler returns the server's routes, to mount in another server; a
// request through it ends when the server closes, and one after gets 503.
func (s *Server) Handler() http.Handler { return s.dp.Handler() }

// URL returns the server's base URL, e.g. "http://127.0.0.1:41234".
func (s *Server) URL() string { return "http://" + s.Addr() }

// Addr returns the address the server listens on (and listens on again after
// Restart).
func (s *Server) Addr() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.addr
}

// Stop closes the listener and every connection at once, as a crash would;
// open streams end. The store is kept, and Go API calls keep working, so a
// test can publish while the server is down. Stop waits for every handler
// to return and every connection to be let go. On Linux the port is kept
// until Restart or Close (port.go). Stopping a stopped server does
// nothing.
func (s *Server) Stop() error { return s.dp.Stop() }

// Restart stops the server if it is running and listens again on the same
// address, keeping the store (and its id).
func (s *Server) Restart() error {
	if err := s.Stop(); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return ErrClosed
	}
	if s.dp.Listening() { // a concurrent Restart won
		return nil
	}
	ln, err := net.Listen("tcp", s.addr) // the port kept does not stop it (portkeep)
	s.port.let(false)
	if err != nil { // a kernel where the kept port did: it is let go now
		ln, err = net.Listen("tcp", s.addr)
	}
	if err != nil {
		return fmt.Errorf("fakeserver: listen: %w", err)
	}
	return s.listen(ln)
}

// RestartForgettingReports is Restart with what clients reported
// forgotten (their acks, the rollouts' reports, relays' cohorts), as a
// holdfast server that restarts loses its in-memory tables: the store and
// its running rollouts stay, and their stages hear their members again
// only as the clients, or their relays, tell them again.
func (s *Server) RestartForgettingReports() error {
	if err := s.Stop(); err != nil {
		return err
	}
	s.rollouts.reports.Reset()
	s.dp.ResetAcks()
	return s.Restart()
}

// Close stops the server for good and waits for every goroutine it started.
// It is idempotent.
func (s *Server) Close() error {
	s.mu.Lock()
	already := s.closed
	s.closed = true
	s.mu.Unlock()
	s.port.let(true)
	if !already {
		close(s.closing)
		s.endLife()
	}
	err := s.dp.Close()
	s.rollouts.close()
	s.faults.setBlackhole(false)
	return err
}

// StoreID returns the store's current id.
func (s *Server) StoreID() string {
	id, _, _ := s.store.Info()
	return id
}

// Head returns the store's latest revision.
func (s *Server) Head() int64 {
	_, head, _ := s.store.Info()
	return head
}

// CompactRevision returns the store's compaction point.
func (s *Server) CompactRevision() int64 {
	_, _, c := s.store.Info()
	return c
}

// Publish commits puts and deletes to namespace ns as one new revision and
// returns it. Each put value is marshalled with encoding/json (a
// json.RawMessage is used as is). A publish that changes nothing still gets
// a revision. It fails with ErrInvalid (bad name, key or value, a reserved
// key, or a key both put and deleted), a *SchemaError, or
// ErrRolloutRunning while a rollout runs on ns (AbortRollout first).
func (s *Server) Publish(ns string, puts map[string]any, deletes ...string) (int64, error) {
	raw, err := marshalPuts(puts)
	if err != nil {
		return 0, err
	}
	return s.PublishRaw(ns, raw, deletes)
}

// marshalPuts marshals each value of puts with encoding/json.
func marshalPuts(puts map[string]any) (map[string]json.RawMessage, error) {
	raw := make(map[string]json.RawMessage, len(puts))
	for k, v := range puts {
		b, err := json.Marshal(v)
		if err != nil {
			return nil, fmt.Errorf("%w: key %q: %v", ErrInvalid, k, err)
		}
		raw[k] = b
	}
	return raw, nil
}

// PublishRaw is Publish with values given as raw JSON.
func (s *Server) PublishRaw(ns string, puts map[string]json.RawMessage, deletes []string) (int64, error) {
	clean, dels, err := checkPublish(ns, puts, deletes)
	if err != nil {
		return 0, err
	}
	return s.commit(ns, clean, dels, PublishOptions{})
}

// commit publishes checked puts and deletes with checked opts: the one way
// a publish, over HTTP or the Go API, reaches the store. It is refused
// while a rollout runs on ns, unless opts.AbortRollout, which reverts the
// rollout first.
func (s *Server) commit(ns string, puts map[string]json.RawMessage, deletes []string, opts PublishOptions) (int64, error) {
	// A rollout key with no rollout running (a restore brought it back)
	// goes with the next publish; the delete of an absent key is dropped.
	deletes = append(slices.Clip(deletes), rollout.Key)
	var rev int64
	err := s.withoutRollout(ns, opts.AbortRollout, func() error {
		_, err := s.store.checkStaged(ns, puts, deletes)
		return err
	}, func() error {
		c, err := s.store.publishIf(ns, puts, deletes, commitMeta{Actor: opts.Actor, OnBehalfOf: opts.OnBehalfOf, Reason: opts.Reason, Kind: opts.kind, Change: opts.change}, opts.IfRevision)
		if err != nil {
			return err
		}
		rev = c.CS.Revision
		return nil
	})
	if err != nil {
		return 0, err
	}
	s.stats.publishes.Add(1)
	s.log.Debug("fakeserver: published", "ns", ns, "revision", rev)
	return rev, nil
}

// checkPublish validates a publish and returns compacted values and
// de-duplicated deletes.
func checkPublish(ns string, puts map[string]json.RawMessage, deletes []string) (map[string]json.RawMessage, []string, error) {
	if err := transport.ValidateNamespace(ns); err != nil {
		return nil, nil, fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	clean := make(map[string]json.RawMessage, len(puts))
	for k, v := range puts {
		if err := rollout.CheckKey(k); err != nil {
			return nil, nil, fmt.Errorf("%w: %w", ErrInvalid, err)
		}
		var buf bytes.Buffer // Compact refuses empty, invalid and trailing data
		if err := json.Compact(&buf, v); err != nil {
			return nil, nil, fmt.Errorf("%w: key %q: value is not one JSON value", ErrInvalid, k)
		}
		clean[k] = buf.Bytes()
	}
	var dels []string
	for _, k := range deletes {
		if err := rollout.CheckKey(k); err != nil {
			return nil, nil, fmt.Errorf("%w: %w", ErrInvalid, err)
		}
		if _, ok := clean[k]; ok {
			return nil, nil, fmt.Errorf("%w: key %q is both put and deleted", ErrInvalid, k)
		}
		if !slices.Contains(dels, k) {
			dels = append(dels, k)
		}
	}
	return clean, dels, nil
}

// Rollback publishes namespace ns's content at revision to as a new revision
// (puts of the values that differ, deletes of keys absent at to) and returns
// it; a rollout running then is not brought back (its reserved key is
// left out). A revision below the compaction point gives a
// *transport.CompactedError; a rollout running on ns, ErrRolloutRunning.
func (s *Server) Rollback(ns string, to int64) (int64, error) {
	return s.rollback(ns, to, commitMeta{}, nil)
}

// rollback is Rollback recording meta, only if ns is at revision *ifRev
// (nil: any).
func (s *Server) rollback(ns string, to int64, meta commitMeta, ifRev *int64) (int64, error) {
	if err := transport.ValidateNamespace(ns); err != nil {
		return 0, fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	var rev int64
	err := s.withoutRollout(ns, false, nil, func() error {
		c, err := s.store.rollback(ns, to, meta, ifRev)
		if err != nil {
			return err
		}
		rev = c.CS.Revision
		return nil
	})
	if err != nil {
		return 0, err
	}
	s.stats.publishes.Add(1)
	return rev, nil
}

// Compact discards history at and below revision rev (0: the head) and
// returns the compaction point. Compacting below the current point does
// nothing.
func (s *Server) Compact(rev int64) (int64, error) { return s.store.compactTo(rev) }

// SetSchema compiles schemaJSON (see package schema) and makes every later
// publish to ns that leaves its content failing it a *SchemaError. It
// creates ns if needed. An invalid schema gives an error wrapping ErrInvalid
// and changes nothing.
func (s *Server) SetSchema(ns string, schemaJSON []byte) error {
	if err := transport.ValidateNamespace(ns); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	sch, err := schema.Compile(schemaJSON)
	if err != nil {
		return fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	s.setSchema(ns, schemaJSON, sch, true)
	return nil
}

// setSchema installs sch, compiled from raw, as ns's schema; with create,
// it creates ns if needed (the Go API's SetSchema; the control API's does
// not, as holdfast server's does not).
func (s *Server) setSchema(ns string, raw []byte, sch *schema.Schema, create bool) {
	s.store.setSchema(ns, newChecker(raw, sch), create)
}

// newChecker is the checker of schema sch (raw as it was set).
func newChecker(raw []byte, sch *schema.Schema) *checker {
	return &checker{raw: slices.Clone(raw), check: func(content map[string]json.RawMessage) error {
		err := sch.ValidateValues(withoutReserved(content))
		var ve *schema.ValidationError
		if errors.As(err, &ve) {
			se := &SchemaError{}
			for _, f := range ve.Failures {
				se.Failures = append(se.Failures, f.String())
			}
			return se
		}
		return err
	}}
}

// Snapshot returns namespace ns at the head, as GET /sdk/snapshot would.
func (s *Server) Snapshot(ns string) (*transport.Snapshot, error) {
	snap, err := s.store.Snapshot(ns)
	if err != nil {
		return nil, err
	}
	values, err := wire.EncodeValues(snap.Values)
	if err != nil {
		return nil, err
	}
	return &transport.Snapshot{
		Namespace: ns, StoreID: snap.StoreID, Revision: snap.Rev, Cursor: snap.Cursor,
		CompactRevision: snap.Compact, Values: values,
	}, nil
}

// FailNext makes the next n data-plane requests (snapshot, events, watch;
// not acks, so that a test's count is predictable) fail with status and
// Retry-After: retryAfter in whole seconds, rounded to the nearest (so
// 10ms gives "Retry-After: 0", retry at once). n = 0 clears the fault.
func (s *Server) FailNext(n int, status int, retryAfter time.Duration) {
	s.faults.setFail(n, status, retryAfter)
}

// SetLatency delays every data-plane request by d (0: no delay).
func (s *Server) SetLatency(d time.Duration) { s.faults.setLatency(d) }

// DropStreams ends every open watch stream (and waiting long-poll) now.
// Clients resume from their cursors.
func (s *Server) DropStreams() { s.dp.DropStreams() }

// SetBlackhole, when on, makes the server accept connections and requests
// on the data plane and then send nothing at all: no replies, no events, no
// heartbeats, on new requests and open streams alike. Once it returns, not
// a byte more is sent (it waits for writes in flight, at most a stream's
// write timeout). Off heals: held requests are served and streams carry on
// (or end, if they fell too far behind meanwhile).
func (s *Server) SetBlackhole(on bool) { s.faults.setBlackhole(on) }

// ResetStore replaces the store by an empty one with a new id (revisions
// restart at 1; schemas, lints, acks and audit records are dropped: a new
// history) and ends every stream and held long-poll, as a restart would.
// Running rollouts end, reverted, with nothing committed. It returns the
// new id.
func (s *Server) ResetStore() string {
	id, gen := s.store.reset()
	s.rollouts.endAll("the store was reset")
	s.rollouts.reports.Reset()
	s.lints.reset()
	s.dp.ResetAcks()
	s.dp.DropStreamsBefore(gen)
	return id
}

// RestoreTo rewinds the store to revision rev, as a restore from a backup
// taken at rev would: the same store id, every change after rev gone (and
// its audit record; the namespaces' content and revisions are theirs at
// rev, namespaces first published after rev are gone, and the next publish
// is revision rev+1, reusing numbers a client may have seen with other
// content). Schemas stay; acks of revisions after rev are forgotten;
// running rollouts end, reverted, with nothing committed (content restored
// from the middle of a rollout keeps its rollout key until the next
// publish or rollback drops it). Every stream and held
// long-poll is cut, as on a restart, before it returns; a client's cursor
// past rev then gets 409 cursor_ahead (400 if it names no protocol
// version). It fails, changing nothing, with
// ErrInvalid for rev outside 0..Head() and a *transport.CompactedError for
// rev below the compaction point (that history is gone).
func (s *Server) RestoreTo(rev int64) error {
	gen, err := s.store.restore(rev)
	if err != nil {
		return err
	}
	s.rollouts.endAll(fmt.Sprintf("the store was restored to revision %d", rev))
	s.rollouts.reports.Rewind(rev)
	s.dp.RewindAcks(rev)
	s.dp.DropStreamsBefore(gen)
	s.log.Info("fakeserver: store restored", "store_id", s.StoreID(), "revision", rev)
	return nil
}

// Stats counts requests since Start. Each data-plane count includes
// requests that a fault refused.
type Stats struct {
	Snapshots   int64 // GET /sdk/snapshot
	NotModified int64 // of which answered 304
	Events      int64 // GET /sdk/events
	Watches     int64 // GET /sdk/watch
	Acks        int64 // POST /sdk/ack
	Publishes   int64 // committed publishes and rollbacks
	Streams     int64 // GET /sdk/stream
	StreamPolls int64 // GET /sdk/stream/events
	AckStreams  int64 // POST /sdk/ack/stream (each line counts in Acks)
	Cohorts     int64 // POST /sdk/ack/cohort (each counts in Acks too)
	Conns       int64 // TCP connections accepted
	Shed        int64 // snapshot requests answered 503 by WithMaxSnapshotsInFlight
}

// counters are the reference server's own; the data plane counts its
// requests.
type counters struct {
	publishes atomic.Int64
}

// Stats returns the request counters.
func (s *Server) Stats() Stats {
	d := s.dp.Stats()
	return Stats{
		Snapshots:   d.Snapshots,
		NotModified: d.NotModified,
		Events:      d.Events,
		Watches:     d.Watches,
		Acks:        d.Acks,
		Publishes:   s.stats.publishes.Load(),
		Streams:     d.Streams,
		StreamPolls: d.StreamPolls,
		AckStreams:  d.AckStreams,
		Cohorts:     d.Cohorts,
		Conns:       d.Conns,
		Shed:        d.Shed,
	}
}

// OpenStreams returns how many watch streams are open now.
func (s *Server) OpenStreams() int { return s.dp.OpenStreams() }

// faults holds the injected faults; the data plane asks them on every
// request's path (dataplane.Faults).
type faults struct {
	mu         sync.Mutex
	failCount  int
	failStatus int
	retryAfter time.Duration
	latency    time.Duration
	black      atomic.Bool
	// quiet is held (read) by every data-plane write; SetBlackhole(true)
	// takes it once, to wait for writes that began before the hole opened.
	quiet sync.RWMutex
	heal  chan struct{} // closed when the black hole heals
	// unquiet is quiet.RUnlock, made once: Speak returns it on every
	// request, and a method value made there is an allocation.
	unquiet func()
}

var _ dataplane.Faults = (*faults)(nil)

func (f *faults) init() {
	f.heal = make(chan struct{}) // before the server is shared: no lock needed
	f.unquiet = f.quiet.RUnlock
}

func (f *faults) setFail(n, status int, retryAfter time.Duration) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.failCount, f.failStatus, f.retryAfter = max(n, 0), status, retryAfter
}

// Fail consumes one injected failure, if any.
func (f *faults) Fail() (status int, retryAfter time.Duration, ok bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.failCount == 0 {
		return 0, 0, false
	}
	f.failCount--
	return f.failStatus, f.retryAfter, true
}

func (f *faults) setLatency(d time.Duration) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.latency = max(d, 0)
}

// Delay is the latency set.
func (f *faults) Delay() time.Duration {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.latency
}

func (f *faults) setBlackhole(on bool) {
	f.mu.Lock()
	if f.black.Load() == on {
		f.mu.Unlock()
		return
	}
	f.black.Store(on)
	if !on {
		close(f.heal)
		f.heal = make(chan struct{})
	}
	f.mu.Unlock()
	if on { // a barrier: writes in flight finish, later ones see the hole
		f.quiet.Lock()
		//lint:ignore SA2001 an empty critical section is the point: it waits out writes in flight
		f.quiet.Unlock()
	}
}

// Silenced reports whether the data plane is black-holed.
func (f *faults) Silenced() bool { return f.black.Load() }

// Speak returns with quiet read-locked (release: its unlock), which
// SetBlackhole(true) takes once to wait for the writes in flight, or,
// while black-holed, with the channel closed when the hole heals.
func (f *faults) Speak() (release func(), wait <-chan struct{}) {
	f.quiet.RLock()
	if ch := f.hole(); ch != nil {
		f.quiet.RUnlock()
		return nil, ch
	}
	return f.unquiet, nil
}

// hole returns a channel closed when the black hole heals, or nil when there
// is none.
func (f *faults) hole() <-chan struct{} {
	if !f.black.Load() { // the common case, taken by every watcher on every wake-up
		return nil
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if !f.black.Load() {
		return nil
	}
	return f.heal
}

// ClientState is what one client reported about one namespace.
type ClientState = controlapi.ClientState

// Clients returns every client's state with its presence (State: live,
// stale or gone; gone clients leave the list 10 minutes after they were
// last seen), sorted by client id and namespace.
func (s *Server) Clients() []ClientState { return s.dp.Clients() }

// Carried reports whether a watcher (a stream or a waiting long-poll)
// carries ns now.
func (s *Server) Carried(ns string) bool { return s.dp.Carried(ns) }

// Watchers counts the watchers (streams and waiting long-polls) that carry
// ns now.
func (s *Server) Watchers(ns string) int { return s.dp.Watchers(ns) }
