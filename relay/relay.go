package relay

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net"
	"net/http"
	"path"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cenkalti/backoff/v4"
	"github.com/holdfast-dev/holdfast/internal/acks"
	"github.com/holdfast-dev/holdfast/internal/cachedir"
	"github.com/holdfast-dev/holdfast/internal/dataplane"
	"github.com/holdfast-dev/holdfast/internal/listen"
	"github.com/holdfast-dev/holdfast/internal/rollout"
	"github.com/holdfast-dev/holdfast/internal/snapshot"
	"github.com/holdfast-dev/holdfast/internal/streammux"
	"github.com/holdfast-dev/holdfast/internal/syncer"
	"github.com/holdfast-dev/holdfast/transport"
)

// Relay follows an upstream and serves its data plane. Create one with
// New; it is safe for concurrent use.
type Relay struct {
	opts options
	log  *slog.Logger
	src  transport.Source
	ctx  context.Context
	stop context.CancelFunc
	mux  *streammux.Mux // nil when the upstream has no multi-namespace watch

	follower *follower
	srv      *dataplane.Server
	dir      *cachedir.Dir       // nil without WithCacheDir
	persist  *cachedir.Persister // nil without WithCacheDir
	acks     *acks.Queue
	heard    atomic.Bool // the upstream answered once

	mu     sync.Mutex
	nss    map[string]*followed
	absent map[string]time.Time // namespaces the upstream has not: until when (flood.go)
	closed bool
	// probing counts the followed namespaces with no data yet; probes
	// those asked for since probeSecond (r.mu) (flood.go).
	probing     atomic.Int64
	probes      int
	probeSecond time.Time
	wg          sync.WaitGroup // syncers, janitor, forwarder

	closeOnce sync.Once
	closeErr  error
}

// followed is one namespace the relay follows.
type followed struct {
	name   string
	pinned bool // WithNamespaces: never lingers out
	cancel context.CancelFunc
	done   chan struct{}
	// leaving: the janitor is dropping it (r.mu); it is followed again
	// only once the drop is done.
	leaving bool
	// lastErr is the syncer's last failure, for Namespaces.
	lastErr atomic.Pointer[string]
	// staged: the last good holds a staged rollout (its acks go promptly).
	staged atomic.Bool
	// probing: followed, no data of it yet (counted in Relay.probing).
	probing atomic.Bool
	// Its syncer's goroutine only (sink):
	applied *snapshot.Snapshot // the last good, for its file
	savedAt time.Time          // when the last file was submitted
}

// hold makes snap the last good (its syncer's goroutine, or before it).
func (f *followed) hold(snap *snapshot.Snapshot) {
	f.applied = snap
	_, staged := snap.Get(rollout.Key)
	f.staged.Store(staged)
}

// NamespaceStatus is what a relay knows of one namespace it follows.
type NamespaceStatus struct {
	Namespace string
	StoreID   string
	Revision  int64
	Cursor    int64
	// Ready: the relay has data of it to serve.
	Ready bool
	// Age is how long ago the upstream last confirmed the data;
	// Unconfirmed says it is not confirming it now.
	Age         time.Duration
	Unconfirmed bool
	// Changes counts the change sets in the relay's window for clients
	// that resume.
	Changes int
	// Streams counts the downstream watches (streams and waiting
	// long-polls) carrying it now.
	Streams   int
	LastError string
}

// ErrClosed is returned by Serve once the relay is closed.
var ErrClosed = errors.New("relay: closed")

// New returns a relay following upstream. When upstream is a
// transport.StreamSource its one multi-namespace stream carries every
// namespace; acks go upstream when it is a transport.Acker (coalesced,
// and batched when it is a transport.BatchAcker). It loads the cache
// directory (WithCacheDir) before it dials.
func New(upstream transport.Source, opts ...Option) (*Relay, error) {
	if upstream == nil {
		return nil, errors.New("relay: nil upstream")
	}
	o, err := newOptions(opts)
	if err != nil {
		return nil, err
	}
	ctx, stop := context.WithCancel(context.Background())
	r := &Relay{opts: o, log: o.logger, src: upstream, ctx: ctx, stop: stop, nss: make(map[string]*followed), absent: make(map[string]time.Time)}
	if ss, ok := upstream.(transport.StreamSource); ok {
		r.mux = streammux.New(ctx, ss, r.log)
	}
	r.follower = newFollower(o.history, o.historyBytes, r.want)
	if o.storeID != "" {
		r.follower.SeedStoreID(o.storeID)
	}
	if o.confirm != nil {
		r.follower.SetConfirmer(o.confirm)
	}
	if o.backfill != nil {
		r.follower.SetBackfill(o.backfill)
	}
	if a, ok := upstream.(transport.Acker); ok {
		r.acks = acks.New(a, r.log, o.id)
	}
	srvOpts := []dataplane.Option{
		dataplane.WithHeartbeat(o.heartbeat),
		dataplane.WithLogger(r.log),
		dataplane.WithAckSink(r.forward),
		dataplane.WithMaxSnapshotsInFlight(o.maxSnapshotsInFlight, o.retryAfterWindow),
		dataplane.WithIdleTimeout(o.idleTimeout),
	}
	if o.tokens != nil {
		srvOpts = append(srvOpts, dataplane.WithTokens(o.tokens))
		r.log.Info("relay: access control on", "tokens", o.tokens.Names())
	} else {
		r.log.Warn("relay: no tokens configured: every client may read every namespace the relay serves")
	}
	if r.srv, err = dataplane.New(r.follower, srvOpts...); err != nil {
		stop()
		return nil, fmt.Errorf("relay: %w", err)
	}
	r.follower.serve(r.srv)
	if o.cacheDir != "" {
		if err := r.openCache(); err != nil {
			stop()
			_ = r.srv.Close()
			return nil, err
		}
	}
	r.acks.Start(ctx, r.backoff())
	r.wg.Add(1)
	go func() { defer r.wg.Done(); r.janitor(ctx) }()
	if len(o.namespaces) == 0 {
		r.wg.Add(1)
		go func() { defer r.wg.Done(); r.probeUpstream(ctx) }()
	}
	for _, ns := range o.namespaces {
		if err := r.follow(ns, true); err != nil {
			_ = r.Close()
			return nil, err
		}
	}
	// What the cache holds is followed, so that it is confirmed (or
	// updated) as soon as the upstream answers; what the relay may not
	// follow (its allow-list, its limit) it does not serve either: a file
	// served with no syncer behind it would never change again.
	for _, ns := range r.follower.Followed() {
		err := r.want(ns)
		if err != nil {
			r.follower.Drop(ns)
			r.log.Warn("relay: not serving a namespace of its cache", "ns", ns, "err", err)
		}
	}
	return r, nil
}

func newOptions(opts []Option) (options, error) {
	o := options{
		history:              DefaultHistory,
		historyBytes:         DefaultHistoryBytes,
		heartbeat:            DefaultHeartbeat,
		linger:               DefaultLinger,
		maxNamespaces:        DefaultMaxNamespaces,
		maxSnapshotsInFlight: DefaultMaxSnapshotsInFlight,
		retryAfterWindow:     DefaultRetryAfterWindow,
	}
	for _, opt := range opts {
		if opt != nil {
			opt.apply(&o)
		}
	}
	switch {
	case o.history < 1:
		return o, errors.New("relay: history must keep at least one change set")
	case o.heartbeat <= 0:
		return o, errors.New("relay: heartbeat must be positive")
	case o.maxNamespaces < 1:
		return o, errors.New("relay: max namespaces must be at least 1")
	case o.linger < 0:
		return o, errors.New("relay: linger must not be negative")
	case o.idleTimeout < 0:
		return o, errors.New("relay: idle timeout must not be negative")
	}
	if o.maxConns == 0 {
		o.maxConns = listen.DefaultMaxConns
	}
	for _, p := range o.allow {
		if _, err := path.Match(p, ""); err != nil {
			return o, fmt.Errorf("relay: allow pattern %q: %w", p, err)
		}
	}
	for _, ns := range o.namespaces {
		if err := transport.ValidateNamespace(ns); err != nil {
			return o, fmt.Errorf("relay: %w", err)
		}
	}
	if o.logger == nil {
		o.logger = slog.New(slog.DiscardHandler)
	}
	if o.id != "" {
		if err := transport.ValidateClientID(o.id); err != nil {
			return o, fmt.Errorf("relay: WithID: %w", err)
		}
	} else {
		var b [8]byte
		_, _ = rand.Read(b[:])
		o.id = "relay-" + hex.EncodeToString(b[:])
	}
	return o, nil
}

// openCache opens the cache directory and serves every namespace it holds
// (unconfirmed, with its age) until the upstream speaks.
func (r *Relay) openCache() error {
	dir, err := cachedir.OpenDir(r.opts.cacheDir, cachedir.WithDirLogger(r.log))
	if err != nil {
		return fmt.Errorf("relay: %w", err)
	}
	names, err := dir.Namespaces()
	if err != nil {
		return fmt.Errorf("relay: %w", err)
	}
	r.dir = dir
	r.persist = cachedir.NewPersister(dir, func(rec *cachedir.Record, err error) {
		if err != nil {
			r.log.Warn("relay: last-good file not written; serving goes on", "ns", rec.Namespace, "err", err)
		}
	})
	for _, ns := range names {
		rec, err := dir.Load(ns)
		if err != nil {
			r.log.Warn("relay: last-good file not loaded", "ns", ns, "err", err)
			continue
		}
		r.follower.Load(ns, rec.StoreID, rec.Revision, rec.Cursor, values(rec.Snapshot), rec.ConfirmedAt)
		r.log.Info("relay: serving from its last-good file until the upstream confirms it", "ns", ns,
			"revision", rec.Revision, "age", time.Since(rec.ConfirmedAt).Round(time.Millisecond))
	}
	return nil
}

// values is a snapshot's content as the follower keeps it.
func values(s *snapshot.Snapshot) map[string]json.RawMessage { return maps.Collect(s.RawAll()) }

// want is the follower's: start following ns for a downstream request, or
// refuse it.
func (r *Relay) want(ns string) error {
	if !r.allowed(ns) {
		return &dataplane.RefusedError{Namespace: ns, Status: http.StatusForbidden, Code: transport.CodeForbidden,
			Message: "not in the relay's allow-list"}
	}
	return r.follow(ns, false)
}

func (r *Relay) allowed(ns string) bool {
	if len(r.opts.allow) == 0 {
		return true
	}
	for _, p := range r.opts.allow {
		if ok, _ := path.Match(p, ns); ok {
			return true
		}
	}
	return false
}

// follow starts a syncer for ns unless it runs already.
func (r *Relay) follow(ns string, pinned bool) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return &dataplane.RefusedError{Namespace: ns, Status: http.StatusServiceUnavailable, Code: transport.CodeUnavailable, Message: "the relay is closing"}
	}
	if f := r.nss[ns]; f != nil {
		if f.leaving {
			// Dropped because the upstream has none: that is the answer,
			// not a retry (the drop may still be under way).
			if err := r.absentLocked(ns); err != nil && !pinned {
				return err
			}
			return &dataplane.RefusedError{Namespace: ns, Status: http.StatusServiceUnavailable, Code: transport.CodeUnavailable,
				Message: "the relay is letting it go; retry"}
		}
		f.pinned = f.pinned || pinned
		return nil
	}
	if err := r.absentLocked(ns); err != nil && !pinned {
		return err
	}
	if len(r.nss) >= r.opts.maxNamespaces {
		return &dataplane.RefusedError{Namespace: ns, Status: http.StatusTooManyRequests, Code: transport.CodeUnavailable,
			Message: fmt.Sprintf("the relay follows %d namespaces, its limit", r.opts.maxNamespaces)}
	}
	seed, cursor := r.seed(ns)
	if !pinned && seed == nil && !r.probeLocked() {
		return probingRefusal(ns)
	}
	ctx, cancel := context.WithCancel(r.ctx)
	f := &followed{name: ns, pinned: pinned, cancel: cancel, done: make(chan struct{})}
	r.nss[ns] = f
	r.follower.Follow(ns)
	s := syncer.New(syncer.Config{
		Namespace:    ns,
		Source:       streammux.View{Src: r.src, Mux: r.mux},
		Sink:         sink{r: r, f: f},
		Log:          r.log.With("ns", ns),
		Backoff:      r.backoff(),
		FetchTimeout: 30 * time.Second,
		Backstop:     time.Hour,
	})
	if seed != nil {
		// Resume from the last-good file: a conditional snapshot, then
		// the watch from its cursor.
		f.hold(seed)
		_ = s.Seed(seed, cursor)
	} else {
		f.probing.Store(true)
		r.probing.Add(1)
	}
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		defer close(f.done)
		s.Run(ctx)
	}()
	r.log.Debug("relay: following", "ns", ns)
	return nil
}

// backoff is the reconnect policy of the relay's loops: its syncers and
// its acks.
// probeNamespace is the namespace a relay with no WithNamespaces asks its
// upstream for until it answers (probeUpstream); that it does not exist
// is the usual answer.
const probeNamespace = "holdfast-relay-readiness"

// probeUpstream asks the upstream for probeNamespace until it answers, so
// that a relay given no namespaces becomes ready once its upstream is
// reachable and takes its token, without waiting for a client: behind a
// balancer that routes only to ready relays, no client would ever come.
// Any reply but 401 and a server error is an answer (404: the namespace
// does not exist; 403: outside the relay's scope).
func (r *Relay) probeUpstream(ctx context.Context) {
	bo := backoff.NewExponentialBackOff(backoff.WithInitialInterval(200*time.Millisecond), backoff.WithMaxInterval(10*time.Second), backoff.WithMaxElapsedTime(0))
	for !r.heard.Load() {
		pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		_, err := r.src.Snapshot(pctx, transport.SnapshotRequest{Namespace: probeNamespace})
		cancel()
		if ctx.Err() != nil {
			return
		}
		var se *transport.StatusError
		if err == nil || errors.As(err, &se) && se.StatusCode < 500 && !errors.Is(err, transport.ErrUnauthorized) && !errors.Is(err, transport.ErrNotHoldfast) {
			r.heard.Store(true)
			return
		}
		r.log.Debug("relay: the upstream does not answer yet", "err", err)
		select {
		case <-ctx.Done():
			return
		case <-time.After(bo.NextBackOff()):
		}
	}
}

func (r *Relay) backoff() syncer.Backoff {
	return syncer.Backoff{Initial: 100 * time.Millisecond, Max: 10 * time.Second, Unauthorized: 30 * time.Second}
}

// forward hands downstream acks to the queue that reports them upstream
// (none when the upstream takes no acks): those of namespaces the relay
// may serve; its allow-list bounds what its clients tell the origin too.
func (r *Relay) forward(batch []transport.Ack, held bool) {
	for _, a := range batch {
		if r.allowed(a.Namespace) {
			// A downstream relay's cohort held its plain acks already:
			// they go promptly, or a chain would add up its holds.
			r.acks.Forward(a, held || r.staged(a.Namespace))
		}
	}
}

// staged reports whether a rollout runs in ns, as its data says.
func (r *Relay) staged(ns string) bool {
	r.mu.Lock()
	f := r.nss[ns]
	r.mu.Unlock()
	return f != nil && f.staged.Load()
}

// janitor stops following namespaces nobody asked for within the linger
// time, WithNamespaces' excepted.
func (r *Relay) janitor(ctx context.Context) {
	every := max(r.opts.linger/4, 100*time.Millisecond)
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		for _, ns := range r.follower.Idle(r.opts.linger, r.srv.Carried) {
			r.mu.Lock()
			f := r.nss[ns]
			// Leave checks again, in the step that subscriptions take:
			// a request that came meanwhile keeps it.
			if f == nil || f.pinned || !r.follower.Leave(ns, r.opts.linger, r.srv.Carried) {
				r.mu.Unlock()
				continue
			}
			f.leaving = true // a request from now on gets 503 until the drop is done
			r.mu.Unlock()
			f.cancel()
			<-f.done
			if r.mux != nil {
				r.mux.Leave(ns)
			}
			r.mu.Lock()
			delete(r.nss, ns)
			r.follower.Drop(ns)
			r.mu.Unlock()
			r.gotData(f) // no longer probing, if it was
			r.log.Debug("relay: no longer following; no client asked for it", "ns", ns, "linger", r.opts.linger)
		}
	}
}

// Handler returns the relay's data plane (/sdk/...): snapshot, long-poll,
// SSE watch and stream, ack. Requests through it end when the relay
// closes.
func (r *Relay) Handler() http.Handler { return r.srv.Handler() }

// Serve serves the data plane on l (HTTP/1.1 and h2c) until ctx ends or
// the relay is closed; then it closes the relay and returns nil (or
// ErrClosed if it was closed already). It serves with the defences of
// holdfast relay's listeners: at most WithMaxConns connections open (one
// past them is refused and the refusals logged), WithIdleTimeout, and
// internal/listen's header, frame, stream and write bounds. It speaks
// plaintext only: for TLS, serve Handler from an http.Server with a
// TLSConfig (HTTP/2 through ALPN), as holdfast relay does; a
// tls.Listener given to Serve would get HTTP/1.1 at best.
func (r *Relay) Serve(ctx context.Context, l net.Listener) error {
	if r.opts.maxConns > 0 {
		l = listen.Limit(l, r.opts.maxConns, true, r.log.With("listener", "relay"))
	}
	if err := r.srv.Listen(l); err != nil {
		_ = l.Close()
		return ErrClosed
	}
	select {
	case <-ctx.Done():
	case <-r.ctx.Done():
	}
	return r.Close()
}

// Ready returns nil once the relay serves data: every namespace of
// WithNamespaces has data (from upstream or its cache), or, without any,
// once it has heard from its upstream.
func (r *Relay) Ready() error {
	st := r.follower.Status()
	if len(r.opts.namespaces) == 0 {
		if r.heard.Load() {
			return nil
		}
		for _, s := range st {
			if s.Ready {
				return nil // from its cache
			}
		}
		return errors.New("relay: not ready: the upstream has not answered yet")
	}
	ready := make(map[string]bool, len(st))
	for _, s := range st {
		ready[s.Namespace] = s.Ready
	}
	for _, ns := range r.opts.namespaces {
		if !ready[ns] {
			return fmt.Errorf("relay: not ready: no data of namespace %q yet", ns)
		}
	}
	return nil
}

// Namespaces returns the status of every namespace followed, by name.
func (r *Relay) Namespaces() []NamespaceStatus {
	st := r.follower.Status()
	out := make([]NamespaceStatus, 0, len(st))
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, s := range st {
		ns := NamespaceStatus{Namespace: s.Namespace, StoreID: s.StoreID, Revision: s.Revision, Cursor: s.Cursor,
			Ready: s.Ready, Age: s.Age, Unconfirmed: s.Unconfirmed, Changes: s.Changes, Streams: r.srv.Watchers(s.Namespace)}
		if f := r.nss[s.Namespace]; f != nil {
			if e := f.lastErr.Load(); e != nil {
				ns.LastError = *e
			}
		}
		out = append(out, ns)
	}
	return out
}

// Close stops following, ends every downstream stream, flushes the cache
// and waits for every goroutine the relay started. Acks not yet forwarded
// are dropped (reporting is best effort). It is idempotent.
func (r *Relay) Close() error {
	r.closeOnce.Do(func() {
		r.mu.Lock()
		r.closed = true
		r.mu.Unlock()
		err := r.srv.Close()
		r.stop()
		r.wg.Wait()
		if r.mux != nil {
			r.mux.Wait()
		}
		r.acks.Wait()
		if r.persist != nil {
			err = errors.Join(err, r.persist.Close())
		}
		r.closeErr = err
	})
	return r.closeErr
}

// Stats counts the requests the relay served downstream.
type Stats struct {
	Snapshots   int64 // GET /sdk/snapshot
	NotModified int64 // of which answered 304
	Shed        int64 // of which answered 503 by WithMaxSnapshotsInFlight
	Events      int64 // GET /sdk/events
	Watches     int64 // GET /sdk/watch
	Streams     int64 // GET /sdk/stream
	StreamPolls int64 // GET /sdk/stream/events
	Acks        int64 // acks received (POST /sdk/ack, ack-stream lines)
	Conns       int64 // TCP connections accepted
	// OpenStreams is how many watch streams are open now.
	OpenStreams int
}

// Stats returns the relay's counters.
func (r *Relay) Stats() Stats {
	s := r.srv.Stats()
	return Stats{Snapshots: s.Snapshots, NotModified: s.NotModified, Shed: s.Shed, Events: s.Events, Watches: s.Watches,
		Streams: s.Streams, StreamPolls: s.StreamPolls, Acks: s.Acks, Conns: s.Conns, OpenStreams: r.srv.OpenStreams()}
}
