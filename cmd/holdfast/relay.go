package main

import (
	"context"
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"path"
	"strconv"
	"strings"
	"sync"

	"github.com/holdfast-dev/holdfast/access"
	"github.com/holdfast-dev/holdfast/internal/listen"
	"github.com/holdfast-dev/holdfast/internal/tokentable"
	"github.com/holdfast-dev/holdfast/internal/version"
	"github.com/holdfast-dev/holdfast/relay"
	"github.com/holdfast-dev/holdfast/transport"
)

func relayCommand() *command {
	return &command{
		name:    "relay",
		summary: "run a relay: follow an upstream, serve its data plane to clients",
		doc: `
Relay follows an upstream config plane over one multi-namespace stream and
serves the same data plane (snapshot, long-poll, SSE watch and stream, ack)
to its own clients, with the upstream's store id and revisions unchanged:
a client moves between relays, or between a relay and the origin, and
resumes with its cursor. It logs to stderr, and stops cleanly on SIGTERM or
SIGINT (exit status 0): it ends its clients' streams and flushes its cache
directory first.

-upstream is one of:

	http://HOST:PORT[/PATH] or https://...   a holdfast server or another relay
	URL,URL,...                              several of them, for failover (see below)

A relay follows holdfast servers, not etcd: the server is the store's
only writer and the place acks go (run 'holdfast server -etcd ...' in
front of a cluster).

Several http(s) upstreams fail over in order, as the SDK's WithEndpoints:
on a failure of the one followed the relay moves to the next and resumes
from its cursors; it returns to the first once that one has been healthy
for 30s.

The admin endpoints are served in front of the data plane on -addr, or on a
listener of their own with -admin-addr:

	GET /readyz    200 once the relay serves data (every -namespaces
	               namespace has data, from upstream or its cache; without
	               -namespaces, once its upstream has answered: the relay
	               asks it at start, not waiting for a client); 503 and
	               the reason before
	GET /healthz   200 while the process runs
	GET /statusz   every namespace followed, as JSON: store id, revision,
	               cursor, age_seconds (how long ago the upstream last
	               confirmed it), unconfirmed, streams, last_error; and
	               the build (as 'holdfast version -o json')
	GET /metrics   Prometheus text: the relay's metrics (requests by
	               route and code, open streams, fan-out, upstream state,
	               each namespace's age; docs/RELAY.md, "Metrics"), and the
	               Go runtime's and process's metrics

Every listener serves TLS with -tls-cert and -tls-key (reloaded when the
files change) and, with -tls-client-ca, requires client certificates
(mutual TLS); without TLS, an address other than loopback needs
-plaintext (see holdfast help server). An https upstream is verified against
-upstream-ca (default: the system's CAs); -upstream-cert and -upstream-key
are the relay's client certificate there.

-token-file (or $HOLDFAST_TOKEN, or -token) is the relay's own identity
at its upstream: that token needs data scope over every namespace the
relay serves, for it reads them and forwards its clients' acks under it
(the upstream drops acks outside it).

With -store-tokens the relay requires the store's tokens (those of
'holdfast token create') from its clients, with data scope over every
namespace they read or ack: 401 without one, 403 outside its scope, and
nothing followed upstream for a refused request. It syncs their records
(hashes and scopes, never secrets) from its upstream, a holdfast server or
a relay with -store-tokens (which serves POST /control/tokens/sync to
relays behind it from its copy); the answer comes as soon as a token
changes, so a token revoked in the store is refused here within a few
seconds. Its own token then also needs the relay scope. If no upstream
answers, the relay keeps the records it has, unless -token-max-stale says
to refuse every client after that long.

A relay is as closed as its upstream by default: given a token of its own
(its upstream requires tokens), it requires the store's tokens of its
clients, as -store-tokens does. -open serves every client without a token
instead: each may then read, through the relay, every namespace the
relay's own token reads upstream (a warning at start says so). A relay
without a token follows an open upstream, and serves openly too. See
docs/SERVER.md, "Tokens", and docs/RELAY.md.`,
		flags: relayFlags,
	}
}

