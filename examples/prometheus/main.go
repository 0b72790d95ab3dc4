// Command prometheus exports a holdfast client's metrics on /metrics, in
// the Prometheus text format, through the OpenTelemetry SDK and its
// Prometheus exporter (go.opentelemetry.io/otel/exporters/prometheus). The
// shipped Grafana dashboard, telemetry/dashboards/holdfast.json
// (telemetry.Dashboard), queries these names.
//
// It is a module of its own, so that holdfast's users do not download the
// SDK, the exporter and client_golang with holdfast. From its directory:
//
//	go run .                 # serve until interrupted
//	go run . -once           # check the dashboard's names, then exit
//	curl -s 127.0.0.1:9464/metrics | grep '^holdfast_'
//
// (from the repository root, with its go.work: go run ./examples/prometheus).
//
// It starts the reference server in-process and drives a namespace through
// the events the dashboard shows: changes with a callback, a wrong-type
// read, a dropped stream, an outage past MaxStaleness, and a cache file
// that cannot be written. While it serves, it publishes a change every
// second, so the panels move.
//
// The wiring in an application is three lines:
//
//	exp, _ := otelprom.New()                              // registers with prometheus.DefaultRegisterer
//	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(exp))
//	client, _ := config.New(config.WithEndpoint(url), config.WithMeterProvider(mp))
//
// (or otel.SetMeterProvider(mp): the client's default is the global one).
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	otelprom "go.opentelemetry.io/otel/exporters/prometheus"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"

	"github.com/holdfast-dev/holdfast/config"
	"github.com/holdfast-dev/holdfast/holdfasttest"
	"github.com/holdfast-dev/holdfast/telemetry"
)

const (
	ns           = "payments.prod"
	heartbeat    = 100 * time.Millisecond
	maxStaleness = 400 * time.Millisecond
	stepLimit    = 5 * time.Second
)

type settings struct {
	addr      string        // where /metrics listens
	once      bool          // check the dashboard's names against one scrape, then return
	duration  time.Duration // serve this long (0: until ctx ends)
	dashboard string        // path of the dashboard JSON; "": the shipped one
}

