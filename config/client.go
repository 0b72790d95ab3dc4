package config

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"sync"
	"time"

	"github.com/holdfast-dev/holdfast/internal/acks"
	"github.com/holdfast-dev/holdfast/internal/cachedir"
	"github.com/holdfast-dev/holdfast/internal/instrument"
	"github.com/holdfast-dev/holdfast/internal/snapshot"
	"github.com/holdfast-dev/holdfast/internal/streammux"
	"github.com/holdfast-dev/holdfast/internal/syncer"
	"github.com/holdfast-dev/holdfast/schema"
	"github.com/holdfast-dev/holdfast/transport"
)

// Client opens namespaces from one config plane. It is safe for concurrent
// use. Close it to stop every goroutine and connection it owns.
type Client struct {
	// Read-only after New.
	opts       options
	src        transport.Source
	ownSource  io.Closer     // the HTTP or failover source, closed by Close; nil with WithSource
	dir        *cachedir.Dir // nil without WithCacheDir
	metrics    *instrument.Instruments
	tracer     *instrument.Tracer
	ctx        context.Context // cancelled by Close
	cancel     context.CancelFunc
	endpoints  transport.EndpointReporter  // the source's, for Status.Endpoint; nil when it has none
	watchModes transport.WatchModeReporter // the source's, for Status.WatchMode; nil when it has none
	mux        *streammux.Mux              // nil when the source has no multi-namespace watch
	acks       *acks.Queue                 // nil when the source cannot take acks
	persister  *cachedir.Persister         // nil without a cache directory; started with the first namespace
	rev        revision                    // the global revision (Revision)

	// Safe for concurrent use by themselves.
	wg        sync.WaitGroup // every namespace's goroutines
	closeOnce sync.Once
	persistMu sync.Mutex // guards persistOwners; taken after c.mu, and holds no other lock
	// persistOwners routes the persister's results to the open namespace
	// of that name.
	persistOwners map[string]*Namespace

	// mu guards what follows; a namespace's own mu is taken after it,
	// never before.
	mu         sync.Mutex
	namespaces map[string]*Namespace
	closing    map[string]chan struct{} // abandoned namespaces, until their goroutines exit
	closed     bool
}

// New returns a Client. It does not dial: connections are made when a
// namespace is opened. Errors name what is wrong with the options.
func New(opts ...Option) (*Client, error) {
	o := defaultOptions()
	for _, opt := range opts {
		opt.apply(&o)
	}
	if err := o.validate(); err != nil {
		return nil, err
	}
	if o.clientID == "" {
		o.clientID = defaultClientID()
	}
	c := &Client{opts: o, src: o.source, namespaces: make(map[string]*Namespace), closing: make(map[string]chan struct{})}
	if c.src == nil {
		src, err := newHTTPSource(o)
		if err != nil {
			return nil, err
		}
		c.src, c.ownSource = src, src
	} else if d, ok := c.src.(transport.ClientIDDefaulter); ok {
		d.DefaultClientID(o.clientID) // a source without an id of its own names this client
	}
	if o.cacheDir != "" {
		dir, err := cachedir.OpenDir(o.cacheDir, cachedir.WithDirLogger(o.logger))
		if err != nil {
			return nil, fmt.Errorf("config: %w", err)
		}
		c.dir = dir
	}
	metrics, err := instrument.New(o.meterProvider)
	if err != nil {
		// The API hands back working instruments along with the error.
		o.logger.Warn("config: some instruments were refused by the meter provider", "err", err)
	}
	c.metrics, c.tracer = metrics, instrument.NewTracer(o.tracerProvider)
	c.ctx, c.cancel = context.WithCancel(context.Background())
	c.endpoints, _ = c.src.(transport.EndpointReporter)
	c.watchModes, _ = c.src.(transport.WatchModeReporter)
	if ss, ok := c.src.(transport.StreamSource); ok {
		c.mux = streammux.New(c.ctx, ss, o.logger)
	}
	if a, ok := c.src.(transport.Acker); ok {
		c.acks = acks.New(a, o.logger, "")
	}
	c.rev.init()
	return c, nil
}

