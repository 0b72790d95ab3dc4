package transport

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/holdfast-dev/holdfast/internal/wire"
	"github.com/r3labs/sse/v2"
	backoffv1 "gopkg.in/cenkalti/backoff.v1"
)

// sseFrameOverhead is room, beyond the largest event data, for an event's
// field names, its id and its event type in the SSE reader's buffer.
const sseFrameOverhead = 4 << 10

// sseFrameLimit bounds one SSE frame for events whose data is at most
// maxData bytes: the data may come split over many "data: " lines, each
// costing up to 7 bytes of framing more, beyond the fixed overhead.
func sseFrameLimit(maxData int) int { return 8*maxData + sseFrameOverhead }

// sseResult is how one SSE stream ended.
type sseResult struct {
	err       error // never nil
	delivered int   // events handed to handle
	connected bool  // the server answered 200 text/event-stream
}

// watchSSE follows one SSE stream of GET /sdk/watch?ns=N&since=C.
func (s *HTTPSource) watchSSE(ctx context.Context, req WatchRequest, handle func(Event) error) sseResult {
	q := url.Values{"ns": {req.Namespace}, "since": {strconv.FormatInt(req.Since, 10)}}
	return s.followSSE(ctx, sseSpec{
		url:  s.endpoint(PathWatch, q),
		op:   "watch",
		name: strconv.Quote(req.Namespace),
		ns:   req.Namespace,
		decode: func(typ string, data []byte) (func() error, error) {
			e, err := decodeSSEEvent(typ, data, req.Namespace, s.opts.maxEventBytes)
			if err != nil {
				return nil, err
			}
			return func() error { return handle(e) }, nil
		},
	})
}

// sseSpec is one SSE stream of the protocol: where, how to name it in
// errors, and how to decode its events.
type sseSpec struct {
	url  string
	op   string // "watch", "stream": in errors
	name string // what the stream carries, quoted: in errors
	ns   string // for checkOK's message
	// connected is called with the reply's headers once the server
	// answered 200 text/event-stream.
	connected func(http.Header)
	// decode checks one event (with data, at most the frame limit) and
	// returns what delivers it; an error ends the stream, with nothing of
	// the event delivered.
	decode func(typ string, data []byte) (deliver func() error, err error)
}

