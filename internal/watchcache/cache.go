package watchcache

import (
	"context"
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
	"go.opentelemetry.io/otel/metric"

	"github.com/holdfast-dev/holdfast/internal/acks"
	"github.com/holdfast-dev/holdfast/internal/cachedir"
	"github.com/holdfast-dev/holdfast/internal/dataplane"
	"github.com/holdfast-dev/holdfast/internal/presence"
	"github.com/holdfast-dev/holdfast/internal/rollout"
	"github.com/holdfast-dev/holdfast/internal/snapshot"
	"github.com/holdfast-dev/holdfast/internal/streammux"
	"github.com/holdfast-dev/holdfast/internal/syncer"
	"github.com/holdfast-dev/holdfast/internal/wire"
	"github.com/holdfast-dev/holdfast/transport"
)

// Cache follows an upstream and serves its data plane. Create one with
// New; it is safe for concurrent use.
type Cache struct {
	cfg  Config
	log  *slog.Logger
	src  transport.Source
	ctx  context.Context
	stop context.CancelFunc
	mux  *streammux.Mux // nil when the upstream has no multi-namespace watch

	follower *follower
	srv      *dataplane.Server
	acks     *acks.Queue
	heard    atomic.Bool // the upstream answered once

	mu     sync.Mutex
	nss    map[string]*followed
	absent map[string]time.Time // namespaces the upstream has not: until when (flood.go)
	closed bool
	// probing counts the followed namespaces with no data yet; probes
	// those asked for since probeSecond (c.mu) (flood.go).
	probing     atomic.Int64
	probes      int
	probeSecond time.Time
	wg          sync.WaitGroup // syncers, janitor, forwarder

	closeOnce sync.Once
	closeErr  error
	metrics   metric.Registration // nil without Config.Meter
}

// followed is one namespace the cache follows.
type followed struct {
	name   string
	pinned bool // Config.Namespaces: never lingers out
	cancel context.CancelFunc
	done   chan struct{}
	// leaving: the janitor is dropping it (c.mu); it is followed again
	// only once the drop is done.
	leaving bool
	// lastErr is the syncer's last failure, for Namespaces.
	lastErr atomic.Pointer[string]
	// staged: the last good holds a staged rollout (its acks go promptly).
	staged atomic.Bool
	// probing: followed, no data of it yet (counted in Relay.probing).
	probing atomic.Bool
	// Its syncer's goroutine only (sink):
	applied  *snapshot.Snapshot // the last good, for its file
	savedAt  time.Time          // when the last file was submitted
	resentAt time.Time          // when its clients' reports were last told again (Config.KeepReports)
}

// hold makes snap the last good (its syncer's goroutine, or before it).
func (f *followed) hold(snap *snapshot.Snapshot) {
	f.applied = snap
	_, staged := snap.Get(rollout.Key)
	f.staged.Store(staged)
}

// NamespaceStatus is what a cache knows of one namespace it follows.
type NamespaceStatus struct {
	Namespace string
	StoreID   string
	Revision  int64
	Cursor    int64
	// Ready: the cache has data of it to serve.
	Ready bool
	// Age is how long ago the upstream last confirmed the data;
	// Unconfirmed says it is not confirming it now.
	Age         time.Duration
	Unconfirmed bool
	// Changes counts the change sets in the cache's window for clients
	// that resume.
	Changes int
	// Streams counts the downstream watches (streams and waiting
	// long-polls) carrying it now.
	Streams   int
	LastError string
}

// New returns a cache following upstream. When upstream is a
// transport.StreamSource its one multi-namespace stream carries every
// namespace; acks go upstream when it is a transport.Acker (coalesced,
// and batched when it is a transport.BatchAcker). It loads the cache
// last good (Config.LastGood) before it dials.
func New(upstream transport.Source, cfg Config) (*Cache, error) {
	if upstream == nil {
		return nil, errors.New("relay: nil upstream")
	}
	if err := cfg.check(); err != nil {
		return nil, err
	}
	ctx, stop := context.WithCancel(context.Background())
	c := &Cache{cfg: cfg, log: cfg.Logger, src: upstream, ctx: ctx, stop: stop, nss: make(map[string]*followed), absent: make(map[string]time.Time)}
	if ss, ok := upstream.(transport.StreamSource); ok {
		c.mux = streammux.New(ctx, ss, c.log)
	}
	c.follower = newFollower(cfg.History, cfg.HistoryBytes, c.want)
	if cfg.StoreID != "" {
		c.follower.SeedStoreID(cfg.StoreID)
	}
	if cfg.Confirm != nil {
		c.follower.SetConfirmer(cfg.Confirm)
	}
	if cfg.Backfill != nil {
		c.follower.SetBackfill(cfg.Backfill)
	}
	if a, ok := upstream.(transport.Acker); ok {
		c.acks = acks.New(a, c.log, cfg.ID)
		c.acks.SetMaxPending(cfg.MaxPendingAcks)
		if cfg.KeepReports {
			c.acks.Keep()
		}
	}
	srvOpts := []dataplane.Option{
		dataplane.WithHeartbeat(cfg.Heartbeat),
		dataplane.WithLogger(c.log),
		dataplane.WithAckSink(c.forward),
		dataplane.WithMaxSnapshotsInFlight(cfg.MaxSnapshotsInFlight, cfg.RetryAfterWindow),
		dataplane.WithIdleTimeout(cfg.IdleTimeout),
	}
	if cfg.Tokens != nil {
		srvOpts = append(srvOpts, dataplane.WithTokens(cfg.Tokens))
		if cfg.AuthLimit != nil {
			srvOpts = append(srvOpts, dataplane.WithAuthFailureLimit(cfg.AuthLimit))
		}
		c.log.Info("relay: access control on", "tokens", cfg.Tokens.Names())
	} else {
		c.log.Warn("relay: no tokens configured: every client may read every namespace the relay serves")
	}
	var err error
	if c.srv, err = dataplane.New(c.follower, srvOpts...); err != nil {
		stop()
		return nil, fmt.Errorf("relay: %w", err)
	}
	c.follower.serve(c.srv)
	// Outcomes the ack queue drops go upstream as lost, in the presence
	// reports: a rollout of their namespace holds, knowing them missing.
	c.acks.OnDrop(func(ns string) { c.srv.Presence().NoteLost(wire.LostAcks, ns, 1) })
	if cfg.LastGood != nil {
		if err := c.openLastGood(); err != nil {
			stop()
			_ = c.srv.Close()
			return nil, err
		}
	}
	c.acks.Start(ctx, c.backoff())
	if up, ok := upstream.(wire.PresenceReporter); ok {
		// Which clients are connected here goes upstream as changes,
		// apart from their acks: a keepalive every heartbeat tells the
		// upstream that the relay still hears it.
		rep := presence.NewReporter(c.srv.Presence(), up, cfg.ID, cfg.Heartbeat, c.log)
		c.wg.Add(1)
		go func() { defer c.wg.Done(); rep.Run(ctx) }()
	}
	c.wg.Add(1)
	go func() { defer c.wg.Done(); c.janitor(ctx) }()
	if len(cfg.Namespaces) == 0 {
		c.wg.Add(1)
		go func() { defer c.wg.Done(); c.probeUpstream(ctx) }()
	}
	for _, ns := range cfg.Namespaces {
		if err := c.follow(ns, true); err != nil {
			_ = c.Close()
			return nil, err
		}
	}
	if cfg.Meter != nil {
		if c.metrics, err = c.register(); err != nil {
			_ = c.Close()
			return nil, err
		}
	}
	// What the cache holds is followed, so that it is confirmed (or
	// updated) as soon as the upstream answers; what the relay may not
	// follow (its allow-list, its limit) it does not serve either: a file
	// served with no syncer behind it would never change again.
	for _, ns := range c.follower.Followed() {
		err := c.want(ns)
		if err != nil {
			c.follower.Drop(ns)
			c.log.Warn("relay: not serving a namespace of its cache", "ns", ns, "err", err)
		}
	}
	return c, nil
}

// openLastGood serves every namespace that Config.LastGood holds
// (unconfirmed, with its age) until the upstream speaks.
func (c *Cache) openLastGood() error {
	return c.cfg.LastGood.Open(func(rec *cachedir.Record) {
		c.follower.Load(rec.Namespace, rec.StoreID, rec.Revision, rec.Cursor, values(rec.Snapshot), rec.ConfirmedAt)
		c.log.Info("relay: serving from its last-good file until the upstream confirms it", "ns", rec.Namespace,
			"revision", rec.Revision, "age", time.Since(rec.ConfirmedAt).Round(time.Millisecond))
	})
}

// values is a snapshot's content as the follower keeps it.
func values(s *snapshot.Snapshot) map[string]json.RawMessage { return maps.Collect(s.RawAll()) }

// want is the follower's: start following ns for a downstream request, or
// refuse it.
func (c *Cache) want(ns string) error {
	if !c.allowed(ns) {
		return &dataplane.RefusedError{Namespace: ns, Status: http.StatusForbidden, Code: transport.CodeForbidden,
			Message: "not in the relay's allow-list"}
	}
	return c.follow(ns, false)
}

func (c *Cache) allowed(ns string) bool {
	if len(c.cfg.Allow) == 0 {
		return true
	}
	for _, p := range c.cfg.Allow {
		if ok, _ := path.Match(p, ns); ok {
			return true
		}
	}
	return false
}

// follow starts a syncer for ns unless it runs already.
func (c *Cache) follow(ns string, pinned bool) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return &dataplane.RefusedError{Namespace: ns, Status: http.StatusServiceUnavailable, Code: transport.CodeUnavailable, Message: "the relay is closing"}
	}
	if f := c.nss[ns]; f != nil {
		if f.leaving {
			// Dropped because the upstream has none: that is the answer,
			// not a retry (the drop may still be under way).
			if err := c.absentLocked(ns); err != nil && !pinned {
				return err
			}
			return &dataplane.RefusedError{Namespace: ns, Status: http.StatusServiceUnavailable, Code: transport.CodeUnavailable,
				Message: "the relay is letting it go; retry"}
		}
		f.pinned = f.pinned || pinned
		return nil
	}
	if err := c.absentLocked(ns); err != nil && !pinned {
		return err
	}
	if len(c.nss) >= c.cfg.MaxNamespaces {
		return &dataplane.RefusedError{Namespace: ns, Status: http.StatusTooManyRequests, Code: transport.CodeUnavailable,
			Message: fmt.Sprintf("the relay follows %d namespaces, its limit", c.cfg.MaxNamespaces)}
	}
	seed, cursor := c.seed(ns)
	if !pinned && seed == nil && !c.probeLocked() {
		return probingRefusal(ns)
	}
	ctx, cancel := context.WithCancel(c.ctx)
	f := &followed{name: ns, pinned: pinned, cancel: cancel, done: make(chan struct{})}
	c.nss[ns] = f
	c.follower.Follow(ns)
	s := syncer.New(syncer.Config{
		Namespace:    ns,
		Source:       streammux.View{Src: c.src, Mux: c.mux},
		Sink:         sink{c: c, f: f},
		Log:          c.log.With("ns", ns),
		Backoff:      c.backoff(),
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
		c.probing.Add(1)
	}
	c.wg.Add(1)
	go func() {
		defer c.wg.Done()
		defer close(f.done)
		s.Run(ctx)
	}()
	c.log.Debug("relay: following", "ns", ns)
	return nil
}

// probeNamespace is the namespace a cache with no Config.Namespaces asks its
// upstream for until it answers (probeUpstream); that it does not exist
// is the usual answer.
const probeNamespace = "holdfast-relay-readiness"

// probeUpstream asks the upstream for probeNamespace until it answers, so
// that a cache given no namespaces becomes ready once its upstream is
// reachable and takes its token, without waiting for a client: behind a
// balancer that routes only to ready relays, no client would ever come.
// Any reply but 401 and a server error is an answer (404: the namespace
// does not exist; 403: outside the relay's scope).
func (c *Cache) probeUpstream(ctx context.Context) {
	bo := backoff.NewExponentialBackOff(backoff.WithInitialInterval(200*time.Millisecond), backoff.WithMaxInterval(10*time.Second), backoff.WithMaxElapsedTime(0))
	for !c.heard.Load() {
		pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		_, err := c.src.Snapshot(pctx, transport.SnapshotRequest{Namespace: probeNamespace})
		cancel()
		if ctx.Err() != nil {
			return
		}
		var se *transport.StatusError
		if err == nil || errors.As(err, &se) && se.StatusCode < 500 && !errors.Is(err, transport.ErrUnauthorized) && !errors.Is(err, transport.ErrNotHoldfast) {
			c.heard.Store(true)
			return
		}
		c.log.Debug("relay: the upstream does not answer yet", "err", err)
		select {
		case <-ctx.Done():
			return
		case <-time.After(bo.NextBackOff()):
		}
	}
}

// backoff is the reconnect policy of the cache's loops: its syncers and
// its acks.
func (c *Cache) backoff() syncer.Backoff {
	return syncer.Backoff{Initial: 100 * time.Millisecond, Max: 10 * time.Second, Unauthorized: 30 * time.Second}
}

// forward hands downstream acks to the queue that reports them upstream
// (none when the upstream takes no acks): those of namespaces the cache
// may serve; its allow-list bounds what its clients tell the origin too.
func (c *Cache) forward(batch []transport.Ack, held bool) {
	for _, a := range batch {
		if c.allowed(a.Namespace) {
			// A downstream relay's cohort held its plain acks already:
			// they go promptly, or a chain would add up its holds.
			c.acks.Forward(a, held || c.staged(a.Namespace))
		}
	}
}

// staged reports whether a rollout runs in ns, as its data says.
func (c *Cache) staged(ns string) bool {
	c.mu.Lock()
	f := c.nss[ns]
	c.mu.Unlock()
	return f != nil && f.staged.Load()
}

