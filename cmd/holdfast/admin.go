package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/holdfast-dev/holdfast/access"
	"github.com/holdfast-dev/holdfast/internal/listen"
	"github.com/holdfast-dev/holdfast/internal/version"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.opentelemetry.io/otel/attribute"
	otelprom "go.opentelemetry.io/otel/exporters/prometheus"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/resource"
)

// shutdownTimeout bounds how long a stopping server waits for its
// connections to go idle before it closes them.
const shutdownTimeout = 5 * time.Second

// logFlags are the logging flags of the long-running commands.
type logFlags struct {
	format  *choice
	verbose *bool
}

func addLogFlags(fs *flag.FlagSet) logFlags {
	return logFlags{
		format:  newChoice(fs, "log-format", "log format on stderr", "text", "json"),
		verbose: fs.Bool("v", false, "log at debug level too"),
	}
}

func (f logFlags) logger(w io.Writer) *slog.Logger {
	o := &slog.HandlerOptions{Level: slog.LevelInfo}
	if *f.verbose {
		o.Level = slog.LevelDebug
	}
	if f.format.value == "json" {
		return slog.New(slog.NewJSONHandler(w, o))
	}
	return slog.New(slog.NewTextHandler(w, o))
}

// metrics is the OpenTelemetry SDK exporting to a Prometheus registry of
// the command's own, with the Go runtime's and the process's collectors
// (memory, goroutines, CPU, file descriptors) beside it.
type metrics struct {
	reg *prometheus.Registry
	mp  *sdkmetric.MeterProvider
}

// newMetrics returns the metrics of the service named service
// ("holdfast-server", "holdfast-relay"): the OTel resource, Prometheus's
// target_info, names it and the SDK's version (service.name,
// service.version), unless $OTEL_SERVICE_NAME or
// $OTEL_RESOURCE_ATTRIBUTES say otherwise.
func newMetrics(service string) (*metrics, error) {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	exp, err := otelprom.New(otelprom.WithRegisterer(reg))
	if err != nil {
		return nil, fmt.Errorf("metrics: %w", err)
	}
	res, err := serviceResource(service)
	if err != nil {
		return nil, err
	}
	return &metrics{reg: reg, mp: sdkmetric.NewMeterProvider(sdkmetric.WithReader(exp), sdkmetric.WithResource(res))}, nil
}

// serviceResource is the OTel resource of service: the SDK's attributes
// (telemetry.sdk.*), service.name and service.version, then what the
// environment says (OTEL_SERVICE_NAME, OTEL_RESOURCE_ATTRIBUTES), which
// wins.
func serviceResource(service string) (*resource.Resource, error) {
	res, err := resource.New(context.Background(),
		resource.WithTelemetrySDK(),
		resource.WithAttributes(attribute.String("service.name", service), attribute.String("service.version", version.SDK)),
		resource.WithFromEnv())
	if err != nil {
		return nil, fmt.Errorf("metrics: the OTel resource: %w", err)
	}
	return res, nil
}

func (m *metrics) shutdown() error {
	ctx, cancel := context.WithTimeout(context.Background(), shutdownTimeout)
	defer cancel()
	return m.mp.Shutdown(ctx)
}

// adminRoutes mounts the admin endpoints on mux:
//
//	GET /healthz  200 while the process runs
//	GET /readyz   200 once ready() is nil, else 503 with its reason
//	GET /statusz  status() as JSON
//	GET /metrics  Prometheus text
//
// With toks (tokens on, and the admin endpoints on the data listener),
// /statusz and /metrics need a token of toks with the admin scope: today
// the control pattern "*"; /healthz and /readyz stay open to probes.
func adminRoutes(mux *http.ServeMux, m *metrics, ready func() error, status func() any, toks *access.Tokens) {
	gate := func(h http.Handler) http.Handler { return h }
	if toks != nil {
		gate = func(h http.Handler) http.Handler { return adminGate(toks, h) }
	}
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		fmt.Fprintln(w, "ok")
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		w.Header().Set("Cache-Control", "no-store")
		if err := ready(); err != nil {
			w.WriteHeader(http.StatusServiceUnavailable)
			fmt.Fprintf(w, "not ready: %v\n", err)
			return
		}
		fmt.Fprintln(w, "ready")
	})
	mux.Handle("GET /statusz", gate(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Cache-Control", "no-store")
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		_ = enc.Encode(status())
	})))
	mux.Handle("GET /metrics", gate(promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{})))
}

// adminGate serves h to a token of toks with the admin scope (or the
// control pattern "*", which the reference server's Go tokens, having no
// admin scope, use): 401 without a token of toks, 403 with one without
// it.
func adminGate(toks *access.Tokens, h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id, ok := toks.AuthenticateRequest(r)
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		switch {
		case !ok:
			w.Header().Set("WWW-Authenticate", `Bearer realm="holdfast"`)
			w.WriteHeader(http.StatusUnauthorized)
			fmt.Fprintln(w, "the admin endpoints need a bearer token with the admin scope (or serve them on -admin-addr)")
		case !id.IsAdmin() && !id.MayControlAll():
			w.WriteHeader(http.StatusForbidden)
			fmt.Fprintf(w, "token %q has no admin scope (nor the control pattern \"*\")\n", id.Name)
		default:
			h.ServeHTTP(w, r)
		}
	})
}

// listenFlags are the flags of the long-running commands' listeners:
// TLS, the plaintext policy and the bounds (docs/SECURITY.md). Every
// listener of a command (data plane, control API, admin) has them.
type listenFlags struct {
	tlsCert, tlsKey, clientCA *string
	plaintext                 *bool
	trustedProxy              *string
	idleTimeout               *time.Duration
	maxConns                  *int
}

func addListenFlags(fs *flag.FlagSet) listenFlags {
	return listenFlags{
		tlsCert:      fs.String("tls-cert", "", "serve TLS with the certificate (chain) of PEM `FILE`, reloaded when it changes (needs -tls-key)"),
		tlsKey:       fs.String("tls-key", "", "the private key of -tls-cert, PEM `FILE`, reloaded with it"),
		clientCA:     fs.String("tls-client-ca", "", "require a client certificate issued by a CA of PEM `FILE` (mutual TLS): its subject is the caller's identity"),
		plaintext:    fs.Bool("plaintext", false, "allow a listener without TLS on an address other than loopback (tokens from peers other than loopback and -trusted-proxy are refused)"),
		trustedProxy: fs.String("trusted-proxy", "", "comma-separated `CIDRS` of TLS-terminating proxies whose plaintext requests may carry tokens"),
		idleTimeout:  fs.Duration("idle-timeout", listen.DefaultIdleTimeout, "close a connection with no request or stream open for this long"),
		maxConns:     fs.Int("max-conns", listen.DefaultMaxConns, "the most connections open at once per listener; past it a new one is refused and logged"),
	}
}

// config returns the listeners' shared configuration, the TLS pair loaded.
func (f listenFlags) config(log *slog.Logger) (listen.Config, error) {
	c := listen.Config{Plaintext: *f.plaintext, IdleTimeout: *f.idleTimeout, MaxConns: *f.maxConns, Logger: log}
	switch {
	case *f.idleTimeout <= 0:
		return c, usagef("-idle-timeout must be positive, got %v", *f.idleTimeout)
	case *f.maxConns <= 0:
		return c, usagef("-max-conns must be positive, got %d", *f.maxConns)
	case (*f.tlsCert == "") != (*f.tlsKey == ""):
		return c, usagef("-tls-cert and -tls-key go together")
	case *f.clientCA != "" && *f.tlsCert == "":
		return c, usagef("-tls-client-ca needs -tls-cert and -tls-key")
	}
	var err error
	if c.TrustedProxies, err = listen.ParseCIDRs(*f.trustedProxy); err != nil {
		return c, usagef("-trusted-proxy: %v", err)
	}
	if *f.tlsCert != "" {
		if c.TLS, err = listen.NewTLS(*f.tlsCert, *f.tlsKey, *f.clientCA, log); err != nil {
			return c, usagef("-tls-cert: %v", err)
		}
	}
	return c, nil
}

// server is the listeners' *listen.Server.
type server interface {
	Serve(net.Listener) error
	Shutdown(context.Context) error
	Close() error
}

// serving is a server running on a listener in a goroutine.
type serving struct {
	srv    server
	addr   net.Addr
	scheme string
	done   chan struct{} // closed when Serve has returned, with err
	err    error
}

// listenAndServe listens on addr and serves h there with c's settings:
// TLS or HTTP/1.1 and h2c, the caps and timeouts.
func listenAndServe(c listen.Config, name, addr string, h http.Handler) (*serving, error) {
	c.Name, c.Addr = name, addr
	ln, err := listen.Listen(c)
	if err != nil {
		return nil, err
	}
	srv := listen.NewServer(h, c)
	s := &serving{srv: srv, addr: ln.Addr(), scheme: "http", done: make(chan struct{})}
	if c.TLS != nil {
		s.scheme = "https"
	}
	go func() {
		defer close(s.done)
		s.err = srv.Serve(ln)
	}()
	return s, nil
}

// url returns the listener's base URL.
func (s *serving) url() string { return s.scheme + "://" + s.addr.String() }

// stop shuts the server down: it waits up to shutdownTimeout for the
// connections to go idle, then closes them, and waits for Serve.
func (s *serving) stop() error {
	ctx, cancel := context.WithTimeout(context.Background(), shutdownTimeout)
	defer cancel()
	err := s.srv.Shutdown(ctx)
	if err != nil {
		err = errors.Join(err, s.srv.Close())
	}
	<-s.done
	if !errors.Is(s.err, http.ErrServerClosed) {
		err = errors.Join(err, s.err)
	}
	return err
}

// failed is closed if Serve returns by itself (a listener failure); then
// stop returns why.
func (s *serving) failed() <-chan struct{} { return s.done }
