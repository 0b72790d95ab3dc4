package transport

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
	"sync/atomic"
	"time"
)

// headerTransport adds the User-Agent, the protocol version and, for
// requests to the source's own host, the bearer token and the client id; it hands every
// reply's headers to onReply (what the server advertises). It never
// mutates the caller's request.
type headerTransport struct {
	base      http.RoundTripper
	token     string
	userAgent string
	clientID  string
	// fallback is the client id sent when clientID is empty
	// (HTTPSource.DefaultClientID); nil: none.
	fallback     atomic.Pointer[string]
	scheme, host string
	onReply      func(*http.Response)
}

// id is the client id the requests name: WithClientID's, else the
// default the source was given.
func (t *headerTransport) id() string {
	if t.clientID != "" {
		return t.clientID
	}
	if p := t.fallback.Load(); p != nil {
		return *p
	}
	return ""
}

func (t *headerTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	r := req.Clone(req.Context())
	if t.userAgent != "" {
		r.Header.Set("User-Agent", t.userAgent)
	}
	r.Header.Set(HeaderProtocol, strconv.Itoa(ProtocolVersion))
	r.Header.Set(HeaderCapabilities, clientCapabilities)
	if t.token != "" && r.URL.Scheme == t.scheme && r.URL.Host == t.host {
		r.Header.Set("Authorization", "Bearer "+t.token)
	}
	if id := t.id(); id != "" && r.URL.Scheme == t.scheme && r.URL.Host == t.host {
		r.Header.Set(HeaderClientID, id)
	}
	resp, err := t.base.RoundTrip(r)
	if err == nil && t.onReply != nil {
		t.onReply(resp)
	}
	return resp, err
}

// idleTransport abandons a request (a snapshot or an ack; watch streams are
// timed by their events instead, see watchSSE) when no bytes arrive for
// timeout: while waiting for the response headers (a black-holed server
// accepts the connection and sends nothing) and during each Read of the
// body (a stalled reply). The clock runs only while the client waits on the
// server — not while the consumer of the body is busy. Both cases fail with
// an error wrapping ErrStreamIdle.
type idleTransport struct {
	base    http.RoundTripper
	timeout func() time.Duration // read once per request: it may follow the server's heartbeat
}

func (t *idleTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	ctx, cancel := context.WithCancel(req.Context())
	timeout := t.timeout()
	w := &idleWatch{timeout: timeout, cancel: cancel}
	w.timer = time.AfterFunc(timeout, w.fire)
	resp, err := t.base.RoundTrip(req.WithContext(ctx))
	w.timer.Stop()
	if err != nil {
		cancel()
		if w.fired.Load() {
			return nil, w.err("response headers")
		}
		return nil, err
	}
	if w.fired.Load() {
		_ = resp.Body.Close()
		cancel()
		return nil, w.err("response headers")
	}
	resp.Body = &idleBody{rc: resp.Body, w: w}
	return resp, nil
}

type idleWatch struct {
	timeout time.Duration
	timer   *time.Timer
	cancel  context.CancelFunc
	fired   atomic.Bool
}

func (w *idleWatch) fire() {
	w.fired.Store(true)
	w.cancel()
}

func (w *idleWatch) err(phase string) error {
	return fmt.Errorf("%w: no bytes for %v waiting for %s", ErrStreamIdle, w.timeout, phase)
}

type idleBody struct {
	rc interface {
		Read([]byte) (int, error)
		Close() error
	}
	w *idleWatch
}

func (b *idleBody) Read(p []byte) (int, error) {
	if b.w.fired.Load() {
		return 0, b.w.err("the body")
	}
	b.w.timer.Reset(b.w.timeout)
	n, err := b.rc.Read(p)
	b.w.timer.Stop()
	if err != nil && b.w.fired.Load() {
		return n, b.w.err("the body")
	}
	return n, err
}

func (b *idleBody) Close() error {
	b.w.timer.Stop()
	err := b.rc.Close()
	b.w.cancel()
	return err
}
