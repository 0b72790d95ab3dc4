package transport

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// DefaultFailbackAfter is how long the preferred endpoint of a
// FailoverSource must answer its health probes, every one of them, before
// the source returns to it.
const DefaultFailbackAfter = 30 * time.Second

// The preferred endpoint is probed probesPerWindow times per failback
// window, but at most every maxProbeEvery: a long window does not make
// a probe rare enough to miss an outage in it.
const (
	probesPerWindow = 6
	maxProbeEvery   = 5 * time.Second
)

// errSwitched is the cause with which a switch cuts the watches on the
// endpoint it leaves; they resume on the new one.
var errSwitched = errors.New("transport: failover: endpoint switched")

// EndpointReporter is implemented by sources that can say which endpoint
// serves the client now: a base URL, for people (a password in it
// redacted).
type EndpointReporter interface {
	Endpoint() string
}

// WatchModeReporter is implemented by sources that can say how they
// watch now: WatchSSE or WatchLongPoll (WatchAuto's choice).
type WatchModeReporter interface {
	WatchMode() WatchMode
}

var (
	_ EndpointReporter  = (*HTTPSource)(nil)
	_ EndpointReporter  = (*FailoverSource)(nil)
	_ WatchModeReporter = (*HTTPSource)(nil)
	_ WatchModeReporter = (*FailoverSource)(nil)
)

// Endpoint returns the source's base URL, with any password redacted.
func (s *HTTPSource) Endpoint() string { return s.base.Redacted() }

// FailoverSource is a Source over an ordered list of endpoints (servers or
// relays) that serve the same store: the same store id and revisions, so
// that a cursor of one is a cursor of any. Every request goes to one
// endpoint, the current one; the first is the preferred one.
//
// A request that fails on the current endpoint for the endpoint's sake (it
// could not be reached, the connection broke or went idle, a 5xx, a 429,
// a reply that is not holdfast's or does not decode) makes the next
// endpoint current, wrapping around. The error is returned as it is: the
// caller backs off as it would (Retry-After included) and resumes from its
// cursor, now on the next endpoint, without a new snapshot when the store
// is the same there. What concerns the request or the data (404 of a
// namespace, 401/403, 410, 409, 400, ErrTooLarge) and ends of the
// caller's own (its context, its handler's error) move nothing.
//
// While another endpoint is current, the preferred one is probed in the
// background with a cheap request (a long-poll that does not wait, from
// the client's cursor), and once it has answered every probe, at or past
// that cursor and with the same store id, for the failback window
// (WithFailbackAfter, default DefaultFailbackAfter), the source returns
// to it: a blip shorter than the window moves nothing.
//
// A switch moves all traffic: watches and streams running on the endpoint
// left are cut and resume on the new one from the cursor they had
// delivered, without returning to the caller; the ack stream of the one
// left is ended, and its idle connections are closed. So each endpoint
// keeps the HTTP source's one connection (over h2c), and no endpoint but
// the current one is connected to, except the preferred one while it is
// probed. Switches are logged at Info (from, to, reason) through the
// first source's logger.
//
// It is safe for concurrent use. Close it to stop the prober and close
// every source.
type FailoverSource struct {
	srcs          []*HTTPSource
	log           *slog.Logger
	failbackAfter time.Duration
	probeEvery    time.Duration

	cur atomic.Int32 // the current endpoint

	ctx    context.Context // ends with Close: the prober and releases
	cancel context.CancelFunc
	wg     sync.WaitGroup

	hintMu sync.Mutex
	hint   probeHint // what the prober asks the preferred endpoint for

	mu      sync.Mutex
	watches map[*failoverWatch]struct{} // running watches and streams
	probing bool                        // the prober runs
	returns int                         // switches to the preferred endpoint so far: a run of good probes spans none
	closed  bool
}

var (
	_ StreamSource = (*FailoverSource)(nil)
	_ BatchAcker   = (*FailoverSource)(nil)
	_ Acker        = (*FailoverSource)(nil)
	_ QuietLimiter = (*FailoverSource)(nil)
)

// probeHint is the newest namespace, cursor and store id the client was
// told of: a healthy preferred endpoint answers for them.
type probeHint struct {
	ns      string
	cursor  int64
	storeID string
}

// failoverWatch is a watch or stream running on endpoint i.
type failoverWatch struct {
	i        int
	cancel   context.CancelCauseFunc
	switched atomic.Bool // cut by a switch (set under FailoverSource.mu)
}