// followSSE follows one SSE stream.
//
// r3labs/sse is used for one connection attempt only (ReconnectStrategy is
// backoff v1's StopBackOff; reconnects are package config's job). It calls
// our handler synchronously from this goroutine; its reader goroutine ends
// before SubscribeRawWithContext returns, because that only returns once the
// reader reported the end of the body. To stop early we cancel the request's
// context, which ends the body.
//
// Liveness is an event clock, not a byte clock: it starts with the request
// and only a decoded event resets it, so a stream of keepalive comments
// from an intermediary whose upstream is dead, or an event trickled a byte
// at a time, ends with ErrStreamIdle like a silent one. The clock stops
// while the handler runs: a slow consumer is not a dead server.
func (s *HTTPSource) followSSE(ctx context.Context, spec sseSpec) sseResult {
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	clock := startEventClock(s.replyTimeout(), cancel) // until the headers: the reply's time to start
	defer clock.stop()                                 // on a panic of handle

	var (
		res      sseResult
		stop     error // a decode or handler error that ended the stream
		panicked any   // a panic of handle, re-raised once the stream is down
	)
	c := sse.NewClient(spec.url, sse.ClientMaxBufferSize(sseFrameLimit(s.opts.maxEventBytes)))
	c.Connection = s.stream
	// A compressed event stream is buffered by whoever compresses it, and
	// would look dead: ask for none (net/http would otherwise ask for gzip).
	c.Headers["Accept-Encoding"] = "identity"
	// One subscribe = one connection attempt. The field is backoff v1's
	// BackOff; v1's Stop is what its RetryNotify checks for.
	c.ReconnectStrategy = &backoffv1.StopBackOff{}
	// The library neither closes the body of a rejected reply nor types its
	// error: do both here.
	c.ResponseValidator = func(_ *sse.Client, resp *http.Response) error {
		if resp.StatusCode == http.StatusOK {
			mt, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type"))
			if mt == "text/event-stream" {
				res.connected = true
				// This stream's own server says how often it beats.
				clock.retime(s.idleTimeoutFor(resp.Header))
				if spec.connected != nil {
					spec.connected(resp.Header)
				}
				return nil
			}
			defer closeBody(resp.Body)
			err := fmt.Errorf("%w: Content-Type %q, want text/event-stream",
				ErrMalformed, wire.Truncate(resp.Header.Get("Content-Type"), 64))
			if resp.Header.Get(HeaderStoreID) != "" {
				return err
			}
			body, _ := readBody(resp, maxErrorBodyBytes) // a web page? (bounded by the clock)
			return notHoldfast(err, resp, body, "an event stream")
		}
		defer closeBody(resp.Body)
		return checkOK(resp, spec.op, spec.ns)
	}

	s.opts.logger.Debug("transport: "+spec.op+" stream opening", "url", spec.url)
	err := c.SubscribeRawWithContext(sctx, func(ev *sse.Event) {
		if stop != nil || len(ev.Data) == 0 {
			// Aborted (events still queued are dropped), or a frame of
			// only retry:, id: or event: fields, which the library
			// delivers with no data.
			return
		}
		deliver, derr := spec.decode(string(ev.Event), ev.Data)
		if derr != nil {
			stop = fmt.Errorf("transport: %s %s: %w", spec.op, spec.name, derr)
			cancel()
			return
		}
		clock.stop()
		herr := callHandle(deliver, &panicked)
		if herr != nil {
			stop = herr
			cancel()
			return
		}
		res.delivered++
		clock.restart()
	})
	clock.stop() // what ended the stream is known by now
	if panicked != nil {
		// Raised here rather than through the library, whose reader
		// goroutine would otherwise block forever on its channels.
		panic(panicked)
	}

	var se *StatusError
	switch {
	case stop != nil:
		res.err = stop
	case ctx.Err() != nil:
		res.err = ctx.Err()
	case errors.As(err, &se) && se == err:
		// The server did answer, though its error body may have been
		// cut by the clock: its status and Retry-After matter more.
		res.err = se
	case clock.fired():
		phase := "its first event"
		switch {
		case !res.connected:
			phase = "the response headers"
		case res.delivered > 0:
			phase = "the next event"
		}
		res.err = fmt.Errorf("transport: %s %s: %w: no whole event for %v waiting for %s (comments and partial events do not count)",
			spec.op, spec.name, ErrStreamIdle, clock.timeoutNow(), phase)
	case err == nil:
		// The library returns nil on a clean EOF.
		res.err = fmt.Errorf("transport: %s %s: stream ended: %w", spec.op, spec.name, io.ErrUnexpectedEOF)
	case errors.Is(err, bufio.ErrTooLong):
		res.err = fmt.Errorf("transport: %s %s: %w", spec.op, spec.name,
			tooLarge("event", int64(s.opts.maxEventBytes)))
	case isStreamReset(err):
		// The server cut the stream (HTTP/2 RST_STREAM): what a closed
		// connection is over HTTP/1.1.
		res.err = fmt.Errorf("transport: %s %s: stream cut: %w (%w)", spec.op, spec.name, io.ErrUnexpectedEOF, err)
	default:
		res.err = fmt.Errorf("transport: %s %s: %w", spec.op, spec.name, err)
	}
	s.opts.logger.Debug("transport: "+spec.op+" stream ended", "url", spec.url,
		"events", res.delivered, "error", res.err.Error())
	return res
}

// eventClock ends a stream (by cancelling its context) when no event
// arrives for timeout. It is reset only by whole, decoded events.
type eventClock struct {
	timeout atomic.Int64 // a time.Duration
	since   time.Time    // of the running period
	timer   *time.Timer
	done    atomic.Bool
}

func startEventClock(timeout time.Duration, cancel context.CancelFunc) *eventClock {
	c := &eventClock{since: time.Now()}
	c.timeout.Store(int64(timeout))
	c.timer = time.AfterFunc(timeout, func() {
		c.done.Store(true)
		cancel()
	})
	return c
}

func (c *eventClock) timeoutNow() time.Duration { return time.Duration(c.timeout.Load()) }

// retime changes the timeout of the running period and of later ones. A
// shorter one (the stream's own heartbeat, after the headers) starts a
// new period: the time the reply took to start was the longer one's to
// bound, and counting it against the shorter would cut a slow server's
// stream before its first event.
func (c *eventClock) retime(timeout time.Duration) {
	old := time.Duration(c.timeout.Swap(int64(timeout)))
	if old == timeout || c.done.Load() {
		return
	}
	if timeout < old {
		c.since = time.Now()
		c.timer.Reset(timeout)
		return
	}
	c.timer.Reset(max(timeout-time.Since(c.since), 0))
}

