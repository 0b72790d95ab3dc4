package relay

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/metric"

	"github.com/holdfast-dev/holdfast/internal/httpmetrics"
	"github.com/holdfast-dev/holdfast/internal/listen"
	"github.com/holdfast-dev/holdfast/internal/watchcache"
	"github.com/holdfast-dev/holdfast/transport"
)

// Relay follows an upstream and serves its data plane. Create one with
// New; it is safe for concurrent use.
type Relay struct {
	cache    *watchcache.Cache
	handler  http.Handler
	log      *slog.Logger
	maxConns int
	metrics  metric.Registration
}

// NamespaceStatus is what a relay knows of one namespace it follows: its
// store id, revision and cursor; whether the relay has data of it to
// serve (Ready); how long ago the upstream last confirmed the data (Age)
// and whether it is not confirming it now (Unconfirmed); the change sets
// in the relay's window for clients that resume (Changes); the
// downstream watches, streams and waiting long-polls, carrying it now
// (Streams); the last failure of following it (LastError).
type NamespaceStatus = watchcache.NamespaceStatus

// ErrClosed is returned by Serve once the relay is closed.
var ErrClosed = errors.New("relay: closed")

// New returns a relay following upstream. When upstream is a
// transport.StreamSource its one multi-namespace stream carries every
// namespace; acks go upstream when it is a transport.Acker (coalesced,
// and batched when it is a transport.BatchAcker). It loads the cache
// directory (WithCacheDir) before it dials.
func New(upstream transport.Source, opts ...Option) (*Relay, error) {
	o := options{cache: watchcache.DefaultConfig()}
	o.cache.KeepReports = true // it tells its clients (transport.CapabilityReportsKept) they need not repeat themselves
	for _, opt := range opts {
		if opt != nil {
			opt.apply(&o)
		}
	}
	if o.maxConns == 0 {
		o.maxConns = listen.DefaultMaxConns
	}
	log := o.cache.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if o.cacheDir != "" {
		o.cache.LastGood = &lastGood{path: o.cacheDir, log: log}
	}
	if o.meter == nil {
		o.meter = otel.GetMeterProvider()
	}
	o.cache.Meter, o.cache.MetricPrefix = o.meter.Meter(meterScope), "holdfast.relay"
	c, err := watchcache.New(upstream, o.cache)
	if err != nil {
		return nil, err
	}
	r := &Relay{cache: c, handler: c.Handler(), log: log, maxConns: o.maxConns}
	if r.handler, err = httpmetrics.Wrap(o.meter.Meter(meterScope), "holdfast.relay.request.duration", r.handler); err == nil {
		r.metrics, err = r.registerMetrics(o.meter.Meter(meterScope))
	}
	if err != nil {
		return nil, errors.Join(err, c.Close())
	}
	return r, nil
}

// meterScope is the instrumentation scope of the relay's instruments.
const meterScope = "github.com/holdfast-dev/holdfast/relay"

// registerMetrics registers, besides the watch cache's (the fan-out:
// holdfast.relay.streams.open, holdfast.relay.namespace.streams; the
// cache's age: holdfast.relay.namespace.age and .unconfirmed),
// holdfast.relay.upstream.up (1 while the relay serves data and its
// upstream confirms every namespace it follows) and holdfast.relay.acks
// (the acks it received from its clients, which it forwards upstream).
func (r *Relay) registerMetrics(meter metric.Meter) (metric.Registration, error) {
	up, err1 := meter.Int64ObservableGauge("holdfast.relay.upstream.up",
		metric.WithDescription("1 while the relay is ready and its upstream confirms every namespace it follows, else 0."))
	acks, err2 := meter.Int64ObservableCounter("holdfast.relay.acks", metric.WithUnit("{ack}"),
		metric.WithDescription("Acks the relay received from its clients, to forward upstream."))
	if err := errors.Join(err1, err2); err != nil {
		return nil, fmt.Errorf("relay: metrics: %w", err)
	}
	return meter.RegisterCallback(func(_ context.Context, o metric.Observer) error {
		var v int64
		if r.cache.Ready() == nil {
			v = 1
			for _, ns := range r.cache.Namespaces() {
				if ns.Unconfirmed {
					v = 0
					break
				}
			}
		}
		o.ObserveInt64(up, v)
		o.ObserveInt64(acks, r.cache.Stats().Acks)
		return nil
	}, up, acks)
}

// Handler returns the relay's data plane (/sdk/...): snapshot, long-poll,
// SSE watch and stream, ack. Requests through it end when the relay
// closes.
func (r *Relay) Handler() http.Handler { return r.handler }

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
	if r.maxConns > 0 {
		l = listen.Limit(l, r.maxConns, true, r.log.With("listener", "relay"))
	}
	if err := r.cache.Listen(l); err != nil {
		_ = l.Close()
		return ErrClosed
	}
	select {
	case <-ctx.Done():
	case <-r.cache.Done():
	}
	return r.Close()
}

// Ready returns nil once the relay serves data: every namespace of
// WithNamespaces has data (from upstream or its cache), or, without any,
// once it has heard from its upstream.
func (r *Relay) Ready() error { return r.cache.Ready() }

// Namespaces returns the status of every namespace followed, by name.
func (r *Relay) Namespaces() []NamespaceStatus { return r.cache.Namespaces() }

// Close stops following, ends every downstream stream, flushes the cache
// and waits for every goroutine the relay started. Acks not yet forwarded
// are dropped (reporting is best effort). It is idempotent.
func (r *Relay) Close() error {
	if r.metrics != nil {
		_ = r.metrics.Unregister()
	}
	return r.cache.Close()
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
	// KeptReports is how many of its clients' reports the relay keeps
	// now, to tell a new upstream connection; ReportsEvicted how many it
	// evicted past its bound (docs/PROTOCOL.md, "When a client reports").
	KeptReports    int
	ReportsEvicted int64
}

// Stats returns the relay's counters.
func (r *Relay) Stats() Stats {
	s := r.cache.Stats()
	kept, evicted := r.cache.KeptReports()
	return Stats{Snapshots: s.Snapshots, NotModified: s.NotModified, Shed: s.Shed, Events: s.Events, Watches: s.Watches,
		Streams: s.Streams, StreamPolls: s.StreamPolls, Acks: s.Acks, Conns: s.Conns, OpenStreams: r.cache.OpenStreams(),
		KeptReports: kept, ReportsEvicted: evicted}
}