func relayFlags(fs *flag.FlagSet) func(context.Context, *env, []string) error {
	addr := fs.String("addr", "", "listen `HOST:PORT` of the data plane (required)")
	adminAddr := fs.String("admin-addr", "", "listen `HOST:PORT` of /metrics, /readyz, /healthz and /statusz (empty: on -addr)")
	upstreamFlag := fs.String("upstream", "", "the upstream: the `URL[,URL...]` of holdfast servers or relays (required)")
	token := fs.String("token", "", "the bearer `TOKEN` the relay sends to an http(s) upstream: its own identity there (prefer -token-file or $"+tokenEnv+": a flag shows in the process list)")
	tokenFile := fs.String("token-file", "", "read the relay's own token from `FILE` (default: $"+tokenEnv+")")
	storeTokens := fs.Bool("store-tokens", false, "require the store's tokens from the relay's clients, synced from the upstream holdfast server (the relay's own token needs the relay scope); the default when the relay has a token of its own, unless -open")
	openRelay := fs.Bool("open", false, "serve every client without a token, though the relay has a token of its own: each may read what that token reads upstream")
	tokenMaxStale := fs.Duration("token-max-stale", 0, "with -store-tokens, refuse every client once the relay has not heard from a server about tokens for this long (0: keep the last records)")
	id := fs.String("id", "", "the client `ID` the relay reports upstream as (default: a random one)")
	cacheDir := fs.String("cache-dir", "", "persist the last good of every namespace served in `DIR`, and serve it at start (empty: no persistence)")
	heartbeat := fs.Duration("heartbeat", relay.DefaultHeartbeat, "progress event interval on the relay's watch streams")
	history := fs.Int("history", relay.DefaultHistory, "change sets kept per namespace for clients that resume")
	historyBytes := fs.Int64("history-bytes", relay.DefaultHistoryBytes, "bytes of change sets kept per namespace")
	var namespaces, allow list
	fs.Var(&namespaces, "namespaces", "follow these comma-separated `NAMESPACES` from the start, beside those clients ask for")
	fs.Var(&allow, "allow", "serve only the namespaces matching one of these comma-separated `PATTERNS` (path.Match syntax, e.g. payments.*); others get 403")
	maxNamespaces := fs.Int("max-namespaces", relay.DefaultMaxNamespaces, "the most namespaces followed at once; a request for one more gets 429")
	linger := fs.Duration("linger", relay.DefaultLinger, "how long a namespace is still followed after its last client left")
	maxSnapshots := fs.Int("max-snapshots", relay.DefaultMaxSnapshotsInFlight, "snapshot replies written at once; past it 503 with a spread Retry-After")
	retryWindow := fs.Duration("retry-after-window", relay.DefaultRetryAfterWindow, "the window the Retry-After of a refused snapshot is spread over")
	upCA := fs.String("upstream-ca", "", "trust the CA certificates of PEM `FILE` for an https upstream (default: the system's)")
	upCert := fs.String("upstream-cert", "", "present the client certificate of PEM `FILE` to an https upstream (mutual TLS; needs -upstream-key)")
	upKey := fs.String("upstream-key", "", "the private key of -upstream-cert, PEM `FILE`")
	lf := addListenFlags(fs)
	logs := addLogFlags(fs)
	return func(ctx context.Context, e *env, _ []string) error {
		if *addr == "" {
			return usagef("-addr is required")
		}
		up, err := parseUpstream(*upstreamFlag)
		if err != nil {
			return err
		}
		for _, ns := range namespaces {
			if err := transport.ValidateNamespace(ns); err != nil {
				return usagef("-namespaces: %v", err)
			}
		}
		for _, p := range allow {
			if _, err := path.Match(p, ""); err != nil {
				return usagef("-allow: pattern %q: %v", p, err)
			}
		}
		ownToken, err := secretFrom("-token", *token, "-token-file", *tokenFile)
		if err != nil {
			return err
		}
		switch {
		case *storeTokens && *openRelay:
			return usagef("-store-tokens and -open: choose one (a relay requires the store's tokens of its clients, or none)")
		case *storeTokens && ownToken == "":
			return usagef("-store-tokens needs the relay's own token (-token-file, $%s or -token), with the relay scope", tokenEnv)
		case *tokenMaxStale < 0:
			return usagef("-token-max-stale must not be negative, got %v", *tokenMaxStale)
		}
		switch {
		case *heartbeat <= 0:
			return usagef("-heartbeat must be positive, got %v", *heartbeat)
		case *history < 0 || *historyBytes < 0:
			return usagef("-history and -history-bytes must not be negative")
		case *maxNamespaces <= 0:
			return usagef("-max-namespaces must be positive, got %d", *maxNamespaces)
		case *linger < 0:
			return usagef("-linger must not be negative, got %v", *linger)
		case *maxSnapshots <= 0:
			return usagef("-max-snapshots must be positive, got %d", *maxSnapshots)
		case *retryWindow <= 0:
			return usagef("-retry-after-window must be positive, got %v", *retryWindow)
		}

		log := logs.logger(e.stderr)
		lc, err := lf.config(log)
		if err != nil {
			return err
		}
		upTLS, err := listen.ClientConfig(*upCA, *upCert, *upKey, log)
		if err != nil {
			return usagef("-upstream-ca, -upstream-cert, -upstream-key: %v", err)
		}
		m, err := newMetrics(relayService)
		if err != nil {
			return err
		}
		src, err := up.source(log, ownToken, upTLS)
		if err != nil {
			return errors.Join(err, m.shutdown())
		}
		var toks *access.Tokens
		var tokenSync http.Handler // relays behind this one sync from it
		tokensFlag := "-store-tokens"
		switch {
		case *openRelay && ownToken != "":
			log.Warn("relay: -open: every client may read, without a token, every namespace the relay's own token reads upstream")
		case !*storeTokens && ownToken != "":
			// The upstream requires tokens: so does the relay.
			log.Info("relay: requiring the store's tokens of clients, as its upstream does (-open to serve without)")
			*storeTokens = true
			tokensFlag = "a relay with a token requires the store's tokens of its clients (-open to serve without)"
		}
		if *storeTokens {
			// The sync goes to the upstream as the source does: its CA,
			// the relay's client certificate.
			syncTr := http.DefaultTransport.(*http.Transport).Clone()
			syncTr.TLSClientConfig = upTLS
			remote, err := tokentable.NewRemote(tokentable.RemoteConfig{URLs: up.urls, Secret: ownToken, Logger: log, MaxStale: *tokenMaxStale,
				Client: &http.Client{Transport: syncTr}})
			if err != nil {
				return errors.Join(usagef("%s: %v", tokensFlag, err), src.Close(), m.shutdown())
			}
			defer remote.Close()
			toks, tokenSync = remote.Tokens(), remote
		}
		opts := []relay.Option{
			relay.WithLogger(log),
			relay.WithMeterProvider(m.mp),
			relay.WithHeartbeat(*heartbeat),
			relay.WithHistory(*history, *historyBytes),
			relay.WithMaxNamespaces(*maxNamespaces),
			relay.WithLinger(*linger),
			relay.WithMaxSnapshotsInFlight(*maxSnapshots, *retryWindow),
		}
		if *cacheDir != "" {
			opts = append(opts, relay.WithCacheDir(*cacheDir))
		}
		if len(namespaces) > 0 {
			opts = append(opts, relay.WithNamespaces(namespaces...))
		}
		if len(allow) > 0 {
			opts = append(opts, relay.WithAllow(allow...))
		}
		if *id != "" {
			opts = append(opts, relay.WithID(*id))
		}
		if toks != nil {
			opts = append(opts, relay.WithTokens(toks))
		}
		r, err := relay.New(src, opts...)
		if err != nil {
			return errors.Join(err, src.Close(), m.shutdown())
		}
		err = serveRelay(ctx, log, r, m, lc, toks, tokenSync, *addr, *adminAddr, up.String())
		// The relay is closed: nothing reads from the upstream any more.
		err = errors.Join(err, src.Close(), m.shutdown())
		log.Info("stopped")
		return err
	}
}