// newHTTPSource makes the source of WithEndpoint or WithEndpoints: the
// HTTP source of the one endpoint, or a failover source over one HTTP
// source per endpoint.
func newHTTPSource(o options) (ownedSource, error) {
	// The client's defaults first, so that the caller's options win; the
	// source's own defaults fill the rest.
	hopts := append([]transport.HTTPOption{
		transport.WithLogger(o.logger),
		transport.WithWatchMode(transport.WatchAuto),
		transport.WithClientID(o.clientID), // a server with tokens takes its acks from the identity it connected as
	}, o.httpOpts...)
	if len(o.endpoints) == 1 {
		hs, err := transport.NewHTTPSource(o.endpoints[0], hopts...)
		if err != nil {
			return nil, fmt.Errorf("config: %w", err)
		}
		return hs, nil
	}
	srcs := make([]*transport.HTTPSource, 0, len(o.endpoints))
	closeAll := func() {
		for _, s := range srcs {
			_ = s.Close()
		}
	}
	seen := make(map[string]bool, len(o.endpoints))
	for i, u := range o.endpoints {
		if seen[u] {
			closeAll()
			return nil, fmt.Errorf("config: WithEndpoints: endpoint %d of %d: %q named twice", i+1, len(o.endpoints), u)
		}
		seen[u] = true
		hs, err := transport.NewHTTPSource(u, hopts...)
		if err != nil {
			closeAll()
			return nil, fmt.Errorf("config: WithEndpoints: endpoint %d of %d: %w", i+1, len(o.endpoints), err)
		}
		srcs = append(srcs, hs)
	}
	fs, err := transport.NewFailoverSource(srcs, transport.WithFailbackAfter(o.failbackAfter))
	if err != nil {
		closeAll()
		return nil, fmt.Errorf("config: %w", err)
	}
	return fs, nil
}

// ownedSource is a source the client made and closes.
type ownedSource interface {
	transport.Source
	io.Closer
}

func defaultClientID() string {
	host, _ := os.Hostname()
	var b [4]byte
	_, _ = rand.Read(b[:])
	return fmt.Sprintf("%s-%d-%s", host, os.Getpid(), hex.EncodeToString(b[:]))
}

// ClientID is the id this client reports in acks.
func (c *Client) ClientID() string { return c.opts.clientID }

// Namespace opens the namespace name and returns once it serves data: a
// snapshot from the config plane, or (with WithCacheDir) its last good data
// from disk. Opening a namespace that is already open returns the same
// Namespace if the options are the same; other options fail with
// ErrOptionsDiffer, naming the option.
//
// If ctx ends first, Namespace returns an *OpenError that wraps both ctx's
// error and the last error seen, and stops trying. A name that is not valid
// fails at once with transport.ErrInvalidNamespace.
func (c *Client) Namespace(ctx context.Context, name string, opts ...NamespaceOption) (*Namespace, error) {
	if err := transport.ValidateNamespace(name); err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	if err := c.lockOpen(ctx, name); err != nil {
		return nil, err
	}
	n := c.namespaces[name]
	var prepared *Namespace
	if n == nil {
		// Read the last-good file and compile the schema without holding
		// c.mu: a large file must not hold up every other open and Close.
		c.mu.Unlock()
		var err error
		if prepared, err = c.prepare(name, opts); err != nil {
			return nil, err
		}
		if err := c.lockOpen(ctx, name); err != nil {
			return nil, err
		}
		if n = c.namespaces[name]; n == nil { // else another open won: drop ours
			n = prepared
			c.start(n)
			c.namespaces[name] = n
		}
	}
	if n != prepared { // open already, by someone else's options
		if err := n.opts.sameAs(opts); err != nil {
			c.mu.Unlock()
			return nil, fmt.Errorf("config: namespace %q: %w", name, err)
		}
	}
	n.mu.Lock()
	n.waiters++
	n.mu.Unlock()
	c.mu.Unlock()

	select {
	case <-n.ready:
		n.mu.Lock()
		n.waiters--
		n.mu.Unlock()
		return n, nil
	case <-n.done:
		return nil, ErrClosed
	case <-ctx.Done():
	}
	// Nobody got this namespace: unless another caller still waits for
	// it, stop it rather than retry a typo forever.
	c.mu.Lock()
	n.mu.Lock()
	n.waiters--
	ready := isClosed(n.ready) // stable while n.mu is held: serve holds it
	abandon := n.waiters == 0 && !ready
	last := n.status.LastError.Err
	n.mu.Unlock()
	if abandon {
		if c.namespaces[name] == n {
			delete(c.namespaces, name)
		}
		c.closing[name] = n.done
		n.cancel()
	}
	c.mu.Unlock()
	if ready {
		return n, nil // it became ready as ctx ended
	}
	if abandon {
		<-n.done
	}
	why := ctx.Err()
	if n.opts.failClosed {
		why = fmt.Errorf("%w within MaxStaleness %v: %w", ErrStale, n.opts.maxStaleness, why)
	}
	return nil, &OpenError{Namespace: name, Err: why, Last: last}
}