func main() {
	var s settings
	flag.StringVar(&s.addr, "addr", "127.0.0.1:9464", "listen address of /metrics")
	flag.BoolVar(&s.once, "once", false, "scrape /metrics once, check the dashboard's metric names, and exit")
	flag.DurationVar(&s.duration, "duration", 0, "serve for this long, then exit (0: until interrupted)")
	flag.StringVar(&s.dashboard, "dashboard", "",
		"the Grafana dashboard whose metric names -once checks (default: the one shipped in package telemetry)")
	flag.Parse()

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Stdout, s); err != nil {
		fmt.Fprintln(os.Stderr, "prometheus:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, out io.Writer, s settings) error {
	say := func(format string, args ...any) { fmt.Fprintf(out, format+"\n", args...) }

	// The OpenTelemetry SDK with the Prometheus exporter, on a registry of
	// our own (an application would usually keep the default one).
	reg := prometheus.NewRegistry()
	exp, err := otelprom.New(otelprom.WithRegisterer(reg))
	if err != nil {
		return err
	}
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(exp))
	defer mp.Shutdown(context.Background())

	srv, err := holdfasttest.Start(holdfasttest.WithHeartbeat(heartbeat))
	if err != nil {
		return err
	}
	defer srv.Close()
	if _, err := srv.Publish(ns, map[string]any{"retry-timeout-ms": 50, "mode": "fast"}); err != nil {
		return err
	}
	dir, err := os.MkdirTemp("", "holdfast-prometheus-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)

	client, err := config.New(
		config.WithEndpoint(srv.URL()),
		config.WithMeterProvider(mp),
		config.WithCacheDir(dir),
		config.WithStreamIdleTimeout(3*heartbeat),
		config.WithReconnectBackoff(20*time.Millisecond, 200*time.Millisecond),
	)
	if err != nil {
		return err
	}
	defer client.Close()
	octx, cancel := context.WithTimeout(ctx, stepLimit)
	defer cancel()
	payments, err := client.Namespace(octx, ns, config.MaxStaleness(maxStaleness))
	if err != nil {
		return err
	}
	stopCB := payments.OnChange("retry-timeout-ms", func(config.Change) {})
	defer stopCB()

	// /metrics, on loopback.
	ln, err := net.Listen("tcp", s.addr)
	if err != nil {
		return err
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	hs := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	served := make(chan error, 1)
	go func() { served <- hs.Serve(ln) }()
	defer func() {
		_ = hs.Close()
		<-served
	}()
	url := "http://" + ln.Addr().String() + "/metrics"
	say("Serving %s", url)

	if err := traffic(ctx, srv, payments, dir); err != nil {
		return err
	}
	say("Drove %s through changes, a wrong-type read, a dropped stream, an outage past MaxStaleness and a persist error.", ns)

	if s.once {
		return check(ctx, out, url, s.dashboard)
	}
	var deadline <-chan time.Time
	if s.duration > 0 {
		t := time.NewTimer(s.duration)
		defer t.Stop()
		deadline = t.C
	}
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for i := 0; ; i++ {
		select {
		case <-tick.C:
			if _, err := srv.Publish(ns, map[string]any{"retry-timeout-ms": 50 + i%10}); err != nil {
				return err
			}
		case <-deadline:
			return nil
		case <-ctx.Done():
			return nil
		}
	}
}

// traffic makes each kind of event the dashboard shows happen once.
func traffic(ctx context.Context, srv *holdfasttest.Server, payments *config.Namespace, dir string) error {
	// Changes: applies, propagation delay, callback duration.
	for i := range 3 {
		rev, err := srv.Publish(ns, map[string]any{"retry-timeout-ms": 60 + i})
		if err != nil {
			return err
		}
		if err := waitRevision(ctx, payments, rev); err != nil {
			return err
		}
	}
	// A getter asked for the wrong type: a type mismatch.
	_ = payments.Int("mode", 0)

	// A dropped stream: a reconnect.
	srv.DropStreams()
	rev, err := srv.Publish(ns, map[string]any{"retry-timeout-ms": 70})
	if err != nil {
		return err
	}
	if err := waitRevision(ctx, payments, rev); err != nil {
		return err
	}

	// An outage longer than MaxStaleness: a breach, then recovery.
	if err := srv.Stop(); err != nil {
		return err
	}
	if err := waitState(ctx, payments, config.StateBreached); err != nil {
		return fmt.Errorf("waiting for a breach: %w", err)
	}
	if err := srv.Restart(); err != nil {
		return err
	}
	if err := waitState(ctx, payments, config.StateFresh); err != nil {
		return fmt.Errorf("waiting for recovery: %w", err)
	}

	// A last-good file that cannot be written (a directory in its place):
	// a persist error. Serving goes on.
	file := filepath.Join(dir, ns+".hfc")
	if err := os.Remove(file); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	if err := os.MkdirAll(filepath.Join(file, "blocker"), 0o700); err != nil {
		return err
	}
	if rev, err = srv.Publish(ns, map[string]any{"retry-timeout-ms": 80}); err != nil {
		return err
	}
	if err := waitRevision(ctx, payments, rev); err != nil {
		return err
	}
	return within(ctx, func() bool { return payments.Status().PersistError.Kind == config.ErrorPersist })
}

// check scrapes url once and reports, for each metric the dashboard
// queries, whether the scrape has it. It fails when one is missing.
func check(ctx context.Context, out io.Writer, url, dashboard string) error {
	want, err := dashboardMetrics(dashboard)
	if err != nil {
		return err
	}
	have, err := scrape(ctx, url)
	if err != nil {
		return err
	}
	name := "telemetry/dashboards/holdfast.json"
	if dashboard != "" {
		name = filepath.Base(dashboard)
	}
	fmt.Fprintf(out, "The dashboard (%s) queries %d metrics; in this scrape:\n", name, len(want))
	var missing []string
	for _, name := range want {
		mark := "ok"
		if !have[name] {
			mark, missing = "MISSING", append(missing, name)
		}
		fmt.Fprintf(out, "  %-7s %s\n", mark, name)
	}
	if len(missing) > 0 {
		return fmt.Errorf("the scrape lacks %s", strings.Join(missing, ", "))
	}
	fmt.Fprintln(out, "Every metric the dashboard queries is exported.")
	return nil
}

// metricName finds the names in PromQL text: holdfast_ identifiers that are
// not the namespace label.
var metricName = regexp.MustCompile(`\bholdfast_[a-z0-9_]+`)

// dashboardMetrics returns the sorted metric names the dashboard's queries
// (every "expr" field) use; path "" reads the shipped dashboard.
func dashboardMetrics(path string) ([]string, error) {
	data := telemetry.Dashboard()
	if path != "" {
		var err error
		if data, err = os.ReadFile(path); err != nil {
			return nil, fmt.Errorf("read the dashboard: %w", err)
		}
	} else {
		path = "the shipped dashboard"
	}
	var doc any
	if err := json.Unmarshal(data, &doc); err != nil {
		return nil, fmt.Errorf("dashboard %s: %w", path, err)
	}
	var names []string
	var walk func(v any)
	walk = func(v any) {
		switch v := v.(type) {
		case map[string]any:
			for k, x := range v {
				if expr, ok := x.(string); ok && k == "expr" {
					for _, m := range metricName.FindAllString(expr, -1) {
						if m != "holdfast_namespace" && !slices.Contains(names, m) {
							names = append(names, m)
						}
					}
					continue
				}
				walk(x)
			}
		case []any:
			for _, x := range v {
				walk(x)
			}
		}
	}
	walk(doc)
	slices.Sort(names)
	if len(names) == 0 {
		return nil, fmt.Errorf("no holdfast_ metric in %s", path)
	}
	return names, nil
}

// scrape returns the names of the series in one scrape of url.
func scrape(ctx context.Context, url string) (map[string]bool, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	req.Close = true
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	names := make(map[string]bool)
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || line[0] == '#' {
			continue
		}
		if i := strings.IndexAny(line, "{ "); i > 0 {
			names[line[:i]] = true
		}
	}
	return names, sc.Err()
}

func waitRevision(ctx context.Context, n *config.Namespace, rev int64) error {
	ctx, cancel := context.WithTimeout(ctx, stepLimit)
	defer cancel()
	if err := n.WaitForRevision(ctx, rev); err != nil {
		return fmt.Errorf("waiting for revision %d: %w", rev, err)
	}
	return nil
}

// waitState waits, at most stepLimit, for ns to reach state.
func waitState(ctx context.Context, ns *config.Namespace, state config.State) error {
	ctx, cancel := context.WithTimeout(ctx, stepLimit)
	defer cancel()
	return ns.WaitForState(ctx, state)
}

// within polls cond until it holds, within stepLimit.
func within(ctx context.Context, cond func() bool) error {
	ctx, cancel := context.WithTimeout(ctx, stepLimit)
	defer cancel()
	t := time.NewTicker(10 * time.Millisecond)
	defer t.Stop()
	for !cond() {
		select {
		case <-t.C:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}