// upstream is a parsed -upstream.
type upstream struct {
	urls []string // the http(s) base URLs
}

// parseUpstream parses -upstream: http(s) URLs separated by commas. Every
// error is a usage error.
func parseUpstream(s string) (upstream, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return upstream{}, usagef("-upstream is required")
	}
	var items []string
	for item := range strings.SplitSeq(s, ",") {
		if item = strings.TrimSpace(item); item != "" {
			items = append(items, item)
		}
	}
	if len(items) == 0 {
		return upstream{}, usagef("-upstream %q names no upstream", s)
	}
	var up upstream
	for _, item := range items {
		if err := checkScheme("-upstream", item); err != nil {
			return upstream{}, err
		}
		u, err := url.Parse(item)
		if err != nil {
			return upstream{}, usagef("-upstream: %v", err)
		}
		switch {
		case u.Scheme == "etcd":
			return upstream{}, usagef("-upstream %q: a relay follows holdfast servers, not etcd: run 'holdfast server -etcd %s' and follow it", s, u.Host)
		case u.Scheme != "http" && u.Scheme != "https":
			return upstream{}, usagef("-upstream %q: scheme must be http or https, got %q", item, u.Scheme)
		case u.Hostname() == "":
			return upstream{}, usagef("-upstream %q has no host", item)
		case u.RawQuery != "" || u.Fragment != "" || u.ForceQuery:
			return upstream{}, usagef("-upstream %q must not have a query or fragment", item)
		}
		up.urls = append(up.urls, item)
	}
	return up, nil
}