func isClosed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// lockOpen takes c.mu for opening name, once an abandoned open of the same
// name has finished closing (its metrics and file are its own until then).
// On error c.mu is not held.
func (c *Client) lockOpen(ctx context.Context, name string) error {
	c.mu.Lock()
	for {
		if c.closed {
			c.mu.Unlock()
			return ErrClosed
		}
		done := c.closing[name]
		if done == nil {
			return nil
		}
		if isClosed(done) {
			delete(c.closing, name)
			return nil
		}
		c.mu.Unlock()
		select {
		case <-done:
		case <-ctx.Done():
			return &OpenError{Namespace: name, Err: ctx.Err()}
		}
		c.mu.Lock()
	}
}

// prepare makes the namespace and serves its last-good file if it has one,
// starting nothing: it is not yet visible to anyone.
func (c *Client) prepare(name string, opts []NamespaceOption) (*Namespace, error) {
	o := namespaceOptions(opts)
	if o.maxStaleness < 0 {
		return nil, fmt.Errorf("config: namespace %q: MaxStaleness %v is negative", name, o.maxStaleness)
	}
	log := c.opts.logger.With("ns", name)
	n := newNamespace(c, name, o, log)
	defaults, err := buildDefaults(name, o.defaults)
	if err != nil {
		return nil, err
	}
	n.defaults = defaults
	var checks *schema.Schema
	if o.schema != nil {
		if checks, err = schema.Compile(o.schema); err != nil {
			return nil, fmt.Errorf("config: namespace %q: %w", name, err)
		}
	}
	n.syncer = syncer.New(syncer.Config{
		Namespace:    name,
		Source:       streammux.View{Src: c.src, Mux: c.mux},
		Sink:         nsSink{n},
		Schema:       checks,
		ClientID:     c.opts.clientID, // each client evaluates its own place in a staged rollout
		Log:          log,
		Tracer:       c.tracer,
		Backoff:      c.backoff(),
		FetchTimeout: 2*c.opts.idleTimeout + 10*time.Second, // a black-holed server must not hold the loop
		Backstop:     c.opts.backstop,
		RewriteGrace: c.opts.rewriteGrace,
	})
	if q, ok := c.src.(transport.QuietLimiter); ok {
		n.freshWindow = q.QuietLimit
	}
	n.window = n.freshWindow() // nothing runs yet: no lock is held
	if c.dir != nil {
		n.mu.Lock()
		n.loadFromDisk(c.dir)
		n.mu.Unlock()
	}
	return n, nil
}

// backoff is the reconnect policy of every loop of the client.
func (c *Client) backoff() syncer.Backoff {
	return syncer.Backoff{Initial: c.opts.backoffInitial, Max: c.opts.backoffMax, Unauthorized: c.opts.unauthorizedWait}
}

// start registers the namespace's metrics and starts its goroutines: the
// syncer, the callbacks' dispatcher and the clock. Whichever of them exits
// last finishes the namespace (finish): no goroutine waits for them. Acks
// and the last-good file are the client's (one acker, one persister).
// c.mu must be held.
func (c *Client) start(n *Namespace) {
	var err error
	n.acks = c.acks
	c.acks.Start(c.ctx, c.backoff())
	if n.metrics, err = c.metrics.Namespace(n.name, probe{n}); err != nil {
		n.log.Warn("config: namespace metrics not registered", "err", err)
	}
	if n.metrics != nil {
		n.disp.onCallback = n.metrics.CallbackDuration
	}
	n.mu.Lock()
	if st := n.status.State; st == StateBreached || st == StateFailedClosed {
		n.metrics.Breach() // in breach from its file, before it had instruments
	}
	n.mu.Unlock()
	n.syncer.SetMeter(n.metrics)
	if c.dir != nil {
		n.persister = c.persisterFor(n)
	}
	c.rev.add(n)

	ctx, cancel := context.WithCancel(c.ctx)
	n.cancel = cancel
	fns := []func(context.Context){n.syncer.Run, n.disp.run, n.runClock}
	n.running.Store(int32(len(fns)))
	c.wg.Add(1)
	for _, fn := range fns {
		go func() {
			defer func() {
				if n.running.Add(-1) == 0 {
					c.finish(n)
				}
			}()
			fn(ctx)
		}()
	}
}

