package dataplane

import (
	"context"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/holdfast-dev/holdfast/internal/listen"
	"github.com/holdfast-dev/holdfast/internal/presence"
	"github.com/holdfast-dev/holdfast/transport"
)

// Server serves the data plane over a Backend. Create one with New; it is
// safe for concurrent use.
type Server struct {
	opts options
	log  *slog.Logger
	// be is what the data plane reads: an origin's store, or a relay's
	// follower (follow, nil for an origin).
	be     Backend
	follow Follower
	hub    *hub
	guard  *guard // checks open watchers' credentials again (WithTokens); nil: open
	// snapshotSlots bounds the snapshot bodies in flight
	// (WithMaxSnapshotsInFlight); nil: no bound.
	snapshotSlots *admission
	mux           *http.ServeMux
	caps          string // Holdfast-Capabilities
	reserved      reservedScans
	snaps         *snapCache // encoded snapshots, shared by their readers

	accepted atomic.Int64 // connections accepted

	faults Faults // WithFaults; noFaults without
	acks   acks
	// clients binds client ids to the identities they read as, with
	// WithTokens: their acks are taken from those only (ackids.go).
	clients bindings
	// presence is which clients are connected here or behind the relays
	// that report to this server (presence.go).
	presence *presence.Table
	stats    counters

	closing chan struct{} // closed by Close: requests through Handler end
	// life is canceled by Close: the context of requests through
	// Handler ends with it, so that each ends, wherever it waits.
	life    context.Context
	endLife context.CancelFunc

	mu     sync.Mutex
	addr   string // of the last Listen
	cur    *run   // nil while not listening
	closed bool
}

// run is one listening period of the server, between Listen and Stop.
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

// New returns a data plane over be, not yet listening (see Listen,
// Handler). When be is a Follower (a relay's), its streams tell their
// upstream's freshness, and be must hand its changes to Enqueue. Close it
// when done.
func New(be Backend, opts ...Option) (*Server, error) {
	o, err := newOptions(opts)
	if err != nil {
		return nil, err
	}
	s := &Server{opts: o, log: o.logger, be: be, faults: o.faults, closing: make(chan struct{})}
	s.life, s.endLife = context.WithCancel(context.Background())
	s.presence = presence.NewTable(2*o.heartbeat, 0, o.logger)
	s.acks.log, s.clients.log = o.logger, o.logger
	s.follow, _ = be.(Follower)
	var caps []string
	for _, c := range capabilities {
		if o.offers(c) {
			caps = append(caps, c)
		}
	}
	s.caps = strings.Join(caps, ",")
	if o.maxSnapshots > 0 {
		s.snapshotSlots = newAdmission(o.maxSnapshots)
	}
	s.snaps = newSnapCache(DefaultSnapshotCacheBytes)
	s.hub = newHub(be.Generation(), s.faults.Silenced)
	if o.tokens != nil {
		s.guard = newGuard(o.tokens)
	}
	if s.follow != nil {
		s.hub.follow = true
		s.hub.startBeats(beatSpread(o.heartbeat))
	}
	s.mux = s.routes()
	return s, nil
}

// Enqueue hands the backend's changes (and resets, and a follower's head
// moves and beats) to the watchers, in the order the backend made them.
// It never blocks; the backend calls it under its lock.
func (s *Server) Enqueue(items ...HubItem) { s.hub.enqueue(items...) }

// Listen serves on l until Stop or Close: HTTP/1.1 and, unless switched
// off, HTTP/2 with prior knowledge (h2c), so that a client carries its
// stream, snapshots and acks over one connection. It fails with ErrClosed
// once the server is closed, or while it listens already.
func (s *Server) Listen(l net.Listener) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed || s.cur != nil {
		return ErrClosed
	}
	s.addr = l.Addr().String()
	r := &run{served: make(chan struct{}), stopping: make(chan struct{})}
	lc := listen.Config{
		Name: "dataplane", Addr: s.addr, Plaintext: true, MaxConns: -1, Logger: s.log,
		IdleTimeout: s.opts.idleTimeout,
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
		_ = r.srv.Serve(l) // returns when Stop closes the server
	}()
	s.log.Info("dataplane: listening", "addr", s.addr, "store_id", s.StoreID())
	return nil
}

// Listening reports whether the server listens now.
func (s *Server) Listening() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.cur != nil
}

// Addr returns the address of the last Listen ("" before one).
func (s *Server) Addr() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.addr
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
		inner := req.WithContext(context.WithValue(ctx, stoppingKey{}, s.closing))
		s.mux.ServeHTTP(w, inner)
		// The route the mux chose, for a handler around this one that
		// measures by route (internal/httpmetrics).
		req.Pattern = inner.Pattern
	})
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
		s.mux.ServeHTTP(w, req) // its context has r's stopping channel (Listen's BaseContext)
	})
}

type stoppingKey struct{}

// stopping returns the channel closed when the server stops serving req.
func stopping(req *http.Request) <-chan struct{} {
	ch, _ := req.Context().Value(stoppingKey{}).(chan struct{})
	return ch
}

// Stop closes the listener and every connection at once; open streams
// end. It waits for every handler to return and every connection to be
// let go; Listen may serve again after it. Stopping a server that does
// not listen does nothing.
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
	s.log.Info("dataplane: stopped", "addr", addr)
	return err
}

// Close stops the server for good, ends the requests through Handler and
// waits for every goroutine it started. It is idempotent.
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
	s.guard.close()
	return err
}

// StoreID returns the backend's store id.
func (s *Server) StoreID() string {
	id, _, _ := s.be.Info()
	return id
}

// DropStreams ends every open watch stream and waiting long-poll now;
// their clients resume from their cursors.
func (s *Server) DropStreams() { s.hub.kill(func(*watcher) bool { return true }) }

// DropStreamsBefore ends every watcher of a generation of the backend
// before gen (a store reset or restored), before it returns, as a restart
// would.
func (s *Server) DropStreamsBefore(gen uint64) {
	s.hub.kill(func(w *watcher) bool { return w.gen < gen })
}

// Stats counts the data-plane requests since New. Each count includes
// requests that a fault refused.
type Stats struct {
	Snapshots   int64 // GET /sdk/snapshot
	NotModified int64 // of which answered 304
	Events      int64 // GET /sdk/events
	Watches     int64 // GET /sdk/watch
	Acks        int64 // POST /sdk/ack
	Streams     int64 // GET /sdk/stream
	StreamPolls int64 // GET /sdk/stream/events
	AckStreams  int64 // POST /sdk/ack/stream (each line counts in Acks)
	Cohorts     int64 // POST /sdk/ack/cohort (each counts in Acks too)
	Conns       int64 // TCP connections accepted
	Shed        int64 // snapshot requests answered 503 by WithMaxSnapshotsInFlight
}

type counters struct {
	snapshots, notModified, events, watches, acks   atomic.Int64
	streams, streamPolls, ackStreams, cohorts, shed atomic.Int64
}

// Stats returns the request counters.
func (s *Server) Stats() Stats {
	return Stats{
		Snapshots:   s.stats.snapshots.Load(),
		NotModified: s.stats.notModified.Load(),
		Events:      s.stats.events.Load(),
		Watches:     s.stats.watches.Load(),
		Acks:        s.stats.acks.Load(),
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

// Carried reports whether a watcher (a stream or a waiting long-poll)
// carries ns now.
func (s *Server) Carried(ns string) bool { return s.hub.watchers(ns) > 0 }

// Watchers counts the watchers (streams and waiting long-polls) that carry
// ns now.
func (s *Server) Watchers(ns string) int { return s.hub.watchers(ns) }

// StreamsOf counts the SSE streams (single- and multi-namespace) that
// carry ns now.
func (s *Server) StreamsOf(ns string) int {
	s.hub.mu.RLock()
	defer s.hub.mu.RUnlock()
	n := 0
	for w := range s.hub.byNS[ns] {
		if w.stream {
			n++
		}
	}
	return n
}
