package transport

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/holdfast-dev/holdfast/internal/version"
	"github.com/holdfast-dev/holdfast/internal/wire"
)

// Defaults of the HTTP source.
const (
	// DefaultMaxEventBytes bounds one SSE event's data and one change set of
	// a long-poll reply.
	DefaultMaxEventBytes = 1 << 20
	// DefaultMaxSnapshotBytes bounds a snapshot (after decompression) and a
	// long-poll reply.
	DefaultMaxSnapshotBytes int64 = 64 << 20
	// DefaultMaxSnapshotKeys bounds the keys of a snapshot: far more than a
	// namespace of configuration holds, and what bounds the memory a
	// snapshot of tiny keys costs to decode (a key costs about 44 bytes
	// however small it is on the wire).
	DefaultMaxSnapshotKeys = 1 << 20
	// DefaultIdleTimeout is three times the server's 5 s heartbeat.
	DefaultIdleTimeout = 15 * time.Second
	// DefaultLongPollWait is how long the server may hold a long-poll.
	DefaultLongPollWait = 30 * time.Second
	// DefaultUserAgent is sent unless WithUserAgent says otherwise:
	// "holdfast-go/" and the SDK's version (config.Version).
	DefaultUserAgent = "holdfast-go/" + version.SDK
)

// maxErrorBodyBytes bounds the read of an error reply's body.
const maxErrorBodyBytes = 64 << 10

// drainBytes is how much of an unwanted body is read before closing it, so
// that the connection can be reused.
const drainBytes = 4 << 10

// WatchMode selects how HTTPSource.Watch follows a namespace.
type WatchMode int

const (
	// WatchSSE streams GET /sdk/watch as Server-Sent Events (the default).
	WatchSSE WatchMode = iota
	// WatchLongPoll repeats GET /sdk/events, each held by the server until a
	// change arrives or the wait passes. It works through proxies that
	// buffer streams.
	WatchLongPoll
	// WatchAuto starts with SSE and switches the source to long-poll, for
	// later Watch calls, when streams keep failing before their first event
	// while plain requests succeed.
	WatchAuto
)

func (m WatchMode) String() string {
	switch m {
	case WatchSSE:
		return "sse"
	case WatchLongPoll:
		return "long-poll"
	case WatchAuto:
		return "auto"
	}
	return fmt.Sprintf("WatchMode(%d)", int(m))
}

// autoSwitchFailures is how many consecutive SSE streams must fail before
// their first event for WatchAuto to switch to long-poll.
const autoSwitchFailures = 3

// HTTPSource is the Source of the data-plane protocol over HTTP: snapshots
// from GET /sdk/snapshot, watches over SSE (GET /sdk/watch) or long-poll
// (GET /sdk/events), and acks to POST /sdk/ack.
//
// Every read of a response is bounded (WithMaxEventBytes,
// WithMaxSnapshotBytes; error bodies to 64 KiB). A snapshot or ack that
// receives no bytes for the idle timeout, and an SSE stream that delivers
// no whole event for it (comments, blank lines and the bytes of an
// unfinished event do not count), are abandoned with ErrStreamIdle, whether
// the server went quiet before or after its response headers. A long-poll
// is instead bounded by its wait plus the idle timeout.
//
// HTTPSource does not reconnect or back off: each Watch is one connection
// (or, in long-poll mode, one chain of requests) and returns when it ends.
// It is safe for concurrent use.
type HTTPSource struct {
	base   *url.URL
	opts   httpOptions
	client *http.Client // snapshot, ack: headers + idle timeout
	stream *http.Client // SSE: headers + whole events only, no overall Timeout (watchSSE times events)
	poll   *http.Client // long-poll: headers; per-request deadline

	// h2c is the source's own transport for an http:// endpoint, which
	// switches to HTTP/2 with prior knowledge once the server lists
	// CapabilityH2C; nil with WithHTTPClient or https.
	h2c *h2cTransport
	hdr *headerTransport // the headers of every request

	// info is what the server last advertised (ServerInfo); nil before
	// any reply from a holdfast server.
	info atomic.Pointer[ServerInfo]

	acks ackStreamState // POST /sdk/ack/stream, when offered over h2c
	// h2tls: the last reply over https came over HTTP/2 (ALPN), so an
	// ack stream shares the connection.
	h2tls atomic.Bool

	mu       sync.Mutex
	mode     WatchMode // effective: WatchSSE or WatchLongPoll
	sseFails int       // consecutive SSE streams that ended before any event
}

