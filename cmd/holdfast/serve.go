package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net/http"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/holdfast-dev/holdfast/access"
	"github.com/holdfast-dev/holdfast/holdfasttest"
)

func serveCommand() *command {
	return &command{
		name:    "serve",
		summary: "run the reference server (in memory: for development and tests)",
		doc: `
Serve runs holdfast's reference server: the data plane (snapshot, long-poll,
SSE watch and stream, ack) and the control API (publish, rollback, schema,
status, clients) on -addr, over one in-memory store with real revisions,
history and compaction. It is what examples/server and holdfasttest run. It
logs to stderr, and stops cleanly on SIGTERM or SIGINT (exit status 0).

With -admin-addr, a second listener serves /metrics (Prometheus text: the
server's request counts, open streams and head revision, and the Go
runtime's and process's metrics), /readyz (200 once the server listens),
/healthz and /statusz (the store's id, head and compaction point as JSON).
They need a listener of their own because the reference server owns
-addr's; without -admin-addr they are not served.

Publish with the operator commands or the control API, e.g.

	holdfast publish -server http://127.0.0.1:8080 -reason "first try" payments.prod retry-timeout-ms=50
	curl -d '{"puts":{"retry-timeout-ms":50}}' http://127.0.0.1:8080/control/namespaces/payments.prod/publish

and point a client at http://127.0.0.1:8080.

Without -tokens (or -token) anyone who reaches -addr may read and change
everything, and serve says so in a warning at start. With -tokens FILE
every request needs "Authorization: Bearer <token>" of one of FILE's
tokens (401 without one): a control token over a namespace to publish,
roll back, roll out or set its schema there, the pattern "*" for
store-wide operations (compact, faults); a data token over a namespace to
read and ack it (403 outside, with the reason). FILE is JSON:

	{"tokens": [
	  {"name": "deploy-bot", "token": "…", "control": ["payments.*"]},
	  {"name": "payments-svc", "token": "…", "data": ["payments.*"]}
	]}

Patterns are path.Match's: "payments.*" matches payments.prod and
payments.prod.eu, not payments. Secrets are 16 to 4096 bytes of printable
ASCII without spaces; they appear in no log or reply, only names do.
-token (one token for the data plane, the control API open) is the older,
coarser form; the two exclude each other.`,
		flags: serveFlags,
	}
}

func serveFlags(fs *flag.FlagSet) func(context.Context, *env, []string) error {
	addr := fs.String("addr", "127.0.0.1:8080", "listen `HOST:PORT` of the data plane and the control API")
	adminAddr := fs.String("admin-addr", "", "listen `HOST:PORT` of /metrics, /readyz, /healthz and /statusz (empty: not served)")
	heartbeat := fs.Duration("heartbeat", holdfasttest.DefaultHeartbeat, "progress event interval on watch streams")
	retention := fs.Int64("retention", 0, "keep only the last `N` revisions of history (0: all)")
	buffer := fs.Int("watcher-buffer", holdfasttest.DefaultWatcherBuffer, "change sets queued per watcher before it is disconnected")
	maxPublish := fs.Int64("max-publish-bytes", holdfasttest.DefaultMaxPublishBytes, "largest publish body")
	token := fs.String("token", "", "require this bearer `TOKEN` on the data plane (the control API stays open; see -tokens)")
	tokensFile := fs.String("tokens", "", "require the tokens of `FILE` (JSON, see above) on the data plane and the control API")
	logs := addLogFlags(fs)
	return func(ctx context.Context, e *env, _ []string) error {
		switch {
		case *heartbeat <= 0:
			return usagef("-heartbeat must be positive, got %v", *heartbeat)
		case *retention < 0:
			return usagef("-retention must not be negative, got %d", *retention)
		case *buffer <= 0:
			return usagef("-watcher-buffer must be positive, got %d", *buffer)
		case *maxPublish <= 0:
			return usagef("-max-publish-bytes must be positive, got %d", *maxPublish)
		}
		opts := []holdfasttest.Option{
			holdfasttest.WithAddr(*addr),
			holdfasttest.WithHeartbeat(*heartbeat),
			holdfasttest.WithRetention(*retention),
			holdfasttest.WithWatcherBuffer(*buffer),
			holdfasttest.WithMaxPublishBytes(*maxPublish),
			holdfasttest.WithBearerToken(*token),
		}
		if *tokensFile != "" {
			if *token != "" {
				return usagef("-token and -tokens exclude each other")
			}
			toks, err := loadTokens(*tokensFile)
			if err != nil {
				return err
			}
			opts = append(opts, holdfasttest.WithTokens(toks))
		}
		log := logs.logger(e.stderr)
		srv, err := holdfasttest.Start(append(opts, holdfasttest.WithLogger(log))...)
		if err != nil {
			return err
		}
		err = serveUntilDone(ctx, log, srv, *adminAddr)
		log.Info("stopped")
		return err
	}
}