// FailoverOption configures NewFailoverSource.
type FailoverOption interface{ applyFailover(*failoverOptions) }

type failoverOptions struct {
	failbackAfter time.Duration
}

type failoverOptionFunc func(*failoverOptions)

func (f failoverOptionFunc) applyFailover(o *failoverOptions) { f(o) }

// WithFailbackAfter sets how long the preferred endpoint must answer every
// health probe before a FailoverSource returns to it (default
// DefaultFailbackAfter). It is probed six times in that window, at most
// every 5s.
func WithFailbackAfter(d time.Duration) FailoverOption {
	return failoverOptionFunc(func(o *failoverOptions) { o.failbackAfter = d })
}

// NewFailoverSource returns a source over srcs, in order of preference:
// one HTTPSource per endpoint, each serving the same store. The
// FailoverSource owns them: its Close closes them.
func NewFailoverSource(srcs []*HTTPSource, opts ...FailoverOption) (*FailoverSource, error) {
	o := failoverOptions{failbackAfter: DefaultFailbackAfter}
	for _, opt := range opts {
		if opt != nil {
			opt.applyFailover(&o)
		}
	}
	if len(srcs) == 0 {
		return nil, errors.New("transport: failover: no endpoint")
	}
	if o.failbackAfter <= 0 {
		return nil, fmt.Errorf("transport: failover: failback window %v is not positive", o.failbackAfter)
	}
	seen := make(map[string]bool, len(srcs))
	for i, s := range srcs {
		if s == nil {
			return nil, fmt.Errorf("transport: failover: source %d is nil", i)
		}
		if u := s.base.String(); seen[u] {
			return nil, fmt.Errorf("transport: failover: endpoint %q named twice", s.Endpoint())
		} else {
			seen[u] = true
		}
	}
	f := &FailoverSource{
		srcs:          append([]*HTTPSource(nil), srcs...),
		log:           srcs[0].opts.logger,
		failbackAfter: o.failbackAfter,
		probeEvery:    max(min(o.failbackAfter/probesPerWindow, maxProbeEvery), time.Millisecond),
		watches:       make(map[*failoverWatch]struct{}),
	}
	f.ctx, f.cancel = context.WithCancel(context.Background())
	return f, nil
}

// DefaultClientID hands id to each endpoint's source (see
// HTTPSource.DefaultClientID).
func (f *FailoverSource) DefaultClientID(id string) {
	for _, s := range f.srcs {
		s.DefaultClientID(id)
	}
}

// Endpoint returns the base URL of the current endpoint (a password in it
// redacted).
func (f *FailoverSource) Endpoint() string { return f.srcs[f.current()].Endpoint() }

// WatchMode is the current endpoint's (HTTPSource.WatchMode).
func (f *FailoverSource) WatchMode() WatchMode { return f.srcs[f.current()].WatchMode() }

// Endpoints returns the base URLs of every endpoint, in order of
// preference (passwords redacted).
func (f *FailoverSource) Endpoints() []string {
	out := make([]string, len(f.srcs))
	for i, s := range f.srcs {
		out[i] = s.Endpoint()
	}
	return out
}

// QuietLimit is the current endpoint's (HTTPSource.QuietLimit).
func (f *FailoverSource) QuietLimit() time.Duration { return f.srcs[f.current()].QuietLimit() }

// Close stops the prober and closes every source (HTTPSource.Close). It
// does not end running watches (cancel their contexts). It is idempotent
// and always returns nil.
func (f *FailoverSource) Close() error {
	f.mu.Lock()
	if f.closed {
		f.mu.Unlock()
		return nil
	}
	f.closed = true
	f.mu.Unlock()
	f.cancel()
	f.wg.Wait()
	for _, s := range f.srcs {
		_ = s.Close()
	}
	return nil
}

func (f *FailoverSource) current() int { return int(f.cur.Load()) }

// Snapshot fetches from the current endpoint (HTTPSource.Snapshot).
func (f *FailoverSource) Snapshot(ctx context.Context, req SnapshotRequest) (*Snapshot, error) {
	if err := ValidateNamespace(req.Namespace); err != nil {
		return nil, err
	}
	i := f.current()
	snap, err := f.srcs[i].Snapshot(ctx, req)
	if snap != nil {
		f.note(snap.Namespace, snap.Cursor, snap.StoreID)
	}
	f.after(ctx, i, err)
	return snap, err
}

// Ack reports to the current endpoint (HTTPSource.Ack).
func (f *FailoverSource) Ack(ctx context.Context, ack Ack) error {
	if err := checkAck(ack); err != nil {
		return err
	}
	i := f.current()
	err := f.srcs[i].Ack(ctx, ack)
	f.after(ctx, i, err)
	return err
}

// AckBatch reports to the current endpoint (HTTPSource.AckBatch).
func (f *FailoverSource) AckBatch(ctx context.Context, acks []Ack) error {
	for _, a := range acks {
		if err := checkAck(a); err != nil {
			return err
		}
	}
	i := f.current()
	err := f.srcs[i].AckBatch(ctx, acks)
	f.after(ctx, i, err)
	return err
}

// AckRelayed forwards a relay's clients' acks to the current endpoint
// (HTTPSource.AckRelayed).
func (f *FailoverSource) AckRelayed(ctx context.Context, relayID string, acks []Ack) error {
	i := f.current()
	err := f.srcs[i].AckRelayed(ctx, relayID, acks)
	f.after(ctx, i, err)
	return err
}

// AckCohort sends a relay's cohort report to the current endpoint
// (HTTPSource.AckCohort). Each endpoint numbers the relay's clients of
// its own: one that does not know the slots says so (ErrCohortUnknown),
// and hears them all again.
func (f *FailoverSource) AckCohort(ctx context.Context, relayID string, report json.RawMessage) error {
	i := f.current()
	err := f.srcs[i].AckCohort(ctx, relayID, report)
	f.after(ctx, i, err)
	return err
}

// CohortsOffered reports whether the current endpoint offers cohorts.
func (f *FailoverSource) CohortsOffered() bool { return f.srcs[f.current()].CohortsOffered() }

// Watch follows the namespace on the current endpoint (HTTPSource.Watch).
// When a switch cuts it, it resumes on the new current endpoint from the
// cursor delivered so far, without returning.
func (f *FailoverSource) Watch(ctx context.Context, req WatchRequest, handle func(Event) error) error {
	if err := ValidateNamespace(req.Namespace); err != nil {
		return err
	}
	if handle == nil {
		return errors.New("transport: watch: handle is nil")
	}
	if req.Since < 0 {
		return fmt.Errorf("transport: watch %q: negative cursor %d", req.Namespace, req.Since)
	}
	since := req.Since
	for {
		i, wctx, w := f.begin(ctx)
		f.warm(wctx, i, req.Namespace, since)
		var herr error
		err := f.srcs[i].Watch(wctx, WatchRequest{Namespace: req.Namespace, Since: since}, func(ev Event) error {
			if err := handle(ev); err != nil {
				herr = err
				return err
			}
			switch {
			case ev.Change != nil:
				since = max(since, ev.Change.Revision)
				f.note(req.Namespace, ev.Change.Revision, ev.Change.StoreID)
			case ev.Progress != nil:
				since = max(since, ev.Progress.Cursor)
				f.note(req.Namespace, ev.Progress.Cursor, ev.Progress.StoreID)
			}
			return nil
		})
		if f.end(ctx, w, herr) {
			continue
		}
		if herr == nil {
			f.after(ctx, i, err)
		}
		return err
	}
}

// WatchStream follows the namespaces over one stream on the current
// endpoint (HTTPSource.WatchStream). When a switch cuts it, it resumes on
// the new current endpoint, each namespace still in it from the cursor
// delivered so far, without returning.
func (f *FailoverSource) WatchStream(ctx context.Context, req StreamRequest, handle func(StreamEvent) error) error {
	if handle == nil {
		return errors.New("transport: stream: handle is nil")
	}
	if _, _, err := splitStreamRequest(req); err != nil {
		return err
	}
	cursors := make(map[string]int64, len(req.Namespaces)) // the namespaces still in the stream
	for _, r := range req.Namespaces {
		cursors[r.Namespace] = r.Since
	}
	var progress int64 // the stream's last progress: every namespace in it is complete up to it
	for {
		next := StreamRequest{Namespaces: make([]WatchRequest, 0, len(cursors))}
		for _, r := range req.Namespaces {
			if c, ok := cursors[r.Namespace]; ok {
				next.Namespaces = append(next.Namespaces, WatchRequest{Namespace: r.Namespace, Since: max(c, progress)})
			}
		}
		if len(next.Namespaces) == 0 { // every one ended before a switch
			<-ctx.Done()
			return ctx.Err()
		}
		// The namespace the stream's progress is noted for (the prober
		// asks for it): one the server is asked for, still in the stream.
		hintNS, hintSince := "", int64(0)
		for _, r := range next.Namespaces {
			if ValidateNamespace(r.Namespace) == nil {
				hintNS, hintSince = r.Namespace, r.Since
				break
			}
		}
		i, wctx, w := f.begin(ctx)
		if hintNS != "" {
			f.warm(wctx, i, hintNS, hintSince)
		}
		var herr error
		err := f.srcs[i].WatchStream(wctx, next, func(ev StreamEvent) error {
			if err := handle(ev); err != nil {
				herr = err
				return err
			}
			switch {
			case ev.Change != nil:
				ns := ev.Change.Namespace
				if c, ok := cursors[ns]; ok {
					cursors[ns] = max(c, ev.Change.Revision)
				}
				f.note(ns, ev.Change.Revision, ev.Change.StoreID)
			case ev.Progress != nil:
				progress = max(progress, ev.Progress.Cursor)
				if hintNS != "" {
					f.note(hintNS, ev.Progress.Cursor, ev.Progress.StoreID)
				}
			case ev.Ended != nil:
				delete(cursors, ev.Ended.Namespace)
				if ev.Ended.Namespace == hintNS {
					hintNS = ""
					for ns := range cursors {
						if ValidateNamespace(ns) == nil {
							hintNS = ns
							break
						}
					}
				}
			}
			return nil
		})
		if f.end(ctx, w, herr) {
			continue
		}
		if herr == nil {
			f.after(ctx, i, err)
		}
		return err
	}
}

// begin registers a watch on the current endpoint, so that a switch can
// cut it.
func (f *FailoverSource) begin(ctx context.Context) (int, context.Context, *failoverWatch) {
	wctx, cancel := context.WithCancelCause(ctx)
	f.mu.Lock()
	defer f.mu.Unlock()
	w := &failoverWatch{i: f.current(), cancel: cancel}
	f.watches[w] = struct{}{}
	return w.i, wctx, w
}

// end unregisters a watch that returned, and reports whether it is to
// resume on another endpoint: a switch cut it, and neither the caller's
// context nor its handler (herr) ended it.
func (f *FailoverSource) end(ctx context.Context, w *failoverWatch, herr error) (resume bool) {
	f.mu.Lock()
	delete(f.watches, w)
	f.mu.Unlock()
	w.cancel(nil)
	f.idle(w.i)
	return w.switched.Load() && herr == nil && ctx.Err() == nil
}

// warm makes a cheap request to an endpoint that has never answered before
// a watch opens on it, so that the watch starts on what the server offers
// (h2c: on the source's one connection, not an HTTP/1.1 one of its own).
func (f *FailoverSource) warm(ctx context.Context, i int, ns string, since int64) {
	s := f.srcs[i]
	if s.info.Load() != nil {
		return
	}
	pctx, cancel := context.WithTimeout(ctx, s.replyTimeout())
	defer cancel()
	_, _ = s.probe(pctx, ns, since) // the watch meets whatever failed
}

// after takes note of how a request to endpoint i ended: a failure of the
// endpoint moves to the next one.
func (f *FailoverSource) after(ctx context.Context, i int, err error) {
	if err != nil && ctx.Err() == nil && failsOver(err) {
		f.failed(i, err)
	}
	f.idle(i)
}

// idle closes endpoint i's idle connections when it is not current (a
// request that ran on it while a switch left it), unless the prober holds
// one to it.
func (f *FailoverSource) idle(i int) {
	cur := f.current()
	if i == cur || i == 0 { // 0 when not current: the prober's
		return
	}
	f.srcs[i].closeIdle()
}