var (
	_ Source = (*HTTPSource)(nil)
	_ Acker  = (*HTTPSource)(nil)
)

// HTTPOption configures NewHTTPSource.
type HTTPOption interface{ apply(*httpOptions) }

type httpOptions struct {
	client           *http.Client
	clientSet        bool
	token            string
	logger           *slog.Logger
	maxEventBytes    int
	maxSnapshotBytes int64
	maxSnapshotKeys  int
	idleTimeout      time.Duration
	idleSet          bool // by WithIdleTimeout: not derived from the server's heartbeat
	mode             WatchMode
	longPollWait     time.Duration
	userAgent        string
	clientID         string // WithClientID
	tls              *tls.Config
}

type httpOptionFunc func(*httpOptions)

func (f httpOptionFunc) apply(o *httpOptions) { f(o) }

// WithHTTPClient sets the HTTP client. Its Transport (and CheckRedirect,
// Jar) are used for every request; its Timeout applies to snapshots and acks
// but not to streams, which are long by design and guarded by the idle
// timeout instead. The default client has dial, TLS handshake and
// response-header timeouts and no overall Timeout.
func WithHTTPClient(c *http.Client) HTTPOption {
	return httpOptionFunc(func(o *httpOptions) { o.client, o.clientSet = c, true })
}

// WithTLSConfig sets the TLS configuration of an https endpoint: the CAs
// to trust (RootCAs; default the system's), a client certificate for
// mutual TLS (Certificates or GetClientCertificate), ServerName. It is
// cloned; nil keeps the default. Over https the stream, snapshots and
// acks share one HTTP/2 connection, negotiated through ALPN. It configures
// the source's own HTTP client, so it excludes WithHTTPClient: set the TLS
// configuration in that client's Transport instead.
func WithTLSConfig(c *tls.Config) HTTPOption {
	return httpOptionFunc(func(o *httpOptions) { o.tls = c })
}

// WithBearerToken sends "Authorization: Bearer token" with every request to
// the source's host (never to another host a redirect leads to).
func WithBearerToken(token string) HTTPOption {
	return httpOptionFunc(func(o *httpOptions) { o.token = token })
}

// WithLogger sets the logger; nil or absent means discard.
func WithLogger(l *slog.Logger) HTTPOption {
	return httpOptionFunc(func(o *httpOptions) { o.logger = l })
}

// WithMaxEventBytes bounds one SSE event's data and one change set of a
// long-poll reply (default 1 MiB). A larger one fails with ErrTooLarge.
func WithMaxEventBytes(n int) HTTPOption {
	return httpOptionFunc(func(o *httpOptions) { o.maxEventBytes = n })
}

// WithMaxSnapshotBytes bounds a snapshot's body after decompression, and a
// long-poll reply (default 64 MiB). A larger one fails with ErrTooLarge.
func WithMaxSnapshotBytes(n int64) HTTPOption {
	return httpOptionFunc(func(o *httpOptions) { o.maxSnapshotBytes = n })
}

// WithMaxSnapshotKeys bounds the keys of a snapshot (default 1,048,576).
// A snapshot with more fails with ErrTooLarge, naming the limit, before
// its values are decoded.
func WithMaxSnapshotKeys(n int) HTTPOption {
	return httpOptionFunc(func(o *httpOptions) { o.maxSnapshotKeys = n })
}

// WithIdleTimeout sets how long a snapshot or ack may receive no bytes at
// all, and an SSE stream no whole event (a change or a progress event;
// comments and partial events do not count), before or after the response
// headers, before it is closed with ErrStreamIdle. An event must so arrive
// whole within the timeout: at the default limits, 1 MiB in 15 s. A
// long-poll may take its wait plus this timeout.
//
// Without it, the source derives the timeout from the heartbeat the server
// advertises (Holdfast-Heartbeat-Ms): three heartbeats, at least
// MinDerivedIdleTimeout and at most MaxDerivedIdleTimeout; until a server
// has said, and for servers that do not say (protocol version 0), it is
// DefaultIdleTimeout, three of the reference server's default 5 s
// heartbeats. IdleTimeout reports the one in force. The derived timeout
// times only what heartbeats pace, the events of an SSE stream after its
// headers (and so QuietLimit over SSE); what they do not (a reply's time to
// its headers, a snapshot's or ack's bytes, a long-poll past its wait)
// keeps at least DefaultIdleTimeout, so that a short heartbeat does not
// make a slow network look dead.
func WithIdleTimeout(d time.Duration) HTTPOption {
	return httpOptionFunc(func(o *httpOptions) { o.idleTimeout, o.idleSet = d, true })
}

// WithWatchMode selects SSE (default), long-poll or automatic fallback.
func WithWatchMode(m WatchMode) HTTPOption {
	return httpOptionFunc(func(o *httpOptions) { o.mode = m })
}

// WithLongPollWait sets how long the server may hold one long-poll
// (default 30 s).
func WithLongPollWait(d time.Duration) HTTPOption {
	return httpOptionFunc(func(o *httpOptions) { o.longPollWait = d })
}

// WithClientID sends id, the client's id (the one its acks carry), as
// HeaderClientID on every request to the source's server: a server with
// tokens takes a client's acks only from the identity it connected as.
func WithClientID(id string) HTTPOption {
	return httpOptionFunc(func(o *httpOptions) { o.clientID = id })
}

// WithUserAgent sets the User-Agent header (default DefaultUserAgent,
// "holdfast-go/VERSION").
func WithUserAgent(ua string) HTTPOption {
	return httpOptionFunc(func(o *httpOptions) { o.userAgent = ua })
}

// DefaultClientID sends id as HeaderClientID when the source was given
// no WithClientID (package config calls it with its client id, for a
// source of WithSource). An invalid id is ignored.
func (s *HTTPSource) DefaultClientID(id string) {
	if !validHeaderValue(id) || ValidateClientID(id) != nil {
		return
	}
	s.hdr.fallback.Store(&id)
}