// janitor stops following namespaces nobody asked for within the linger
// time, Config.Namespaces' excepted.
func (c *Cache) janitor(ctx context.Context) {
	every := max(c.cfg.Linger/4, 100*time.Millisecond)
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		for _, ns := range c.follower.Idle(c.cfg.Linger, c.srv.Carried) {
			c.mu.Lock()
			f := c.nss[ns]
			// Leave checks again, in the step that subscriptions take:
			// a request that came meanwhile keeps it.
			if f == nil || f.pinned || !c.follower.Leave(ns, c.cfg.Linger, c.srv.Carried) {
				c.mu.Unlock()
				continue
			}
			f.leaving = true // a request from now on gets 503 until the drop is done
			c.mu.Unlock()
			f.cancel()
			<-f.done
			if c.mux != nil {
				c.mux.Leave(ns)
			}
			c.mu.Lock()
			delete(c.nss, ns)
			c.follower.Drop(ns)
			c.mu.Unlock()
			c.gotData(f) // no longer probing, if it was
			c.log.Debug("relay: no longer following; no client asked for it", "ns", ns, "linger", c.cfg.Linger)
		}
	}
}

// Handler returns the cache's data plane (/sdk/...): snapshot, long-poll,
// SSE watch and stream, ack. Requests through it end when the cache
// closes.
func (c *Cache) Handler() http.Handler { return c.srv.Handler() }

// Listen serves the data plane on l (HTTP/1.1 and h2c), with
// internal/listen's header, frame, stream and write bounds, until the
// cache is closed; it fails once the cache is closed.
func (c *Cache) Listen(l net.Listener) error { return c.srv.Listen(l) }

// Done is closed when the cache starts closing.
func (c *Cache) Done() <-chan struct{} { return c.ctx.Done() }

// Ready returns nil once the cache serves data: every namespace of
// Config.Namespaces has data (from upstream or its cache), or, without any,
// once it has heard from its upstream.
func (c *Cache) Ready() error {
	st := c.follower.Status()
	if len(c.cfg.Namespaces) == 0 {
		if c.heard.Load() {
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
	for _, ns := range c.cfg.Namespaces {
		if !ready[ns] {
			return fmt.Errorf("relay: not ready: no data of namespace %q yet", ns)
		}
	}
	return nil
}

// Namespaces returns the status of every namespace followed, by name.
func (c *Cache) Namespaces() []NamespaceStatus {
	st := c.follower.Status()
	out := make([]NamespaceStatus, 0, len(st))
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, s := range st {
		ns := NamespaceStatus{Namespace: s.Namespace, StoreID: s.StoreID, Revision: s.Revision, Cursor: s.Cursor,
			Ready: s.Ready, Age: s.Age, Unconfirmed: s.Unconfirmed, Changes: s.Changes, Streams: c.srv.Watchers(s.Namespace)}
		if f := c.nss[s.Namespace]; f != nil {
			if e := f.lastErr.Load(); e != nil {
				ns.LastError = *e
			}
		}
		out = append(out, ns)
	}
	return out
}

// Close stops following, ends every downstream stream, flushes the cache
// and waits for every goroutine the cache started. Acks not yet forwarded
// are dropped (reporting is best effort). It is idempotent.
func (c *Cache) Close() error {
	c.closeOnce.Do(func() {
		if c.metrics != nil {
			_ = c.metrics.Unregister()
		}
		c.mu.Lock()
		c.closed = true
		c.mu.Unlock()
		err := c.srv.Close()
		c.stop()
		c.wg.Wait()
		if c.mux != nil {
			c.mux.Wait()
		}
		c.acks.Wait()
		if c.cfg.LastGood != nil {
			err = errors.Join(err, c.cfg.LastGood.Close())
		}
		c.closeErr = err
	})
	return c.closeErr
}

// Stats counts the requests the cache's data plane served.
func (c *Cache) Stats() dataplane.Stats { return c.srv.Stats() }

// OpenStreams is how many watch streams are open now.
func (c *Cache) OpenStreams() int { return c.srv.OpenStreams() }

// Presence is the presence table of the cache's data plane: the clients
// connected to it, and those the relays behind it report.
func (c *Cache) Presence() *presence.Table { return c.srv.Presence() }

// Dropped counts the entries the data plane's per-client tables could
// not keep (dataplane.Server.Dropped), and the clients' reports the cache
// evicted past its bound (Config.KeepReports).
func (c *Cache) Dropped() int64 {
	_, evicted := c.acks.Kept()
	return c.srv.Dropped() + evicted
}

// KeptReports is how many of its clients' reports the cache keeps to tell
// a new upstream (Config.KeepReports), and how many it evicted past its
// bound.
func (c *Cache) KeptReports() (n int, evicted int64) { return c.acks.Kept() }
