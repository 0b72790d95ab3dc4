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
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/holdfast-dev/holdfast/controlapi"
	"github.com/holdfast-dev/holdfast/internal/listen"
	"github.com/holdfast-dev/holdfast/internal/rollout"
	"github.com/holdfast-dev/holdfast/schema"
	"github.com/holdfast-dev/holdfast/transport"
)

// Server is the reference server. Start one with Start; it is safe for
// concurrent use.
type Server struct {
	opts  options
	log   *slog.Logger
	store *store // the origin's MVCC store; nil for a relay
	// be is what the data plane reads: store, or a relay's Follower
	// (follow, nil for an origin).
	be     backend
	follow *Follower
	hub    *hub
	// snapshotSlots bounds the snapshot bodies in flight
	// (WithMaxSnapshotsInFlight); nil: no bound.
	snapshotSlots chan struct{}
	mux           *http.ServeMux
	caps          string // Holdfast-Capabilities
	reserved      reservedScans

	accepted atomic.Int64 // connections accepted, for tests

	faults faults
	// unquiet is s.faults.quiet.RUnlock, made once: speak returns it on
	// every request, and a method value made there is an allocation.
	unquiet func()
	acks    acks
	stats   counters
	// rollouts is the origin's rollout controller; nil for a relay.
	rollouts *rollouts

	closing chan struct{} // closed by Close: requests through Handler end
	// life is canceled by Close: the context of requests through
	// Handler ends with it, so that each ends, wherever it waits.
	life    context.Context
	endLife context.CancelFunc

	mu     sync.Mutex
	addr   string // fixed by the first listen, reused by Restart
	cur    *run   // nil while stopped
	closed bool
}

// run is one listening period of the server, between Start/Restart and Stop.
type run struct {
	srv      server
	served   chan struct{}
	mu       sync.Mutex
	stopping chan struct{} // closed by Stop: waiting handlers return
	stopped  bool
	active   sync.WaitGroup // handlers in flight
	// conns counts connections until net/http is done with them: after a
	// reply that left a request body unread it lingers up to 500 ms
	// (closeWriteAndWait), which Close must wait for too.
	conns sync.WaitGroup
}

// Start starts a server listening on WithAddr's address (default a free
// port on 127.0.0.1). Close it when done.
func Start(opts ...Option) (*Server, error) {
	o, err := newOptions(opts)
	if err != nil {
		return nil, err
	}
	st := newStore(o.retention)
	s := newServer(o, st, nil)
	s.hub = newHub(st.gen, s.faults.blackholed)
	st.onCommit = func(c *change) { s.hub.enqueue(hubItem{c: c, gen: c.gen}) }
	st.onReset = func(gen uint64) { s.hub.enqueue(hubItem{gen: gen}) }
	s.logAccess()
	s.rollouts = newRollouts(st.gen)
	go s.rolloutLoop()
	if err := s.start(); err != nil {
		s.rollouts.close()
		return s, err
	}
	return s, nil
}

// NewFollower returns a relay's data plane over f, not yet listening
// (see Listen, Handler): the same handlers as the reference server's,
// reading f, with no control API. Acks go to WithAckSink. Close it when
// done.
func NewFollowerServer(f *Follower, opts ...Option) (*Server, error) {
	o, err := newOptions(opts)
	if err != nil {
		return nil, err
	}
	s := newServer(o, nil, f)
	f.mu.Lock()
	s.hub = newHub(f.gen, s.faults.blackholed)
	s.hub.follow = true
	s.hub.startBeats(beatSpread(o.heartbeat))
	f.out = func(items []hubItem) { s.hub.enqueue(items...) }
	f.mu.Unlock()
	s.mux = s.routes()
	return s, nil
}

// Listen serves on l until Stop or Close (Restart listens on l's address
// again).
func (s *Server) Listen(l net.Listener) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed || s.cur != nil {
		return ErrClosed
	}
	s.opts.listener = l
	return s.listen()
}

