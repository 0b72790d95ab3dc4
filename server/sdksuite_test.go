package server_test

import (
	"context"
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/holdfast-dev/holdfast/access"
	"github.com/holdfast-dev/holdfast/controlapi"
	"github.com/holdfast-dev/holdfast/internal/sdksuite"
	"github.com/holdfast-dev/holdfast/internal/testutil"
	"github.com/holdfast-dev/holdfast/server"
	"github.com/holdfast-dev/holdfast/server/store"
	"github.com/holdfast-dev/holdfast/server/tokens"
	"github.com/holdfast-dev/holdfast/transport"
)

// TestSDKAgainstHoldfastServer runs the SDK's end-to-end suite (the one
// package config runs against the reference server) against holdfast
// server over its embedded etcd, with the suite's faults in front of its
// data plane: the same clients, the same assertions.
func TestSDKAgainstHoldfastServer(t *testing.T) {
	sdksuite.Run(t, func(t testing.TB, o sdksuite.Options) sdksuite.Server {
		s := &suiteServer{t: t, addr: "127.0.0.1:0", dir: t.TempDir(), token: o.BearerToken}
		s.faults.init()
		s.open()
		s.listen()
		t.Cleanup(s.close)
		return s
	})
}

// suiteServer is holdfast server on a fixed loopback address, over an
// embedded store in a directory of its own, behind faultFront.
type suiteServer struct {
	t      testing.TB
	addr   string
	dir    string
	token  string
	faults faultFront

	mu   sync.Mutex
	srv  *server.Server
	http *http.Server
	done chan error
}

func (s *suiteServer) open() {
	s.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cfg := server.Config{Store: store.Config{Kind: store.KindEmbedded, DataDir: s.dir}, Heartbeat: sdksuite.Heartbeat}
	srv, err := server.New(ctx, cfg)
	if err != nil {
		s.t.Fatal(err)
	}
	if s.token != "" {
		// The suite's token is an admin token of the store, which then
		// requires tokens; a restart over the same data dir finds it.
		rec := access.Record{Name: "suite", Hash: access.HashSecret(s.token), Scopes: access.Scopes{Control: []string{"*"}, Data: []string{"*"}, Admin: true}, Created: time.Now()}
		if err := srv.Tokens().Create(ctx, rec); err != nil && !errors.Is(err, tokens.ErrExists) {
			s.t.Fatal(errors.Join(err, srv.Close()))
		}
	}
	s.mu.Lock()
	s.srv = srv
	s.mu.Unlock()
	s.faults.next.Store(srv.Handler())
}

func (s *suiteServer) listen() {
	s.t.Helper()
	var l net.Listener
	testutil.EventuallyNil(s.t, 10*time.Second, func() (err error) {
		l, err = net.Listen("tcp", s.addr) // the last run's address may be held a moment
		return err
	}, "listening on %s", s.addr)
	var protocols http.Protocols
	protocols.SetHTTP1(true)
	protocols.SetUnencryptedHTTP2(true)
	hs := &http.Server{Handler: &s.faults, Protocols: &protocols, ReadHeaderTimeout: 10 * time.Second}
	done := make(chan error, 1)
	go func() { done <- hs.Serve(l) }()
	s.mu.Lock()
	s.addr, s.http, s.done = l.Addr().String(), hs, done
	s.mu.Unlock()
}

