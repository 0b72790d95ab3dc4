package transport

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sync"
	"time"

	"github.com/holdfast-dev/holdfast/internal/wire"
)

// CapabilityAckStream is the capability of POST /sdk/ack/stream: one
// long-lived request per client over HTTP/2 whose body is a sequence of
// AckBatch JSON texts, one per line. Each batch then costs the server one
// DATA frame, not a request (its own stream, headers both ways, a reply).
const CapabilityAckStream = "ack-stream"

// PathAckStream is the path of the ack stream.
const PathAckStream = "/sdk/ack/stream"

// errAckStreamDown: the ack stream is not open (it failed, or it was
// never offered); the batch goes as a request instead.
var errAckStreamDown = errors.New("transport: ack stream down")

// ackStream is an open POST /sdk/ack/stream: lines written to w travel as
// the request body; done is closed once the request has ended (err set).
type ackStream struct {
	w        *ackPipe
	cancel   context.CancelFunc // of the request
	answered chan struct{}      // closed once the server answered 200: it reads the lines
	done     chan struct{}
	err      error
}

// ackStreamAnswerWait bounds how long a line waits for its stream's first
// answer: the server answers 200 at once, but through a hop that speaks
// HTTP/1.1 to it (it refuses the stream, 400) or that buffers request
// bodies (no answer until the body ends, that is never) a line written is
// a line lost. Until the stream has been answered its lines count as not
// sent: the batch goes as a request (a batch sent twice is harmless).
const ackStreamAnswerWait = 5 * time.Second

// An ack stream stays open for as long as the source (or until it fails),
// however seldom its batches: one opened for a batch and closed again
// costs the server two writes and a handler, where a line of an open one
// costs a DATA frame. At 10,000 clients of one server, streams that closed
// when quiet and opened again for a publish's acks made the next publish
// 3-6x slower to reach the fleet (3.3 s, against 0.5 s with the streams
// open and 1.5 s with one POST per batch). An open stream costs the server
// about 10 KiB per client (docs/PROTOCOL.md).

// ackStreamDrainClose is how long the server has, once an ack stream's
// body has ended (Close, a move to another endpoint), to read the rest of
// it and end its reply before the request is cut: a server that stopped
// answering must not hold Close.
const ackStreamDrainClose = time.Second

// ackStreamState is the source's ack stream, opened on first use when the
// server offers it over h2c, reopened after it fails.
type ackStreamState struct {
	writing sync.Mutex // held while writing: lines must not interleave
	line    []byte     // under writing: the line being written, kept for the next

	mu  sync.Mutex // guards cur, refused and closed
	cur *ackStream
	// refused is when a stream was last answered with an error status (a
	// fault, a token refused): its lines may be lost unrecorded, so for
	// ackStreamRetry batches go as POSTs, whose failures are retried.
	refused time.Time
	closed  bool
	wg      sync.WaitGroup // every stream's goroutine
}

// maxKeptAckLine is the largest ack-stream line buffer kept for the next
// line: a relay's full batch (maxRelayedBatch acks) fits.
const maxKeptAckLine = 1 << 20

// ackStreamRetry is how long after a refused ack stream batches go as
// POSTs before a stream is tried again.
const ackStreamRetry = 30 * time.Second

// ackStreamUsable reports whether batches may go on the ack stream: the
// server offers it and this source speaks HTTP/2 to it, h2c or over TLS
// (over HTTP/1.1 a request body that never ends would hold a connection
// of its own).
func (s *HTTPSource) ackStreamUsable() bool {
	return (s.h2c != nil && s.h2c.on.Load() || s.h2tls.Load()) && s.offers(CapabilityAckStream)
}

// sendOnAckStream writes b as one line of the ack stream, opening it if
// need be. An error means the line may not have reached the server: the
// caller sends the batch as a request.
func (s *HTTPSource) sendOnAckStream(ctx context.Context, b wire.AckBatch) error {
	st := &s.acks
	st.writing.Lock()
	defer st.writing.Unlock()
	// A relay's line holds thousands of acks: encoded into the last
	// one's buffer, not a new one grown by doubling (the pipe copies it).
	line := append(wire.AppendAckBatch(st.line[:0], b), '\n')
	if cap(line) <= maxKeptAckLine {
		st.line = line
	}
	st.mu.Lock()
	if st.closed || !st.refused.IsZero() && time.Since(st.refused) < ackStreamRetry {
		st.mu.Unlock()
		return errAckStreamDown
	}
	if st.cur != nil {
		select {
		case <-st.cur.done:
			st.cur = nil // it ended: open another
		default:
		}
	}
	if st.cur == nil {
		st.cur = s.openAckStream()
	}
	cur := st.cur
	st.mu.Unlock()
	err := cur.w.write(ctx, line)
	unanswered := false
	if err == nil {
		err = cur.waitAnswer(ctx)
		unanswered = err != nil && ctx.Err() == nil
	}
	if err != nil {
		cur.cancel()
		st.mu.Lock()
		if st.cur == cur {
			st.cur = nil
		}
		if unanswered {
			st.refused = time.Now()
		}
		st.mu.Unlock()
		return fmt.Errorf("%w: %w", errAckStreamDown, err)
	}
	return nil
}

// waitAnswer waits until the server answered the stream (nil), or it
// ended, ctx ended or ackStreamAnswerWait passed (the stream is refused
// for ackStreamRetry: the hop does not carry it).
func (as *ackStream) waitAnswer(ctx context.Context) error {
	select {
	case <-as.answered:
		return nil
	default:
	}
	timeout := time.NewTimer(ackStreamAnswerWait)
	defer timeout.Stop()
	select {
	case <-as.answered:
		return nil
	case <-as.done:
		return fmt.Errorf("ended before its answer: %w", as.err)
	case <-ctx.Done():
		return ctx.Err()
	case <-timeout.C:
		return fmt.Errorf("no answer in %v", ackStreamAnswerWait)
	}
}

// openAckStream starts the request whose body is the returned stream's
// pipe; its goroutine ends when the pipe is closed or the request fails,
// and closeAckStream waits for it.
func (s *HTTPSource) openAckStream() *ackStream {
	pr := newAckPipe()
	ctx, cancel := context.WithCancel(context.Background())
	body := &ackBody{r: pr, cancel: cancel}
	as := &ackStream{w: pr, cancel: cancel, answered: make(chan struct{}), done: make(chan struct{})}
	s.acks.wg.Add(1)
	go func() {
		defer s.acks.wg.Done()
		defer close(as.done)
		defer cancel()
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, s.endpoint(PathAckStream, nil), body)
		if err == nil {
			req.Header.Set("Content-Type", "application/x-ndjson")
			var resp *http.Response
			if resp, err = s.poll.Do(req); err == nil {
				// Once the reply's headers are in, HTTP/2 watches ctx no
				// more: closing the body is what aborts the stream when
				// it is cancelled.
				stop := context.AfterFunc(ctx, func() { _ = resp.Body.Close() })
				if resp.StatusCode == http.StatusOK {
					close(as.answered)
				} else {
					err = statusError(resp)
					s.acks.mu.Lock()
					s.acks.refused = time.Now()
					s.acks.mu.Unlock()
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				closeBody(resp.Body)
				stop()
			}
		}
		if err == nil {
			err = io.EOF
		}
		as.err = err
		pr.closeWithError(err) // a writer waiting on it returns
	}()
	return as
}

// closeAckStream ends the ack stream for good and waits for its goroutine
// (a write in flight returns an error).
func (s *HTTPSource) closeAckStream() {
	st := &s.acks
	st.mu.Lock()
	st.closed = true
	cur := st.cur
	st.cur = nil
	st.mu.Unlock()
	if cur != nil {
		cur.end()
	}
	st.wg.Wait() // ackBody bounds it
}

// end ends the stream's body (the server has every line) for Close or a
// move to another endpoint: its request is cut if the server has not
// answered within ackStreamDrainClose, even one that stopped reading, so
// that the body never reaches its end (the flow-control window is full).
func (as *ackStream) end() {
	time.AfterFunc(ackStreamDrainClose, as.cancel)
	as.w.closeWithError(io.EOF)
}