// Handler returns the server's routes, to mount in another server; a
// request through it ends when the server closes, and one after gets 503.
func (s *Server) Handler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if s.life.Err() != nil {
			writeError(w, http.StatusServiceUnavailable, transport.ErrorBody{Error: transport.CodeUnavailable, Message: "server closed"})
			return
		}
		ctx, cancel := context.WithCancel(req.Context())
		defer cancel()
		defer context.AfterFunc(s.life, cancel)()
		s.mux.ServeHTTP(w, req.WithContext(context.WithValue(ctx, stoppingKey{}, s.closing)))
	})
}

func newServer(o options, st *store, f *Follower) *Server {
	s := &Server{opts: o, log: o.logger, store: st, follow: f, addr: o.addr, closing: make(chan struct{})}
	s.unquiet = s.faults.quiet.RUnlock
	s.life, s.endLife = context.WithCancel(context.Background())
	s.be = st
	if f != nil {
		s.be = f
	}
	var caps []string
	for _, c := range capabilities {
		if o.offers(c) {
			caps = append(caps, c)
		}
	}
	s.caps = strings.Join(caps, ",")
	if o.maxSnapshots > 0 {
		s.snapshotSlots = make(chan struct{}, o.maxSnapshots)
	}
	s.faults.init()
	return s
}

// start mounts the routes and listens.
func (s *Server) start() error {
	s.mux = s.routes()
	if err := s.listen(); err != nil {
		s.hub.close()
		return err
	}
	return nil
}

func (s *Server) listen() error {
	ln := s.opts.listener
	s.opts.listener = nil // once: Restart listens on the address again
	if ln == nil {
		var err error
		if ln, err = net.Listen("tcp", s.addr); err != nil {
			return fmt.Errorf("fakeserver: listen: %w", err)
		}
	}
	s.addr = ln.Addr().String()
	r := &run{served: make(chan struct{}), stopping: make(chan struct{})}
	// HTTP/1.1 and, unless switched off, HTTP/2 with prior knowledge
	// (h2c) on the same listener: a client then carries its stream,
	// snapshots and acks over one connection.
	lc := listen.Config{
		Name: "fakeserver", Addr: s.addr, Plaintext: true, MaxConns: -1, Logger: s.log,
		// Every request's context carries r's stopping channel: set once
		// here, not copied into each request (a long-lived stream would
		// hold the copy).
		BaseContext: func(net.Listener) context.Context {
			return context.WithValue(context.Background(), stoppingKey{}, r.stopping)
		},
		ConnState: func(_ net.Conn, st http.ConnState) {
			switch st {
			case http.StateNew:
				r.conns.Add(1)
				s.accepted.Add(1)
			case http.StateClosed, http.StateHijacked:
				r.conns.Done()
			}
		},
	}
	hs := listen.NewServer(s.track(r), lc).Server
	if !s.opts.offers(transport.CapabilityH2C) {
		var p http.Protocols
		p.SetHTTP1(true)
		hs.Protocols = &p
	}
	r.srv = hs
	s.cur = r
	go func() {
		defer close(r.served)
		_ = r.srv.Serve(ln) // returns when Stop closes the server
	}()
	s.log.Info("fakeserver: listening", "addr", s.addr, "store_id", s.StoreID())
	return nil
}

// server is the run's *http.Server.
type server interface {
	Serve(net.Listener) error
	Close() error
}

// track counts the handlers of run r so that Stop can wait for them.
func (s *Server) track(r *run) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		r.mu.Lock()
		if r.stopped {
			r.mu.Unlock()
			writeError(w, http.StatusServiceUnavailable, transport.ErrorBody{Error: transport.CodeUnavailable, Message: "server stopping"})
			return
		}
		r.active.Add(1)
		r.mu.Unlock()
		defer r.active.Done()
		s.mux.ServeHTTP(w, req) // its context has r's stopping channel (listen's BaseContext)
	})
}

type stoppingKey struct{}