// NewHTTPSource returns a source for the config plane at baseURL, an http or
// https URL whose path, if any, prefixes the data-plane paths.
func NewHTTPSource(baseURL string, opts ...HTTPOption) (*HTTPSource, error) {
	u, err := url.Parse(baseURL)
	if err != nil {
		return nil, fmt.Errorf("transport: invalid base URL %q: %w", baseURL, err)
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return nil, fmt.Errorf("transport: base URL %q: scheme must be http or https", baseURL)
	}
	if u.Host == "" || u.Hostname() == "" {
		return nil, fmt.Errorf("transport: base URL %q has no host", baseURL)
	}
	if u.RawQuery != "" || u.Fragment != "" || u.ForceQuery {
		return nil, fmt.Errorf("transport: base URL %q must not have a query or fragment", baseURL)
	}
	u.Path = strings.TrimSuffix(u.Path, "/")
	u.RawPath = ""

	o := httpOptions{
		maxEventBytes:    DefaultMaxEventBytes,
		maxSnapshotBytes: DefaultMaxSnapshotBytes,
		maxSnapshotKeys:  DefaultMaxSnapshotKeys,
		idleTimeout:      DefaultIdleTimeout,
		longPollWait:     DefaultLongPollWait,
		userAgent:        DefaultUserAgent,
	}
	for _, opt := range opts {
		if opt != nil {
			opt.apply(&o)
		}
	}
	switch {
	case o.clientSet && o.client == nil:
		return nil, errors.New("transport: HTTP client is nil")
	case o.clientSet && o.tls != nil:
		return nil, errors.New("transport: WithTLSConfig and WithHTTPClient exclude each other: set the TLS configuration in the client's Transport")
	case o.maxEventBytes <= 0:
		return nil, fmt.Errorf("transport: max event bytes must be positive, got %d", o.maxEventBytes)
	case o.maxSnapshotBytes <= 0:
		return nil, fmt.Errorf("transport: max snapshot bytes must be positive, got %d", o.maxSnapshotBytes)
	case o.maxSnapshotKeys <= 0:
		return nil, fmt.Errorf("transport: max snapshot keys must be positive, got %d", o.maxSnapshotKeys)
	case o.idleTimeout <= 0:
		return nil, fmt.Errorf("transport: idle timeout must be positive, got %v", o.idleTimeout)
	case o.longPollWait <= 0:
		return nil, fmt.Errorf("transport: long-poll wait must be positive, got %v", o.longPollWait)
	case o.mode != WatchSSE && o.mode != WatchLongPoll && o.mode != WatchAuto:
		return nil, fmt.Errorf("transport: unknown watch mode %d", int(o.mode))
	case !validHeaderValue(o.token):
		return nil, errors.New("transport: bearer token contains characters not allowed in a header")
	case !validHeaderValue(o.userAgent):
		return nil, errors.New("transport: user agent contains characters not allowed in a header")
	case o.clientID != "" && (!validHeaderValue(o.clientID) || ValidateClientID(o.clientID) != nil):
		return nil, errors.New("transport: the client id is not a valid client id, or has characters not allowed in a header")
	}
	if o.logger == nil {
		o.logger = slog.New(slog.DiscardHandler)
	}
	var h2c *h2cTransport
	if o.client == nil {
		maxIdle := o.idleTimeout
		if !o.idleSet {
			maxIdle = max(maxIdle, MaxDerivedIdleTimeout) // the idle timers cut sooner
		}
		t := defaultHTTPTransport(o.longPollWait + 2*maxIdle)
		if o.tls != nil {
			t.TLSClientConfig = o.tls.Clone()
		}
		o.client = &http.Client{Transport: t}
		if u.Scheme == "http" {
			h2c = newH2CTransport(t)
			o.client.Transport = h2c
		} else {
			o.client.Transport = &tlsWarmup{base: t, ready: make(chan struct{})}
		}
	}
	src := &HTTPSource{base: u, opts: o, h2c: h2c}

	rt := o.client.Transport
	if rt == nil {
		rt = http.DefaultTransport
	}
	hdr := &headerTransport{base: rt, token: o.token, userAgent: o.userAgent, clientID: o.clientID, scheme: u.Scheme, host: u.Host, onReply: src.noteReply}
	src.hdr = hdr
	idle := &idleTransport{base: hdr, timeout: src.replyTimeout}

	client := *o.client
	client.Transport = idle
	stream := *o.client
	// Not idle: a stream's liveness is its events, timed by watchSSE.
	stream.Transport = &sseFrameTransport{base: hdr, maxEvent: o.maxEventBytes}
	stream.Timeout = 0
	poll := *o.client
	poll.Transport = hdr
	poll.Timeout = 0

	src.mode = o.mode
	if src.mode == WatchAuto {
		src.mode = WatchSSE
	}
	src.client, src.stream, src.poll = &client, &stream, &poll
	return src, nil
}

// defaultHTTPTransport has bounded dial, TLS and response-header phases
// (the client has no overall Timeout, which would cut healthy streams). It
// keeps one idle connection per host: over HTTP/1.1 the stream holds one
// connection and snapshots and acks reuse one other, never a new one per
// request; over HTTP/2 (https, or h2c) one connection carries everything.
func defaultHTTPTransport(responseHeaderTimeout time.Duration) *http.Transport {
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.DialContext = (&net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second}).DialContext
	t.TLSHandshakeTimeout = 10 * time.Second
	t.ResponseHeaderTimeout = responseHeaderTimeout
	t.ExpectContinueTimeout = time.Second
	t.MaxIdleConnsPerHost = 1
	// Over https, HTTP/2 through ALPN; no request header indexed in
	// HPACK (as over h2c: every entry would sit in the server's table).
	t.ForceAttemptHTTP2 = true
	t.HTTP2 = &http.HTTP2Config{MaxEncoderHeaderTableSize: 1}
	return t
}