// finish closes a namespace whose goroutines have all exited: it leaves
// the stream and the global revision, writes its last confirmation,
// unregisters its metrics and closes done.
func (c *Client) finish(n *Namespace) {
	defer c.wg.Done()
	if c.mux != nil {
		c.mux.Leave(n.name)
	}
	c.rev.remove(n)
	if n.persister != nil {
		n.mu.Lock()
		n.flushConfirmation()
		n.mu.Unlock()
		c.persistMu.Lock()
		if c.persistOwners[n.name] == n {
			delete(c.persistOwners, n.name)
		}
		c.persistMu.Unlock()
	}
	_ = n.metrics.Close()
	n.mu.Lock()
	n.setState(StateClosed)
	n.mu.Unlock()
	close(n.done)
}

// persisterFor returns the client's persister, started with the first
// namespace, and routes n's results to n. c.mu must be held.
func (c *Client) persisterFor(n *Namespace) *cachedir.Persister {
	c.persistMu.Lock()
	defer c.persistMu.Unlock()
	if c.persister == nil {
		c.persistOwners = make(map[string]*Namespace)
		c.persister = cachedir.NewPersister(c.dir, c.persisted)
	}
	c.persistOwners[n.name] = n
	return c.persister
}

// persisted hands a write's result to the namespace that submitted it, if
// it is still open; on the persister's goroutine.
func (c *Client) persisted(rec *cachedir.Record, err error) {
	c.persistMu.Lock()
	n := c.persistOwners[rec.Namespace]
	c.persistMu.Unlock()
	if n != nil {
		n.persisted(rec, err)
	}
}

// newNamespace makes a namespace in StateSyncing, with nothing started.
func newNamespace(c *Client, name string, o nsOptions, log *slog.Logger) *Namespace {
	return &Namespace{
		name:      name,
		c:         c,
		opts:      o,
		log:       log,
		disp:      newDispatcher(log, c.opts.callbackQueue),
		ready:     make(chan struct{}),
		done:      make(chan struct{}),
		stateWait: make(chan struct{}),
		kick:      make(chan struct{}, 1),
		// The source's QuietLimit, when it has one (prepare).
		freshWindow: func() time.Duration { return c.opts.idleTimeout },
		window:      c.opts.idleTimeout,
		status:      Status{Namespace: name, State: StateSyncing, MaxStaleness: o.maxStaleness},
	}
}

// buildDefaults makes the snapshot a fail-closed namespace serves past its
// MaxStaleness. Without Defaults it is empty: each getter returns the
// default its caller passes.
func buildDefaults(name string, values map[string]any) (*snapshot.Snapshot, error) {
	raw := make(map[string]json.RawMessage, len(values))
	for k, v := range values {
		b, err := json.Marshal(v)
		if err != nil {
			return nil, fmt.Errorf("config: namespace %q: default %q: %w", name, k, err)
		}
		raw[k] = b
	}
	return snapshot.Build(name, "", 0, raw)
}

// Close stops every namespace's sync loop and callbacks, waits for them to
// return (a callback that is running is waited for), and closes the HTTP
// source's idle connections. Namespaces keep serving their last data to
// readers after Close. Close is idempotent and safe to call concurrently;
// it must not be called from a callback.
func (c *Client) Close() error {
	c.closeOnce.Do(func() {
		c.mu.Lock()
		c.closed = true
		c.mu.Unlock()
		c.cancel()
		c.wg.Wait()
		if c.mux != nil {
			c.mux.Wait()
		}
		c.acks.Wait()
		if c.persister != nil {
			_ = c.persister.Close() // writes what is pending
		}
		if c.ownSource != nil {
			_ = c.ownSource.Close()
		}
	})
	c.wg.Wait()
	return nil
}