// Stop closes the listener and every connection; the server and its store
// stay, so that the suite can publish meanwhile, as the reference server's
// Go API can.
func (s *suiteServer) Stop() error {
	s.mu.Lock()
	hs, done := s.http, s.done
	s.http = nil
	s.mu.Unlock()
	if hs == nil {
		return nil
	}
	s.faults.setBlackhole(false) // a held request must not hold Close
	_ = hs.Close()
	if err := <-done; !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// Restart is a restart of the server over the same store: a new watch
// cache, which knows nothing of what the clients saw.
func (s *suiteServer) Restart() error {
	if err := s.Stop(); err != nil {
		return err
	}
	if err := s.server().Close(); err != nil {
		return err
	}
	s.open()
	s.listen()
	return nil
}

func (s *suiteServer) close() {
	if err := s.Stop(); err != nil {
		s.t.Error(err)
	}
	s.mu.Lock()
	srv := s.srv
	s.srv = nil
	s.mu.Unlock()
	if srv != nil {
		if err := srv.Close(); err != nil {
			s.t.Error(err)
		}
	}
}

// ResetStore starts the server again over a new, empty data directory: a
// new store with a new id, on the same address.
func (s *suiteServer) ResetStore() string {
	s.close()
	s.dir = s.t.TempDir()
	s.open()
	s.listen()
	return s.server().Status(context.Background()).StoreID
}

func (s *suiteServer) server() *server.Server {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.srv
}

func (s *suiteServer) Target() sdksuite.Target {
	s.mu.Lock()
	defer s.mu.Unlock()
	return sdksuite.Endpoint("http://" + s.addr)
}

func (s *suiteServer) Publish(ns string, puts map[string]any, deletes ...string) (int64, error) {
	req := controlapi.PublishRequest{Puts: make(map[string]json.RawMessage, len(puts)), Deletes: deletes, Actor: "suite"}
	for k, v := range puts {
		data, err := json.Marshal(v)
		if err != nil {
			return 0, err
		}
		req.Puts[k] = data
	}
	c, err := s.control()
	if err != nil {
		return 0, err
	}
	return c.Publish(context.Background(), ns, req)
}

func (s *suiteServer) Compact(rev int64) (int64, error) {
	c, err := s.control()
	if err != nil {
		return 0, err
	}
	return c.Compact(context.Background(), rev)
}

// control returns a client of the control API that calls it in process,
// past the faults and the listener, as the reference server's Go API
// does.
func (s *suiteServer) control() (*controlapi.Client, error) {
	return controlapi.NewClient("http://in-process", controlapi.WithToken(s.token),
		controlapi.WithHTTPClient(&http.Client{Transport: inProcess{s.server().Handler()}}))
}

// inProcess is a RoundTripper that serves each request with a handler.
type inProcess struct{ h http.Handler }

func (p inProcess) RoundTrip(req *http.Request) (*http.Response, error) {
	rec := httptest.NewRecorder()
	p.h.ServeHTTP(rec, req)
	return rec.Result(), nil
}

func (s *suiteServer) DropStreams()         { s.faults.drop() }
func (s *suiteServer) SetBlackhole(on bool) { s.faults.setBlackhole(on) }
func (s *suiteServer) FailNext(n, status int, retryAfter time.Duration) {
	s.faults.failNext(n, status, retryAfter)
}
func (s *suiteServer) Stats() sdksuite.Stats { return s.faults.stats() }
func (s *suiteServer) OpenStreams() int      { return int(s.faults.open.Load()) }

// faultFront stands in front of a data plane and injects the suite's
// faults into it, as the reference server does into its own: it counts
// requests, refuses the next ones, ends the open ones, and black-holes.
type faultFront struct {
	next atomic.Value // http.Handler

	snapshots, events, watches, streams, streamPolls atomic.Int64
	open                                             atomic.Int64 // watch streams in flight

	mu         sync.Mutex
	fail       int
	failStatus int
	failAfter  time.Duration
	inflight   map[*context.CancelFunc]struct{}

	// quiet is held (read) by every write and (write) by setBlackhole, so
	// that once SetBlackhole(true) returns, no write is under way.
	quiet sync.RWMutex
	hole  chan struct{} // non-nil while black-holed; closed to heal
}

func (f *faultFront) init() { f.inflight = make(map[*context.CancelFunc]struct{}) }

func (f *faultFront) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	next := f.next.Load().(http.Handler)
	if !strings.HasPrefix(r.URL.Path, "/sdk/") {
		next.ServeHTTP(w, r)
		return
	}
	stream := false
	switch r.URL.Path {
	case "/sdk/snapshot":
		f.snapshots.Add(1)
	case "/sdk/events":
		f.events.Add(1)
	case "/sdk/watch":
		f.watches.Add(1)
		stream = true
	case "/sdk/stream":
		f.streams.Add(1)
		stream = true
	case "/sdk/stream/events":
		f.streamPolls.Add(1)
	}
	if stream {
		f.open.Add(1)
		defer f.open.Add(-1)
	}
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	f.mu.Lock()
	f.inflight[&cancel] = struct{}{}
	refuse, status, after := f.fail > 0, f.failStatus, f.failAfter
	if refuse {
		f.fail--
	}
	f.mu.Unlock()
	defer func() { f.mu.Lock(); delete(f.inflight, &cancel); f.mu.Unlock() }()
	r = r.WithContext(ctx)
	fw := &faultWriter{ResponseWriter: w, f: f, ctx: ctx}
	if refuse {
		if fw.speak() != nil {
			return
		}
		defer f.quiet.RUnlock()
		w.Header().Set("Retry-After", strconv.Itoa(int((after+time.Second/2)/time.Second)))
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		_ = json.NewEncoder(w).Encode(transport.ErrorBody{Error: transport.CodeUnavailable, Message: "injected fault"})
		return
	}
	if fw.speak() != nil {
		return
	}
	f.quiet.RUnlock()
	next.ServeHTTP(fw, r)
}

func (f *faultFront) failNext(n, status int, after time.Duration) {
	f.mu.Lock()
	f.fail, f.failStatus, f.failAfter = n, status, after
	f.mu.Unlock()
}

// drop ends every data-plane request in flight: streams end and clients
// resume from their cursors.
func (f *faultFront) drop() {
	f.mu.Lock()
	defer f.mu.Unlock()
	for cancel := range f.inflight {
		(*cancel)()
	}
}

func (f *faultFront) setBlackhole(on bool) {
	f.quiet.Lock()
	defer f.quiet.Unlock()
	switch {
	case on && f.hole == nil:
		f.hole = make(chan struct{})
	case !on && f.hole != nil:
		close(f.hole)
		f.hole = nil
	}
}

func (f *faultFront) stats() sdksuite.Stats {
	return sdksuite.Stats{Snapshots: f.snapshots.Load(), Events: f.events.Load(), Watches: f.watches.Load(),
		Streams: f.streams.Load(), StreamPolls: f.streamPolls.Load()}
}

// faultWriter holds every write while the front is black-holed.
type faultWriter struct {
	http.ResponseWriter
	f   *faultFront
	ctx context.Context
}

// speak returns holding quiet (read) once the front is not black-holed,
// or an error, holding nothing, once the request ends first.
func (w *faultWriter) speak() error {
	for {
		w.f.quiet.RLock()
		hole := w.f.hole
		if hole == nil {
			return nil
		}
		w.f.quiet.RUnlock()
		select {
		case <-hole:
		case <-w.ctx.Done():
			return w.ctx.Err()
		}
	}
}

func (w *faultWriter) Write(p []byte) (int, error) {
	if err := w.speak(); err != nil {
		return 0, err
	}
	defer w.f.quiet.RUnlock()
	return w.ResponseWriter.Write(p)
}

func (w *faultWriter) WriteHeader(status int) {
	if w.speak() != nil {
		return
	}
	defer w.f.quiet.RUnlock()
	w.ResponseWriter.WriteHeader(status)
}

func (w *faultWriter) FlushError() error {
	if err := w.speak(); err != nil {
		return err
	}
	defer w.f.quiet.RUnlock()
	return http.NewResponseController(w.ResponseWriter).Flush()
}

func (w *faultWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }
