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

	"github.com/holdfast-dev/holdfast/internal/h2cserver"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	otelprom "go.opentelemetry.io/otel/exporters/prometheus"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
)

// meterScope is the instrumentation scope of the command's own
// instruments (the otel_scope_name label).
const meterScope = "github.com/holdfast-dev/holdfast/cmd/holdfast"

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

func newMetrics() (*metrics, error) {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	exp, err := otelprom.New(otelprom.WithRegisterer(reg))
	if err != nil {
		return nil, fmt.Errorf("metrics: %w", err)
	}
	return &metrics{reg: reg, mp: sdkmetric.NewMeterProvider(sdkmetric.WithReader(exp))}, nil
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
func adminRoutes(mux *http.ServeMux, m *metrics, ready func() error, status func() any) {
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
	mux.HandleFunc("GET /statusz", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Cache-Control", "no-store")
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		_ = enc.Encode(status())
	})
	mux.Handle("GET /metrics", promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{}))
}

// httpServer returns the server of the command's listeners: HTTP/1.1
// and, when h2c, HTTP/2 with prior knowledge on the same listener (as the
// reference server and the SDK's HTTP source speak), and a bound on slow
// request headers. No read or write timeout: watch streams are
// long-lived.
func httpServer(h http.Handler, log *slog.Logger, h2c bool) server {
	srv := &http.Server{
		Handler:           h,
		ReadHeaderTimeout: 10 * time.Second,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelDebug),
	}
	if !h2c {
		return srv
	}
	return h2cserver.New(srv)
}

// server is an *http.Server, or an *h2cserver.Server for h2c.
type server interface {
	Serve(net.Listener) error
	Shutdown(context.Context) error
	Close() error
}

// serving is a server running on a listener in a goroutine.
type serving struct {
	srv  server
	addr net.Addr
	done chan struct{} // closed when Serve has returned, with err
	err  error
}

// listenAndServe listens on addr and serves srv there.
func listenAndServe(addr string, srv server) (*serving, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	s := &serving{srv: srv, addr: ln.Addr(), done: make(chan struct{})}
	go func() {
		defer close(s.done)
		s.err = srv.Serve(ln)
	}()
	return s, nil
}

// url returns the listener's base URL.
func (s *serving) url() string { return "http://" + s.addr.String() }

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