// stopping returns the channel closed when the server stops serving req.
func stopping(req *http.Request) <-chan struct{} {
	ch, _ := req.Context().Value(stoppingKey{}).(chan struct{})
	return ch
}

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
// to return and every connection to be let go. Stopping a stopped server
// does nothing.
func (s *Server) Stop() error {
	s.mu.Lock()
	r, addr := s.cur, s.addr
	s.cur = nil
	s.mu.Unlock()
	if r == nil {
		return nil
	}
	r.mu.Lock()
	r.stopped = true // no handler starts from now on
	r.mu.Unlock()
	s.hub.kill(func(*watcher) bool { return true })
	err := r.srv.Close()
	// Only now release held handlers: their connections are closed, so
	// nothing they might write reaches a client.
	close(r.stopping)
	r.active.Wait()
	<-r.served
	r.conns.Wait()
	s.log.Info("fakeserver: stopped", "addr", addr)
	return err
}

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
	if s.cur != nil { // a concurrent Restart won
		return nil
	}
	return s.listen()
}

// Close stops the server for good and waits for every goroutine it started.
// It is idempotent.
func (s *Server) Close() error {
	s.mu.Lock()
	already := s.closed
	s.closed = true
	s.mu.Unlock()
	err := s.Stop()
	if !already {
		close(s.closing)
		s.endLife()
	}
	s.hub.kill(func(*watcher) bool { return true }) // those of Handler
	s.hub.close()
	if s.rollouts != nil {
		s.rollouts.close()
	}
	s.faults.setBlackhole(false)
	return err
}

// StoreID returns the store's current id.
func (s *Server) StoreID() string {
	id, _, _ := s.be.info()
	return id
}

// Head returns the store's latest revision (a relay's: the cursor every
// namespace it serves is complete up to).
func (s *Server) Head() int64 {
	_, head, _ := s.be.info()
	return head
}

// CompactRevision returns the store's compaction point.
func (s *Server) CompactRevision() int64 {
	_, _, c := s.be.info()
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
	release, err := s.guardPublish(ns, opts.AbortRollout, func() error {
		_, err := s.store.checkStaged(ns, puts, deletes)
		return err
	})
	if err != nil {
		return 0, err
	}
	defer release()
	// A rollout key with no rollout running (a restore brought it back)
	// goes with the next publish; the delete of an absent key is dropped.
	deletes = append(slices.Clip(deletes), rollout.Key)
	c, err := s.store.publishIf(ns, puts, deletes, commitMeta{Actor: opts.Actor, Reason: opts.Reason}, opts.IfRevision)
	if err != nil {
		return 0, err
	}
	s.stats.publishes.Add(1)
	s.log.Debug("fakeserver: published", "ns", ns, "revision", c.cs.Revision)
	return c.cs.Revision, nil
}