// failsOver reports whether err, which a request to an endpoint ended
// with, says that the endpoint is down or failing, rather than something
// about the request or the data that every endpoint of the store would
// say alike.
func failsOver(err error) bool {
	if j, ok := err.(interface{ Unwrap() []error }); ok { // AckBatch's: any of them
		return slices.ContainsFunc(j.Unwrap(), failsOver)
	}
	var se *StatusError
	switch {
	case errors.As(err, &se):
		return se.StatusCode >= 500 || se.StatusCode == http.StatusTooManyRequests || errors.Is(err, ErrNotHoldfast)
	case errors.Is(err, ErrNotModified), errors.Is(err, ErrTooLarge), errors.Is(err, ErrStoreChanged),
		errors.Is(err, ErrStreamUnsupported), errors.Is(err, ErrBadRequest), errors.Is(err, ErrInvalidNamespace),
		errors.Is(err, ErrCompacted), errors.Is(err, ErrCursorAhead), errors.Is(err, ErrNotFound),
		errors.Is(err, ErrUnauthorized):
		return false
	}
	return true // refused, reset, EOF, idle, malformed, not holdfast
}

// failed moves from endpoint i, if it is still the current one, to the
// next: several requests failing on it together move once.
func (f *FailoverSource) failed(i int, err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed || f.current() != i || len(f.srcs) == 1 {
		return
	}
	f.switchLocked((i+1)%len(f.srcs), err.Error())
}

// switchLocked makes endpoint to current: it cuts the watches on others
// (they resume on to), lets go of the endpoint left, and starts the
// prober when the preferred endpoint is not current. f.mu must be held.
func (f *FailoverSource) switchLocked(to int, reason string) {
	from := f.current()
	f.cur.Store(int32(to))
	if to == 0 {
		f.returns++
	}
	for w := range f.watches {
		if w.i != to {
			w.switched.Store(true)
			w.cancel(errSwitched)
		}
	}
	f.log.Info("transport: endpoint switched", "from", f.srcs[from].Endpoint(), "to", f.srcs[to].Endpoint(), "reason", reason)
	if to != 0 && !f.probing {
		f.probing = true
		f.wg.Add(1)
		go f.probeLoop()
	}
	f.wg.Add(1)
	go func() {
		defer f.wg.Done()
		f.srcs[from].release(f.ctx)
	}()
}

// note records the newest namespace, cursor and store id the client was
// told of, for the prober.
func (f *FailoverSource) note(ns string, cursor int64, storeID string) {
	f.hintMu.Lock()
	f.hint = probeHint{ns: ns, cursor: cursor, storeID: storeID}
	f.hintMu.Unlock()
}

// probeLoop probes the preferred endpoint while another is current, and
// returns to it once every probe for the failback window succeeded.
func (f *FailoverSource) probeLoop() {
	defer f.wg.Done()
	t := time.NewTicker(f.probeEvery)
	defer t.Stop()
	var since time.Time // of the first probe of the current run of good ones
	returns := -1       // f.returns when the run began
	for {
		select {
		case <-f.ctx.Done():
			return
		case <-t.C:
		}
		f.mu.Lock()
		if f.current() == 0 { // back by a failure of another
			f.probing = false
			f.mu.Unlock()
			return
		}
		if f.returns != returns { // the preferred endpoint was current meanwhile (and failed again): start over
			since, returns = time.Time{}, f.returns
		}
		f.mu.Unlock()
		err := f.probe()
		now := time.Now()
		if err != nil {
			if !since.IsZero() {
				f.log.Debug("transport: preferred endpoint failed its probe; staying", "endpoint", f.srcs[0].Endpoint(), "err", err)
			}
			since = time.Time{}
			continue
		}
		if since.IsZero() {
			since = now
		}
		if now.Sub(since) < f.failbackAfter {
			continue
		}
		f.mu.Lock()
		if !f.closed && f.current() != 0 {
			f.switchLocked(0, fmt.Sprintf("preferred endpoint healthy for %v", f.failbackAfter))
		}
		f.probing = false
		f.mu.Unlock()
		return
	}
}

// probe asks the preferred endpoint for the newest namespace and cursor
// the client was told of: healthy is an answer at once (200), of the
// same store.
func (f *FailoverSource) probe() error {
	f.hintMu.Lock()
	h := f.hint
	f.hintMu.Unlock()
	if h.ns == "" {
		return errors.New("transport: failover: nothing to probe with yet")
	}
	s := f.srcs[0]
	ctx, cancel := context.WithTimeout(f.ctx, s.replyTimeout())
	defer cancel()
	id, err := s.probe(ctx, h.ns, h.cursor)
	if err != nil {
		return err
	}
	if h.storeID != "" && id != h.storeID {
		return fmt.Errorf("transport: failover: preferred endpoint serves store %q, not %q", id, h.storeID)
	}
	return nil
}