// stop pauses the clock (while handle runs) or stops it for good.
func (c *eventClock) stop() { c.timer.Stop() }

// restart gives the stream a whole timeout from now, unless it already
// ran out.
func (c *eventClock) restart() {
	if !c.done.Load() {
		c.since = time.Now()
		c.timer.Reset(c.timeoutNow())
	}
}

// fired reports whether the clock ran out (and so cancelled the stream).
func (c *eventClock) fired() bool { return c.done.Load() }

// errHandlePanicked stops a stream whose handle panicked.
var errHandlePanicked = errors.New("transport: watch: handle panicked")

// callHandle calls deliver (which calls handle), turning a panic into
// *panicked and an error.
func callHandle(deliver func() error, panicked *any) (err error) {
	defer func() {
		if p := recover(); p != nil {
			*panicked = p
			err = errHandlePanicked
		}
	}()
	return deliver()
}

// sseFrameTransport hands r3labs/sse only whole events. The library's reader
// delivers whatever is buffered when the body fails or ends — a cut
// connection would turn half an event into one — so this wrapper releases
// bytes up to the last blank line only and drops a partial event when the
// body ends. It also bounds a partial event: one larger than limit fails
// with ErrTooLarge.
type sseFrameTransport struct {
	base     http.RoundTripper
	maxEvent int // the configured limit on an event's data
}

func (t *sseFrameTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := t.base.RoundTrip(req)
	if err != nil {
		return nil, err
	}
	// Only a stream is framed: the validator reads any other reply whole.
	if mt, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type")); resp.StatusCode == http.StatusOK && mt == "text/event-stream" {
		resp.Body = &sseFrameReader{rc: resp.Body, limit: sseFrameLimit(t.maxEvent), maxEvent: t.maxEvent}
	}
	return resp, nil
}

type sseFrameReader struct {
	rc       io.ReadCloser
	limit    int // on a frame
	maxEvent int // on its data, as configured: what an error names
	// buf[off:ready] are whole events not yet read; buf[ready:] is the
	// start of an event whose end has not arrived.
	buf        []byte
	off, ready int
	err        error
}

func (f *sseFrameReader) Read(p []byte) (int, error) {
	for f.off == f.ready {
		if f.err != nil {
			return 0, f.err
		}
		if f.ready > 0 {
			n := copy(f.buf, f.buf[f.ready:])
			f.buf = f.buf[:n]
			f.off, f.ready = 0, 0
		}
		if len(f.buf) > f.limit {
			f.err = fmt.Errorf("%w (its frame passed %d bytes unfinished)", tooLarge("event", int64(f.maxEvent)), f.limit)
			return 0, f.err
		}
		if len(f.buf) == cap(f.buf) {
			nb := make([]byte, len(f.buf), min(max(2*cap(f.buf), 4096), f.limit+1))
			copy(nb, f.buf)
			f.buf = nb
		}
		prev := len(f.buf)
		n, err := f.rc.Read(f.buf[prev:cap(f.buf)])
		f.buf = f.buf[:prev+n]
		// A terminator is at most 3 bytes and may straddle reads.
		from := max(prev-2, 0)
		if end := lastEventEnd(f.buf[from:]); end > 0 {
			f.ready = from + end
		}
		if err != nil {
			f.err = err // what follows f.ready is dropped
		}
	}
	n := copy(p, f.buf[f.off:f.ready])
	f.off += n
	return n, nil
}

func (f *sseFrameReader) Close() error { return f.rc.Close() }

var (
	lfLF   = []byte("\n\n")
	crCR   = []byte("\r\r")
	lfCRLF = []byte("\n\r\n") // also ends "\r\n\r\n"
)

// lastEventEnd returns the index just past the last blank line in b (an
// event terminator in any of SSE's line-ending styles), or 0.
func lastEventEnd(b []byte) int {
	end := 0
	if i := bytes.LastIndex(b, lfLF); i >= 0 {
		end = i + 2
	}
	if i := bytes.LastIndex(b, crCR); i >= 0 && i+2 > end {
		end = i + 2
	}
	if i := bytes.LastIndex(b, lfCRLF); i >= 0 && i+3 > end {
		end = i + 3
	}
	return end
}

// isStreamReset reports whether err is an HTTP/2 stream reset by the peer:
// net/http's bundled HTTP/2 client reports it with an unexported type
// whose text starts so.
func isStreamReset(err error) bool {
	return err != nil && strings.Contains(err.Error(), "stream error: stream ID ")
}