// release lets go of the source's connections while a FailoverSource
// uses another endpoint: it ends the ack stream (the next batch opens
// another), waits for its request to end (ackBody bounds it) or ctx, and
// closes the idle connections. Requests running are not touched.
func (s *HTTPSource) release(ctx context.Context) {
	st := &s.acks
	st.mu.Lock()
	cur := st.cur
	st.cur = nil
	st.mu.Unlock()
	if cur != nil {
		cur.end()
		select {
		case <-cur.done:
		case <-ctx.Done():
		}
	}
	s.closeIdle()
}

// ackBody is an ack stream's request body. Once it has ended (by Close or
// a move) the server has ackStreamDrainClose to end its reply, or the
// request is cut (ackStream.end): a server that stopped answering must
// not hold the request's goroutine, nor Close that waits for it.
type ackBody struct {
	r      *ackPipe
	cancel context.CancelFunc
}

func (b *ackBody) Read(p []byte) (int, error) {
	n, err := b.r.Read(p)
	if err != nil && err != io.EOF {
		// Aborted by this side (a stalled write, Close): cancel first,
		// so that the transport sees a cancelled request, not a failure
		// of h2c to fall back from.
		b.cancel()
	}
	return n, err
}

// Close is the transport's, when it stops sending the body: the server
// answered before its end (a refusal), or the request failed. A line
// written later fails, and goes as a request.
func (b *ackBody) Close() error {
	b.r.closeWithError(errAckStreamDown)
	return nil
}

// ackPipe carries an ack stream's lines to the transport that sends them
// as its request body. A line written while nothing waits is handed over
// at once: the write returns without waiting for the transport to take it
// (a pipe's rendezvous cost every ack two goroutine switches, and a timer
// for ctx). A line written while an earlier one still waits (the
// transport is behind: the stream's window may be full) waits until the
// transport took it, or ctx ends, which ends the stream, as a stalled
// write did: the batch then goes as a request.
type ackPipe struct {
	mu    sync.Mutex
	moved sync.Cond // broadcast when bytes were taken, added or the pipe closed
	buf   []byte    // buf[off:] is waiting
	off   int
	taken int64 // bytes the transport took, ever
	added int64 // bytes written, ever
	err   error // once set, writes fail with it; reads return it once buf is drained
}

func newAckPipe() *ackPipe {
	p := &ackPipe{}
	p.moved.L = &p.mu
	return p
}

// write adds line; see ackPipe.
func (p *ackPipe) write(ctx context.Context, line []byte) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.err != nil {
		return p.err
	}
	behind := p.off < len(p.buf)
	if !behind && p.off > 0 {
		p.buf, p.off = p.buf[:0], 0
	}
	p.buf = append(p.buf, line...)
	p.added += int64(len(line))
	end := p.added
	p.moved.Broadcast()
	if !behind {
		return nil
	}
	stop := context.AfterFunc(ctx, func() { p.closeWithError(ctx.Err()) })
	defer stop()
	for p.taken < end && p.err == nil {
		p.moved.Wait()
	}
	if p.taken < end {
		return p.err
	}
	return nil
}

// Read is the transport's: it waits for a line.
func (p *ackPipe) Read(b []byte) (int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for p.off == len(p.buf) && p.err == nil {
		p.moved.Wait()
	}
	if p.off == len(p.buf) {
		return 0, p.err
	}
	n := copy(b, p.buf[p.off:])
	p.off += n
	p.taken += int64(n)
	if p.off == len(p.buf) && cap(p.buf) > maxKeptAckLine {
		p.buf, p.off = nil, 0 // a relay's big line: not kept
	}
	p.moved.Broadcast()
	return n, nil
}

// closeWithError ends the pipe: reads return err once what waits is read
// (io.EOF: the body's end), writes fail with it.
func (p *ackPipe) closeWithError(err error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.err == nil {
		p.err = err
		p.moved.Broadcast()
	}
}
