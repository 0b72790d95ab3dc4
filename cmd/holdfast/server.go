package main

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"github.com/google/renameio/v2"

	"github.com/holdfast-dev/holdfast/access"
	"github.com/holdfast-dev/holdfast/internal/gate"
	"github.com/holdfast-dev/holdfast/internal/listen"
	"github.com/holdfast-dev/holdfast/internal/memstat"
	"github.com/holdfast-dev/holdfast/internal/version"
	holdfast "github.com/holdfast-dev/holdfast/server"
	"github.com/holdfast-dev/holdfast/server/control"
	"github.com/holdfast-dev/holdfast/server/store"
	"github.com/holdfast-dev/holdfast/server/tokens"
)

func serverCommand() *command {
	return &command{
		name:    "server",
		summary: "run holdfast server: the durable origin and control plane, over etcd",
		doc: `
Server runs holdfast server: the data plane (snapshot, long-poll, SSE watch
and stream, ack) and the control API (publish, rollback, schema, history,
values, diff, status, clients, compact) on -addr, over one store. It logs
to stderr, and stops cleanly on SIGTERM or SIGINT (exit status 0).

The store is one of:

	(default)          an embedded single-member etcd in -data-dir, which
	                   this server locks; it listens on loopback ports of
	                   its own choosing, never 2379/2380
	-etcd HOST:PORT,…  the members of an external etcd cluster; any number
	                   of servers may serve one store
	-memory            an embedded etcd in a temporary directory, removed
	                   at exit: nothing is kept (development and tests)

Everything the server keeps is in the store: namespaces, their history and
audit, schemas, the store id. A server killed and started again, or
another server of the same store, serves the same store id and revisions,
and clients resume with their cursors. See docs/SERVER.md.

The admin endpoints are served in front of the data plane on -addr, or on
a listener of their own with -admin-addr:

	GET /readyz    200 once the store answers and the watch cache has
	               heard from it; 503 and the reason otherwise
	GET /healthz   200 while the process runs
	GET /statusz   the store's kind, endpoints, id, head and compaction
	               point, and the build (as 'holdfast version -o json'),
	               as JSON
	GET /metrics   Prometheus text: the server's metrics (requests by
	               route and code, streams, publishes and their
	               propagation, the store's latency, the watch cache's
	               lag, leadership, rollouts; docs/SERVER.md, "Metrics"),
	               and the Go runtime's and process's metrics

Tokens live in the store ('holdfast token create|list|revoke', see
docs/SERVER.md, "Tokens"). A store that has never had an admin token is
open: anyone who reaches -addr may read and change everything, and server
says so in a warning at start. -bootstrap-token-file FILE creates the
first admin token (bootstrap-admin) if the store has none: with the secret
FILE holds, or with a new one written to FILE. From then on every request
needs "Authorization: Bearer <token>" (401 without one): a control token
over a namespace to publish, roll back or set its schema there, the
pattern "*" for store-wide operations (compact); a data token over a
namespace to read and ack it (403 outside, with the reason); the admin
scope to manage tokens. A revoked token is refused by every server of the
store within moments. The audit's actor is the token's name; -actor of
publish and rollback is recorded as on_behalf_of.

Patterns are path.Match's: "payments.*" matches payments.prod and
payments.prod.eu, not payments. Secrets appear in no log or reply, only
names do.

With -etcd, -etcd-cacert, -etcd-cert and -etcd-key reach the cluster over
TLS, and -etcd-user logs in to its authentication, the password from
-etcd-password-file or $HOLDFAST_ETCD_PASSWORD (never a flag); see
docs/SERVER.md, "etcd over TLS with authentication".

Every listener serves TLS with -tls-cert and -tls-key (reloaded when the
files change; HTTP/2 through ALPN) and, with -tls-client-ca, requires a
client certificate of that CA (mutual TLS; its subject is the caller's
identity). Without TLS, a listener on an address other than loopback needs
-plaintext (and the server warns); tokens that arrive in plaintext from a
peer other than loopback or a -trusted-proxy are refused. -idle-timeout
and -max-conns bound every listener (docs/SECURITY.md).

A rollout's metric gates query only a Prometheus under a -gate-allow
prefix (e.g. -gate-allow http://prometheus:9090); without one, a rollout
with gates is refused (400), and nothing is fetched.

The operator's console is served at /console/ on -addr (sign in with a
token of control scope; docs/CONSOLE.md); -console (default true) set
to false (-console=false) turns it off.

Publish with the operator commands or the control API, e.g.

	holdfast publish -server http://127.0.0.1:8080 -reason "first try" payments.prod retry-timeout-ms=50
	curl -d '{"puts":{"retry-timeout-ms":50}}' http://127.0.0.1:8080/control/namespaces/payments.prod/publish`,
		flags: serverFlags,
	}
}