// parseEtcdMembers parses the etcd members of flag name (-etcd):
// HOST:PORT[,HOST:PORT...], each optionally etcd://HOST:PORT, into their
// client URLs, http://HOST:PORT. Every error is a usage error.
func parseEtcdMembers(name, s string) ([]string, error) {
	var urls []string
	for item := range strings.SplitSeq(s, ",") {
		if item = strings.TrimSpace(item); item == "" {
			continue
		}
		hostport := strings.TrimPrefix(item, "etcd://")
		if strings.Contains(hostport, "://") {
			return nil, usagef("%s %q: list HOST:PORT of etcd members only; they cannot be mixed with %q", name, s, item)
		}
		host, port, err := net.SplitHostPort(hostport)
		if err != nil || host == "" {
			return nil, usagef("%s %q: etcd member %q is not HOST:PORT", name, s, hostport)
		}
		if n, err := strconv.Atoi(port); err != nil || n <= 0 || n > 65535 {
			return nil, usagef("%s %q: etcd member %q has no valid port", name, s, hostport)
		}
		urls = append(urls, "http://"+hostport)
	}
	if len(urls) == 0 {
		return nil, usagef("%s %q names no etcd member", name, s)
	}
	return urls, nil
}

// String is the upstream for logs and /statusz, passwords redacted.
func (u upstream) String() string {
	shown := make([]string, len(u.urls))
	for i, s := range u.urls {
		shown[i] = s
		if p, err := url.Parse(s); err == nil {
			shown[i] = p.Redacted()
		}
	}
	return strings.Join(shown, ",")
}

// closingSource is a transport.Source the relay command closes once the
// relay is closed.
type closingSource interface {
	transport.Source
	Close() error
}

// source returns the transport.Source that follows the upstream.
func (u upstream) source(log *slog.Logger, token string, tlsConf *tls.Config) (closingSource, error) {
	opts := []transport.HTTPOption{transport.WithLogger(log), transport.WithUserAgent(version.UserAgent("holdfast-relay")), transport.WithTLSConfig(tlsConf)}
	if token != "" {
		opts = append(opts, transport.WithBearerToken(token))
	}
	return httpUpstream(u.urls, opts)
}

// httpUpstream follows urls: one HTTP source, or for several a failover
// source that moves to the next on a failure and returns to the first
// once it has been healthy for a while (the SDK's WithEndpoints).
func httpUpstream(urls []string, opts []transport.HTTPOption) (closingSource, error) {
	if len(urls) == 1 {
		return transport.NewHTTPSource(urls[0], opts...)
	}
	srcs := make([]*transport.HTTPSource, 0, len(urls))
	for _, u := range urls {
		s, err := transport.NewHTTPSource(u, opts...)
		if err != nil {
			for _, s := range srcs {
				_ = s.Close()
			}
			return nil, err
		}
		srcs = append(srcs, s)
	}
	return transport.NewFailoverSource(srcs)
}

// relayer is what the command uses of a *relay.Relay, so that its tests
// can stand one in.
type relayer interface {
	Handler() http.Handler
	Ready() error
	Namespaces() []relay.NamespaceStatus
	Close() error
}