func validHeaderValue(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < ' ' || c == 0x7f {
			return false
		}
	}
	return true
}

// WatchMode reports how Watch follows a namespace now: WatchSSE or
// WatchLongPoll. With WithWatchMode(WatchAuto) it starts as WatchSSE and
// may become WatchLongPoll.
func (s *HTTPSource) WatchMode() WatchMode {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.mode
}

// Close ends the ack stream (waiting for its goroutine) and closes the
// client's idle connections. It does not end running watches (cancel
// their contexts). It is idempotent and always returns nil.
func (s *HTTPSource) Close() error {
	s.closeAckStream()
	s.opts.client.CloseIdleConnections() // the caller's client, as given
	return nil
}

// closeIdle closes the idle connections of the source's own transport
// (not those of a client given with WithHTTPClient, which other sources
// may share).
func (s *HTTPSource) closeIdle() {
	if !s.opts.clientSet {
		s.opts.client.CloseIdleConnections()
	}
}

// probe asks for ns's changes after since without waiting (GET
// /sdk/events, wait 0s): a cheap request that a healthy server answers at
// once with 200 and its store id, and that fails when the server is down
// or failing, or refuses since as above its head (409: it is behind).
// The changes in the reply are not read.
func (s *HTTPSource) probe(ctx context.Context, ns string, since int64) (storeID string, err error) {
	q := url.Values{"ns": {ns}, "since": {strconv.FormatInt(since, 10)}, "wait": {"0s"}}
	hreq, err := http.NewRequestWithContext(ctx, http.MethodGet, s.endpoint(PathEvents, q), nil)
	if err != nil {
		return "", fmt.Errorf("transport: probe %q: %w", ns, err)
	}
	hreq.Header.Set("Accept", "application/json")
	resp, err := s.client.Do(hreq)
	if err != nil {
		return "", requestError(ctx, "probe", ns, err)
	}
	defer closeBody(resp.Body)
	if err := checkOK(resp, "probe", ns); err != nil {
		return "", err
	}
	return resp.Header.Get(HeaderStoreID), nil
}

func (s *HTTPSource) endpoint(path string, q url.Values) string {
	u := *s.base
	u.Path = s.base.Path + path
	u.RawQuery = q.Encode()
	return u.String()
}

// Snapshot fetches a namespace: GET /sdk/snapshot, conditional on
// req.KnownStoreID and req.KnownRevision when KnownStoreID is set. On 304 it
// returns a Snapshot with nil Values (store id, revision, cursor and the
// age of relayed data from the reply's headers) and ErrNotModified. A 200
// always has non-nil Values; its age is the body's, or the headers' when
// they say the data is older.
func (s *HTTPSource) Snapshot(ctx context.Context, req SnapshotRequest) (*Snapshot, error) {
	if err := ValidateNamespace(req.Namespace); err != nil {
		return nil, err
	}
	hreq, err := http.NewRequestWithContext(ctx, http.MethodGet,
		s.endpoint(PathSnapshot, url.Values{"ns": {req.Namespace}}), nil)
	if err != nil {
		return nil, fmt.Errorf("transport: snapshot %q: %w", req.Namespace, err)
	}
	hreq.Header.Set("Accept", "application/json")
	// Set explicitly, so that the Transport does not decompress on its own,
	// without a limit: readBody decompresses within maxSnapshotBytes.
	hreq.Header.Set("Accept-Encoding", "gzip")
	if req.KnownStoreID != "" {
		hreq.Header.Set("If-None-Match", wire.ETag(req.KnownStoreID, req.KnownRevision))
	}
	resp, err := s.client.Do(hreq)
	if err != nil {
		return nil, requestError(ctx, "snapshot", req.Namespace, err)
	}
	defer closeBody(resp.Body)

	switch {
	case resp.StatusCode == http.StatusNotModified && req.KnownStoreID == "":
		return nil, fmt.Errorf("%w: snapshot %q: 304 Not Modified to an unconditional request", ErrMalformed, req.Namespace)
	case resp.StatusCode == http.StatusNotModified:
		snap, err := notModifiedSnapshot(req, resp.Header)
		if err != nil {
			return nil, fmt.Errorf("transport: snapshot %q: %w", req.Namespace, err)
		}
		return snap, ErrNotModified
	case resp.StatusCode == http.StatusOK:
		body, err := readBody(resp, s.opts.maxSnapshotBytes)
		if err != nil {
			return nil, requestError(ctx, "snapshot", req.Namespace, fmt.Errorf("reading reply: %w", err))
		}
		snap, err := decodeSnapshot(body, req.Namespace, s.opts.maxSnapshotKeys)
		if err != nil {
			if errors.Is(err, ErrMalformed) {
				err = notHoldfast(err, resp, body, "a snapshot")
			}
			return nil, fmt.Errorf("transport: snapshot %q: %w", req.Namespace, err)
		}
		replyAge(resp.Header, &snap.AgeMillis, &snap.Unconfirmed)
		return snap, nil
	default:
		return nil, checkOK(resp, "snapshot", req.Namespace)
	}
}