func serverFlags(fs *flag.FlagSet) func(context.Context, *env, []string) error {
	addr := fs.String("addr", "127.0.0.1:8080", "listen `HOST:PORT` of the data plane and the control API")
	adminAddr := fs.String("admin-addr", "", "listen `HOST:PORT` of /metrics, /readyz, /healthz and /statusz (empty: on -addr)")
	dataDir := fs.String("data-dir", "holdfast-data", "the embedded store's `DIR`")
	etcdFlag := fs.String("etcd", "", "serve the store of an external etcd cluster: its members' `HOST:PORT,...`")
	memory := fs.Bool("memory", false, "serve a throwaway store that is removed at exit (nothing is kept)")
	heartbeat := fs.Duration("heartbeat", holdfast.DefaultHeartbeat, "progress event interval on watch streams")
	maxPublish := fs.Int64("max-publish-bytes", control.DefaultMaxPublishBytes, "largest publish body (etcd refuses requests above 1.5 MiB by default)")
	retention := fs.String("retention", "24h", "the embedded store keeps this much of etcd's history: `N` revisions or a duration (the audit log outlives it; empty: all); an external cluster compacts by its own --auto-compaction-retention")
	auditRetention := fs.Int("audit-retention", control.DefaultAuditRetention, "audit records kept per namespace (through etcd's compaction); older ones fold into the namespace's base")
	auditBytes := fs.Int64("audit-retention-bytes", control.DefaultAuditRetentionBytes, "bytes of audit records kept per namespace, beside -audit-retention (0: no bound)")
	bootstrap := fs.String("bootstrap-token-file", "", "if the store has no admin token, create one (bootstrap-admin) with the secret in `FILE`, or with a new secret written to FILE (0600) if it is missing or empty")
	consoleFlag := fs.Bool("console", true, "serve the operator's console at /console/ on -addr (docs/CONSOLE.md)")
	startTimeout := fs.Duration("start-timeout", store.DefaultStartTimeout, "how long to wait for the store at start")
	var gateAllow []string
	fs.Func("gate-allow", "a rollout's metric gate may query a Prometheus under these comma-separated `URL` prefixes (repeatable; none by default: every gate is refused)", func(s string) error {
		if _, err := gate.ParseAllow(s); err != nil {
			return err
		}
		gateAllow = append(gateAllow, s)
		return nil
	})
	etcdSec := addEtcdSecurityFlags(fs)
	lf := addListenFlags(fs)
	logs := addLogFlags(fs)
	return func(ctx context.Context, e *env, _ []string) (err error) {
		switch {
		case *heartbeat <= 0:
			return usagef("-heartbeat must be positive, got %v", *heartbeat)
		case *maxPublish <= 0:
			return usagef("-max-publish-bytes must be positive, got %d", *maxPublish)
		case *memory && *etcdFlag != "":
			return usagef("-memory and -etcd exclude each other")
		case *auditRetention <= 0:
			return usagef("-audit-retention must be positive, got %d", *auditRetention)
		case *auditBytes < 0:
			return usagef("-audit-retention-bytes must not be negative, got %d", *auditBytes)
		case *startTimeout <= 0:
			return usagef("-start-timeout must be positive, got %v", *startTimeout)
		}
		if etcdSec.set() && *etcdFlag == "" {
			return usagef("-etcd-cacert, -etcd-cert, -etcd-key, -etcd-user and -etcd-password-file are for -etcd (the embedded store listens on loopback only)")
		}
		sc := store.Config{Kind: store.KindEmbedded, DataDir: *dataDir, StartTimeout: *startTimeout, Retention: *retention}
		switch {
		case *memory:
			sc = store.Config{Kind: store.KindMemory, StartTimeout: *startTimeout, Retention: *retention}
		case *etcdFlag != "":
			members, err := parseEtcdMembers("-etcd", *etcdFlag)
			if err != nil {
				return err
			}
			if flagSet(fs, "retention") {
				return usagef("-retention is the embedded store's: an external cluster compacts by its own --auto-compaction-retention")
			}
			sec, err := etcdSec.security()
			if err != nil {
				return err
			}
			sc = store.Config{Kind: store.KindExternal, Endpoints: members, StartTimeout: *startTimeout, Security: sec}
		}
		log := logs.logger(e.stderr)
		lc, err := lf.config(log)
		if err != nil {
			return err
		}
		if *memory {
			fmt.Fprintln(e.stderr, "holdfast server: -memory: the store is thrown away at exit; nothing is kept")
		}
		allow, err := gate.ParseAllow(gateAllow...)
		if err != nil {
			return usagef("%v", err)
		}
		started := time.Now()
		m, err := newMetrics(serverService)
		if err != nil {
			return err
		}
		defer func() { err = errors.Join(err, m.shutdown()) }()
		srv, err := holdfast.New(ctx, holdfast.Config{Store: sc, Logger: log, Heartbeat: *heartbeat, MaxPublishBytes: *maxPublish, Console: *consoleFlag,
			AuditRetention: *auditRetention, AuditRetentionBytes: cmp.Or(*auditBytes, -1), Gates: gateBuilder(allow), MeterProvider: m.mp})
		if err != nil {
			return err
		}
		if *bootstrap != "" {
			created, err := srv.Tokens().Bootstrap(ctx, *bootstrap, func(name string, data []byte) error {
				return renameio.WriteFile(name, data, 0o600)
			})
			if err != nil {
				return errors.Join(err, srv.Close())
			}
			if created {
				log.Info("server: created the store's first admin token", "token", tokens.BootstrapName, "secret_file", *bootstrap)
			} else {
				log.Info("server: the store has an admin token already; -bootstrap-token-file not used")
			}
		}
		if srv.Tokens().Table().Required() {
			log.Info("server: access control on", "store_tokens", true)
		} else {
			log.Warn("server: no tokens configured: anyone who reaches -addr may read and change everything", "hint", "the store has never had an admin token; see -bootstrap-token-file and docs/SERVER.md")
		}
		st := srv.Status(ctx)
		log.Info("store open", "kind", st.StoreKind, "endpoints", strings.Join(st.StoreEndpoints, ","), "store_id", st.StoreID,
			"head", st.Head, "took", time.Since(started).Round(time.Millisecond))
		// A burst of large publishes grows the heap; what it freed goes
		// back to the OS once the burst is over (docs/SECURITY.md,
		// "Memory under large publishes").
		rctx, stopRelease := context.WithCancel(ctx)
		released := make(chan struct{})
		go func() { defer close(released); memstat.ReleaseIdle(rctx, releaseInterval, releaseMin) }()
		err = serveServer(ctx, log, srv, m, lc, *addr, *adminAddr)
		stopRelease()
		<-released
		log.Info("stopped")
		return err
	}
}