// checkPublish validates a publish and returns compacted values and
// de-duplicated deletes.
func checkPublish(ns string, puts map[string]json.RawMessage, deletes []string) (map[string]json.RawMessage, []string, error) {
	if err := transport.ValidateNamespace(ns); err != nil {
		return nil, nil, fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	clean := make(map[string]json.RawMessage, len(puts))
	for k, v := range puts {
		if err := checkKey(k); err != nil {
			return nil, nil, err
		}
		var buf bytes.Buffer // Compact refuses empty, invalid and trailing data
		if err := json.Compact(&buf, v); err != nil {
			return nil, nil, fmt.Errorf("%w: key %q: value is not one JSON value", ErrInvalid, k)
		}
		clean[k] = buf.Bytes()
	}
	var dels []string
	for _, k := range deletes {
		if err := checkKey(k); err != nil {
			return nil, nil, err
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

// checkKey checks a key a publish writes: valid, and not reserved.
func checkKey(k string) error {
	if err := transport.ValidateKey(k); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	if rollout.Reserved(k) {
		return fmt.Errorf("%w: key %q is reserved to holdfast (prefix %q)", ErrInvalid, k, rollout.ReservedPrefix)
	}
	return nil
}

// Rollback publishes namespace ns's content at revision to as a new revision
// (puts of the values that differ, deletes of keys absent at to) and returns
// it; a rollout running then is not brought back (its reserved key is
// left out). A revision below the compaction point gives a
// *transport.CompactedError; a rollout running on ns, ErrRolloutRunning.
func (s *Server) Rollback(ns string, to int64) (int64, error) {
	return s.rollback(ns, to, commitMeta{})
}

// rollback is Rollback recording meta.
func (s *Server) rollback(ns string, to int64, meta commitMeta) (int64, error) {
	if err := transport.ValidateNamespace(ns); err != nil {
		return 0, fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	release, err := s.guardPublish(ns, false, nil)
	if err != nil {
		return 0, err
	}
	defer release()
	c, err := s.store.rollback(ns, to, meta)
	if err != nil {
		return 0, err
	}
	s.stats.publishes.Add(1)
	return c.cs.Revision, nil
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
	s.store.setSchema(ns, &checker{check: func(content map[string]json.RawMessage) error {
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
	}})
	return nil
}

// Snapshot returns namespace ns at the head, as GET /sdk/snapshot would.
func (s *Server) Snapshot(ns string) (*transport.Snapshot, error) {
	snap, err := s.store.snapshot(ns)
	if err != nil {
		return nil, err
	}
	values, err := transport.EncodeValues(snap.values)
	if err != nil {
		return nil, err
	}
	return &transport.Snapshot{
		Namespace: ns, StoreID: snap.storeID, Revision: snap.rev, Cursor: snap.cursor,
		CompactRevision: snap.compact, Values: values,
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
func (s *Server) DropStreams() {
	s.hub.kill(func(*watcher) bool { return true })
}

// SetBlackhole, when on, makes the server accept connections and requests
// on the data plane and then send nothing at all: no replies, no events, no
// heartbeats, on new requests and open streams alike. Once it returns, not
// a byte more is sent (it waits for writes in flight, at most a stream's
// write timeout). Off heals: held requests are served and streams carry on
// (or end, if they fell too far behind meanwhile).
func (s *Server) SetBlackhole(on bool) { s.faults.setBlackhole(on) }

// ResetStore replaces the store by an empty one with a new id (revisions
// restart at 1; schemas, acks and audit records are dropped: a new
// history) and ends every stream and held long-poll, as a restart would.
// Running rollouts end, reverted, with nothing committed. It returns the
// new id.
func (s *Server) ResetStore() string {
	id, gen := s.store.reset()
	s.rollouts.endAll(gen, "the store was reset")
	s.acks.reset()
	s.hub.kill(func(w *watcher) bool { return w.gen < gen })
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
	s.rollouts.endAll(gen, fmt.Sprintf("the store was restored to revision %d", rev))
	s.acks.rewind(rev)
	s.hub.kill(func(w *watcher) bool { return w.gen < gen })
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

type counters struct {
	snapshots, notModified, events, watches, acks, publishes atomic.Int64
	streams, streamPolls, ackStreams, cohorts, shed          atomic.Int64
}

// Stats returns the request counters.
func (s *Server) Stats() Stats {
	return Stats{
		Snapshots:   s.stats.snapshots.Load(),
		NotModified: s.stats.notModified.Load(),
		Events:      s.stats.events.Load(),
		Watches:     s.stats.watches.Load(),
		Acks:        s.stats.acks.Load(),
		Publishes:   s.stats.publishes.Load(),
		Streams:     s.stats.streams.Load(),
		StreamPolls: s.stats.streamPolls.Load(),
		AckStreams:  s.stats.ackStreams.Load(),
		Cohorts:     s.stats.cohorts.Load(),
		Conns:       s.accepted.Load(),
		Shed:        s.stats.shed.Load(),
	}
}

// OpenStreams returns how many watch streams are open now.
func (s *Server) OpenStreams() int { return s.hub.openStreams() }

// faults holds the injected faults.
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
}

func (f *faults) init() {
	f.heal = make(chan struct{}) // before the server is shared: no lock needed
}

func (f *faults) setFail(n, status int, retryAfter time.Duration) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.failCount, f.failStatus, f.retryAfter = max(n, 0), status, retryAfter
}

// takeFail consumes one injected failure, if any.
func (f *faults) takeFail() (status int, retryAfter time.Duration, ok bool) {
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

func (f *faults) getLatency() time.Duration {
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

func (f *faults) blackholed() bool { return f.black.Load() }

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

// acks records what clients applied and rejected.
type acks struct {
	mu sync.Mutex
	m  map[ackKey]*ackState
	// cohorts are the relays' cohort reports, by relay and epoch;
	// epochs lists each relay's, oldest first (cohort.go).
	cohorts map[cohortKey]*relayCohort
	epochs  map[string][]string
}

type ackKey struct{ client, ns string }

type ackState struct {
	acked, nacked int64
	nackErr       string
	at            time.Time
}

// record keeps what acks report, all under one short lock: map work
// only, the decoding done before.
func (a *acks) record(acks []transport.Ack, now time.Time) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.m == nil {
		a.m = make(map[ackKey]*ackState)
	}
	for _, ack := range acks {
		if ack.Status == transport.AckWouldReject {
			continue // the rollout's alone: the client applied nothing, rejected nothing
		}
		k := ackKey{ack.ClientID, ack.Namespace}
		st := a.m[k]
		if st == nil {
			st = &ackState{}
			a.m[k] = st
		}
		if ack.Status == transport.AckApplied {
			st.acked = ack.Revision
		} else {
			st.nacked, st.nackErr = ack.Revision, ack.Error
		}
		st.at = now
	}
}

func (a *acks) reset() {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.m, a.cohorts, a.epochs = nil, nil, nil
}

// rewind forgets what clients reported about revisions after rev.
func (a *acks) rewind(rev int64) {
	a.mu.Lock()
	defer a.mu.Unlock()
	for k, st := range a.m {
		if st.rewind(rev) {
			delete(a.m, k)
		}
	}
	a.rewindCohortsLocked(rev)
}

// rewind forgets what st says of revisions after rev; it reports whether
// that was all st said.
func (st *ackState) rewind(rev int64) (gone bool) {
	lost := st.acked > rev || st.nacked > rev
	if st.acked > rev {
		st.acked = 0
	}
	if st.nacked > rev {
		st.nacked, st.nackErr = 0, ""
	}
	return lost && st.acked == 0 && st.nacked == 0
}

// ClientState is what one client reported about one namespace.
type ClientState = controlapi.ClientState

// Clients returns every client's state, sorted by client id and namespace.
func (s *Server) Clients() []ClientState {
	s.acks.mu.Lock()
	merged := make(map[ackKey]ackState, len(s.acks.m))
	s.acks.eachLocked(func(k ackKey, st ackState) {
		if had, ok := merged[k]; ok {
			st = newer(had, st)
		}
		merged[k] = st
	})
	s.acks.mu.Unlock()
	out := make([]ClientState, 0, len(merged))
	for k, st := range merged {
		out = append(out, ClientState{
			ClientID: k.client, Namespace: k.ns, AckedRevision: st.acked,
			NackedRevision: st.nacked, NackError: st.nackErr, UpdatedAt: st.at,
		})
	}
	for i := range out {
		head, _ := s.store.nsRevision(out[i].Namespace)
		out[i].HeadRevision = head
		out[i].Behind = out[i].AckedRevision < head
		out[i].Lag = max(head-out[i].AckedRevision, 0)
	}
	slices.SortFunc(out, func(a, b ClientState) int {
		if c := strings.Compare(a.ClientID, b.ClientID); c != 0 {
			return c
		}
		return strings.Compare(a.Namespace, b.Namespace)
	})
	return out
}

// Carried reports whether a watcher (a stream or a waiting long-poll)
// carries ns now.
func (s *Server) Carried(ns string) bool { return s.hub.watchers(ns) > 0 }

// Watchers counts the watchers (streams and waiting long-polls) that carry
// ns now.
func (s *Server) Watchers(ns string) int { return s.hub.watchers(ns) }