// Ack reports what the client applied or rejected: POST /sdk/ack.
func (s *HTTPSource) Ack(ctx context.Context, ack Ack) error {
	if err := checkAck(ack); err != nil {
		return err
	}
	// A nack listing many failures must still fit the server's limits.
	ack.Error = wire.TruncateAckError(ack.Error)
	body, err := json.Marshal(ack)
	if err != nil {
		return fmt.Errorf("transport: ack %q: %w", ack.Namespace, err)
	}
	return s.postJSON(ctx, PathAck, "ack", ack.Namespace, body)
}

// postJSON POSTs body (JSON) to path, and wants a 2xx reply; op and name
// say what it is in an error (requestError's).
func (s *HTTPSource) postJSON(ctx context.Context, path, op, name string, body []byte) error {
	hreq, err := http.NewRequestWithContext(ctx, http.MethodPost, s.endpoint(path, nil), bytes.NewReader(body))
	if err != nil {
		return fmt.Errorf("transport: %s %q: %w", op, name, err)
	}
	hreq.Header.Set("Content-Type", "application/json")
	resp, err := s.client.Do(hreq)
	if err != nil {
		return requestError(ctx, op, name, err)
	}
	defer closeBody(resp.Body)
	if resp.StatusCode < 200 || resp.StatusCode >= 300 {
		return statusError(resp)
	}
	return nil
}