// How often the server looks at its heap's free memory, and how much of
// it it keeps before giving it back to the OS (memstat.ReleaseIdle).
const (
	releaseInterval = 10 * time.Second
	releaseMin      = 64 << 20
)

// serveServer serves srv on addr, and its admin endpoints in front of it
// or on adminAddr, until ctx ends or the embedded store fails; then it
// closes srv.
func serveServer(ctx context.Context, log *slog.Logger, srv *holdfast.Server, m *metrics, lc listen.Config, addr, adminAddr string) (err error) {
	defer func() { err = errors.Join(err, srv.Close()) }()
	if err := changeMetrics(m.mp.Meter(control.MeterScope), srv); err != nil {
		return err
	}
	admin := http.NewServeMux()
	var adminToks *access.Tokens // the admin scope, where the data plane is
	if adminAddr == "" {
		adminToks = access.FromAuthenticator(srv.Tokens().Table(), "the store's tokens")
	}
	adminRoutes(admin, m, func() error { return srv.Ready(context.Background()) }, func() any { return serverStatus{srv.Status(context.Background()), version.Read()} }, adminToks)

	attrs := []any{"store_id", srv.StoreID()}
	var adminFailed <-chan struct{}
	data := srv.Handler()
	if adminAddr == "" {
		admin.Handle("/", data)
		data = admin
	} else {
		adm, aerr := listenAndServe(lc, "admin", adminAddr, admin)
		if aerr != nil {
			return fmt.Errorf("admin: %w", aerr)
		}
		defer func() { err = errors.Join(err, adm.stop()) }()
		adminFailed = adm.failed()
		attrs = append(attrs, "admin_url", adm.url())
	}
	plane, err := listenAndServe(lc, "data", addr, data)
	if err != nil {
		return err
	}
	attrs = append(attrs, "url", plane.url())
	if adminAddr == "" {
		attrs = append(attrs, "admin_url", plane.url())
	}
	log.Info("serving", append(attrs, buildAttrs()...)...)
	select {
	case <-ctx.Done():
		log.Info("shutting down")
	case <-plane.failed():
	case <-adminFailed:
	case serr := <-srv.StoreErr():
		err = fmt.Errorf("the embedded store failed: %w", serr)
		log.Error("the embedded store failed", "err", serr)
	}
	// Closing the server first ends its streams, so that the listener's
	// shutdown does not wait for them.
	stopped := make(chan error, 1)
	go func() { stopped <- plane.stop() }()
	return errors.Join(err, srv.Close(), <-stopped)
}

// serverStatus is the JSON of the server's /statusz: the server's status
// and, under "build", what `holdfast version -o json` prints.
type serverStatus struct {
	holdfast.Status
	Build version.Info `json:"build"`
}

// flagSet reports whether the command line set flag name.
func flagSet(fs *flag.FlagSet, name string) bool {
	set := false
	fs.Visit(func(f *flag.Flag) { set = set || f.Name == name })
	return set
}

// gateBuilder builds rollouts' metric gates (Prometheus queries, see
// docs/ROLLOUTS.md), all over one HTTP client, each on a Prometheus under
// allow (-gate-allow) or refused: a namespace's control token starts
// rollouts, and must not make the server fetch any URL it names.
func gateBuilder(allow *gate.Allow) func(raw json.RawMessage) (control.Gate, error) {
	hc := &http.Client{Transport: &http.Transport{Proxy: http.ProxyFromEnvironment, MaxIdleConnsPerHost: 4}}
	return func(raw json.RawMessage) (control.Gate, error) {
		return gate.FromJSON(raw, nil, gate.WithHTTPClient(hc), gate.WithTimeout(5*time.Second), gate.WithAllow(allow))
	}
}