// loadTokens reads a -tokens file; a missing or invalid one is a usage
// error.
func loadTokens(name string) (*access.Tokens, error) {
	toks, err := access.Load(name)
	if err != nil {
		return nil, usagef("-tokens: %v", err)
	}
	return toks, nil
}

// serveUntilDone serves srv, and the admin endpoints on adminAddr if
// any, until ctx ends; then it closes them.
func serveUntilDone(ctx context.Context, log *slog.Logger, srv *holdfasttest.Server, adminAddr string) (err error) {
	defer func() { err = errors.Join(err, srv.Close()) }()
	var failed <-chan struct{} // nil, never ready, without an admin listener
	attrs := []any{"url", srv.URL(), "store_id", srv.StoreID()}
	if adminAddr != "" {
		m, merr := newMetrics()
		if merr != nil {
			return merr
		}
		defer func() { err = errors.Join(err, m.shutdown()) }()
		if merr := serverMetrics(m.mp.Meter(meterScope), srv); merr != nil {
			return merr
		}
		mux := http.NewServeMux()
		adminRoutes(mux, m, func() error { return nil }, func() any { return newServerStatus(srv) })
		admin, aerr := listenAndServe(adminAddr, httpServer(mux, log, false))
		if aerr != nil {
			return fmt.Errorf("admin: %w", aerr)
		}
		defer func() { err = errors.Join(err, admin.stop()) }()
		failed = admin.failed()
		attrs = append(attrs, "admin_url", admin.url())
	}
	log.Info("serving", attrs...)
	select {
	case <-ctx.Done():
		log.Info("shutting down")
	case <-failed: // the deferred admin.stop returns why
	}
	return nil
}

// serverStatus is the JSON of serve's /statusz.
type serverStatus struct {
	StoreID         string `json:"store_id"`
	Head            int64  `json:"head"`
	CompactRevision int64  `json:"compact_revision"`
	OpenStreams     int    `json:"open_streams"`
}

func newServerStatus(srv *holdfasttest.Server) serverStatus {
	return serverStatus{StoreID: srv.StoreID(), Head: srv.Head(), CompactRevision: srv.CompactRevision(), OpenStreams: srv.OpenStreams()}
}

// serverMetrics registers the reference server's counters, read at each
// scrape: holdfast_server_requests_total{kind}, _publishes_total,
// _connections_total, holdfast_server_streams (open now) and
// holdfast_server_head (the store's latest revision).
func serverMetrics(meter metric.Meter, srv *holdfasttest.Server) error {
	requests, err1 := meter.Int64ObservableCounter("holdfast.server.requests", metric.WithUnit("{request}"),
		metric.WithDescription("Data-plane requests served, by kind; not_modified counts the snapshots answered 304."))
	publishes, err2 := meter.Int64ObservableCounter("holdfast.server.publishes", metric.WithUnit("{publish}"),
		metric.WithDescription("Committed publishes and rollbacks."))
	conns, err3 := meter.Int64ObservableCounter("holdfast.server.connections", metric.WithUnit("{connection}"),
		metric.WithDescription("TCP connections accepted."))
	streams, err4 := meter.Int64ObservableGauge("holdfast.server.streams", metric.WithUnit("{stream}"),
		metric.WithDescription("Watch streams open now."))
	head, err5 := meter.Int64ObservableGauge("holdfast.server.head", metric.WithUnit("{revision}"),
		metric.WithDescription("The store's latest revision."))
	if err := errors.Join(err1, err2, err3, err4, err5); err != nil {
		return fmt.Errorf("metrics: %w", err)
	}
	_, err := meter.RegisterCallback(func(_ context.Context, o metric.Observer) error {
		st := srv.Stats()
		for _, k := range []struct {
			kind string
			n    int64
		}{
			{"snapshot", st.Snapshots}, {"not_modified", st.NotModified}, {"events", st.Events},
			{"watch", st.Watches}, {"stream", st.Streams}, {"stream_events", st.StreamPolls},
			{"ack", st.Acks}, {"ack_stream", st.AckStreams},
		} {
			o.ObserveInt64(requests, k.n, metric.WithAttributes(attribute.String("kind", k.kind)))
		}
		o.ObserveInt64(publishes, st.Publishes)
		o.ObserveInt64(conns, st.Conns)
		o.ObserveInt64(streams, int64(srv.OpenStreams()))
		o.ObserveInt64(head, srv.Head())
		return nil
	}, requests, publishes, conns, streams, head)
	if err != nil {
		return fmt.Errorf("metrics: %w", err)
	}
	return nil
}