var _ relayer = (*relay.Relay)(nil)

// serveRelay serves r's data plane on addr and its admin endpoints in
// front of it or, with adminAddr, on a listener of their own, every
// listener with lc's settings (TLS, caps, timeouts), until ctx ends; then
// it closes r (which ends its streams and flushes its cache) and the
// listeners.
func serveRelay(ctx context.Context, log *slog.Logger, r relayer, m *metrics, lc listen.Config, toks *access.Tokens, tokenSync http.Handler, addr, adminAddr, upstreamName string) (err error) {
	closeRelay := sync.OnceValue(r.Close)
	defer func() { err = errors.Join(err, closeRelay()) }()
	admin := http.NewServeMux()
	var adminToks *access.Tokens // the admin scope, where the data plane is
	if adminAddr == "" {
		adminToks = toks
	}
	adminRoutes(admin, m, r.Ready, func() any { return newRelayStatus(r, upstreamName) }, adminToks)

	var adminFailed <-chan struct{}
	data := r.Handler()
	if tokenSync != nil {
		mux := http.NewServeMux()
		mux.Handle("POST /control/tokens/sync", tokenSync)
		mux.Handle("/", data)
		data = mux
	}
	adminURL := ""
	if adminAddr == "" {
		// One listener: the admin paths in front of the data plane.
		admin.Handle("/", data)
		data = admin
	} else {
		adm, err := listenAndServe(lc, "admin", adminAddr, admin)
		if err != nil {
			return fmt.Errorf("admin: %w", err)
		}
		defer func() { err = errors.Join(err, adm.stop()) }()
		adminFailed, adminURL = adm.failed(), adm.url()
	}
	plane, err := listenAndServe(lc, "data", addr, data)
	if err != nil {
		return err
	}
	if adminURL == "" {
		adminURL = plane.url()
	}
	log.Info("relay serving", append([]any{"url", plane.url(), "admin_url", adminURL, "upstream", upstreamName}, buildAttrs()...)...)
	select {
	case <-ctx.Done():
		log.Info("shutting down")
	case <-plane.failed():
	case <-adminFailed:
	}
	// Shutdown refuses new connections at once and waits for the open
	// ones to go idle, which they do once Close has ended the relay's
	// streams.
	stopped := make(chan error, 1)
	go func() { stopped <- plane.stop() }()
	return errors.Join(closeRelay(), <-stopped)
}

// relayStatus is the JSON of the relay's /statusz.
type relayStatus struct {
	Ready      bool              `json:"ready"`
	Reason     string            `json:"reason,omitempty"` // why not ready
	Upstream   string            `json:"upstream"`
	Namespaces []namespaceStatus `json:"namespaces"`
	// Build is what `holdfast version -o json` prints.
	Build version.Info `json:"build"`
}

// namespaceStatus is one relay.NamespaceStatus in /statusz.
type namespaceStatus struct {
	Namespace string `json:"ns"`
	StoreID   string `json:"store_id"`
	Revision  int64  `json:"revision"`
	Cursor    int64  `json:"cursor"`
	// AgeSeconds is how long ago the upstream last confirmed the data (0:
	// it confirms it now); Unconfirmed says it is not confirming it now.
	AgeSeconds  float64 `json:"age_seconds"`
	Unconfirmed bool    `json:"unconfirmed"`
	Streams     int     `json:"streams"`
	LastError   string  `json:"last_error,omitempty"`
}

func newRelayStatus(r relayer, upstreamName string) relayStatus {
	st := relayStatus{Ready: true, Upstream: upstreamName, Namespaces: []namespaceStatus{}, Build: version.Read()}
	if err := r.Ready(); err != nil {
		st.Ready, st.Reason = false, err.Error()
	}
	for _, ns := range r.Namespaces() {
		st.Namespaces = append(st.Namespaces, namespaceStatus{
			Namespace:   ns.Namespace,
			StoreID:     ns.StoreID,
			Revision:    ns.Revision,
			Cursor:      ns.Cursor,
			AgeSeconds:  ns.Age.Seconds(),
			Unconfirmed: ns.Unconfirmed,
			Streams:     ns.Streams,
			LastError:   ns.LastError,
		})
	}
	return st
}