// Watch delivers the namespace's changes after req.Since, and progress
// events, to handle, from the calling goroutine and in order, over one SSE
// stream or a chain of long-polls (see WithWatchMode). It returns when ctx
// ends (ctx.Err()), handle fails (its error, as is), or the stream ends or
// fails: ErrStreamIdle, ErrTooLarge, ErrMalformed (a bad event: nothing of
// it was delivered), a *StatusError (which wraps *CompactedError on 410), or
// an error wrapping io.ErrUnexpectedEOF when the server closed the stream.
// It never returns nil, and no goroutine of it outlives it.
func (s *HTTPSource) Watch(ctx context.Context, req WatchRequest, handle func(Event) error) error {
	if err := ValidateNamespace(req.Namespace); err != nil {
		return err
	}
	if handle == nil {
		return errors.New("transport: watch: handle is nil")
	}
	if req.Since < 0 {
		return fmt.Errorf("transport: watch %q: negative cursor %d", req.Namespace, req.Since)
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	if s.WatchMode() == WatchLongPoll {
		return s.watchLongPoll(ctx, req, handle)
	}
	r := s.watchSSE(ctx, req, handle)
	if s.opts.mode == WatchAuto {
		s.noteStream(ctx, r, func(ctx context.Context) bool {
			q := url.Values{"ns": {req.Namespace}, "since": {strconv.FormatInt(req.Since, 10)}, "wait": {"0s"}}
			return s.probeURL(ctx, s.endpoint(PathEvents, q))
		})
	}
	return r.err
}

// noteStream counts SSE streams that fail before their first event and, in
// WatchAuto, switches to long-poll after autoSwitchFailures of them in a row
// when plain requests get through (the stream's own headers did, or a probe
// does): the signature of a proxy that buffers streams.
func (s *HTTPSource) noteStream(ctx context.Context, r sseResult, probe func(context.Context) bool) {
	if r.delivered > 0 {
		s.mu.Lock()
		s.sseFails = 0
		s.mu.Unlock()
		return
	}
	if ctx.Err() != nil || !(errors.Is(r.err, ErrStreamIdle) || errors.Is(r.err, io.ErrUnexpectedEOF)) {
		return
	}
	s.mu.Lock()
	s.sseFails++
	n := s.sseFails
	s.mu.Unlock()
	if n < autoSwitchFailures {
		return
	}
	if !r.connected && !s.probeOK(ctx, probe) {
		return
	}
	s.mu.Lock()
	switched := s.mode != WatchLongPoll
	s.mode = WatchLongPoll
	s.mu.Unlock()
	if switched {
		s.opts.logger.Info("transport: SSE streams keep failing before their first event while plain requests succeed (a proxy that buffers them?); switching to long-poll",
			"failures", n, "last_error", r.err.Error(), "url", s.base.Redacted())
	}
}

// probeOK reports whether a plain request gets an answer from the server
// (probe: a long-poll with no wait), bounded by the idle timeout.
func (s *HTTPSource) probeOK(ctx context.Context, probe func(context.Context) bool) bool {
	pctx, cancel := context.WithTimeout(ctx, s.replyTimeout())
	defer cancel()
	return probe(pctx)
}

// probeURL reports whether a GET of u gets an answer below 500.
func (s *HTTPSource) probeURL(ctx context.Context, u string) bool {
	hreq, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return false
	}
	resp, err := s.poll.Do(hreq)
	if err != nil {
		return false
	}
	closeBody(resp.Body)
	return resp.StatusCode < 500
}

// requestError describes a failed round trip: ctx's own error when ctx
// ended, otherwise the error wrapped (ErrStreamIdle stays testable).
func requestError(ctx context.Context, op, ns string, err error) error {
	if ctxErr := ctx.Err(); ctxErr != nil {
		return ctxErr
	}
	return fmt.Errorf("transport: %s %q: %w", op, ns, err)
}

// checkOK accepts a 200 reply; any other success is malformed, and an error
// status becomes a *StatusError.
func checkOK(resp *http.Response, op, ns string) error {
	switch {
	case resp.StatusCode == http.StatusOK:
		return nil
	case resp.StatusCode >= 200 && resp.StatusCode < 300:
		return fmt.Errorf("%w: %s %q: unexpected status %d", ErrMalformed, op, ns, resp.StatusCode)
	}
	return statusError(resp)
}

// closeBody drains a little of what is left, so the connection can be
// reused, and closes the body.
func closeBody(rc io.ReadCloser) {
	_, _ = io.CopyN(io.Discard, rc, drainBytes)
	_ = rc.Close()
}

// tlsWarmup makes the first requests over https share one connection:
// net/http dials one connection per request started before the first
// connection is up (the protocol is not known until ALPN), and keeps only
// one of them for HTTP/2, closing the others: a handshake each, for
// nothing. So requests that start while the first one is on its way wait
// for it (its response headers, or its failure), at most warmWait, then
// find its connection in the pool.
type tlsWarmup struct {
	base    http.RoundTripper
	started atomic.Bool
	ready   chan struct{} // closed when the first request got its answer
}

func (w *tlsWarmup) RoundTrip(req *http.Request) (*http.Response, error) {
	if w.started.CompareAndSwap(false, true) {
		defer close(w.ready)
		return w.base.RoundTrip(req)
	}
	select {
	case <-w.ready:
	default:
		t := time.NewTimer(warmWait)
		select {
		case <-w.ready:
		case <-t.C:
		case <-req.Context().Done():
		}
		t.Stop()
	}
	return w.base.RoundTrip(req)
}

func (w *tlsWarmup) CloseIdleConnections() {
	if c, ok := w.base.(interface{ CloseIdleConnections() }); ok {
		c.CloseIdleConnections()
	}
}
