package transport

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"time"
)

// watchLongPoll repeats GET /sdk/events?ns=N&since=C&wait=W, delivering each
// reply's changes and then a Progress at its cursor, with the reply's age
// (so that freshness advances on a quiet namespace, as far as the server
// vouches for it), and resumes from that cursor.
func (s *HTTPSource) watchLongPoll(ctx context.Context, req WatchRequest, handle func(Event) error) error {
	since := req.Since
	for {
		started := time.Now()
		r, err := s.longPoll(ctx, req.Namespace, since)
		if err != nil {
			return err
		}
		for i := range r.Changes {
			if err := handle(Event{Change: &r.Changes[i]}); err != nil {
				return err
			}
		}
		p := &Progress{Namespace: req.Namespace, StoreID: r.StoreID, Revision: r.Revision, Cursor: r.Cursor,
			AgeMillis: r.AgeMillis, Unconfirmed: r.Unconfirmed}
		if err := handle(Event{Progress: p}); err != nil {
			return err
		}
		since = r.Cursor
		if len(r.Changes) == 0 {
			pauseAfterEmptyPoll(ctx, started)
		}
		if err := ctx.Err(); err != nil {
			return err
		}
	}
}

// minEmptyPoll is the least time between two long-polls that brought no
// change.
const minEmptyPoll = 100 * time.Millisecond

// longPoll makes one long-poll, bounded by the wait plus the idle timeout.
func (s *HTTPSource) longPoll(ctx context.Context, ns string, since int64) (*EventsResponse, error) {
	limit := s.opts.longPollWait + s.replyTimeout()
	rctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	q := url.Values{"ns": {ns}, "since": {strconv.FormatInt(since, 10)}, "wait": {s.opts.longPollWait.String()}}
	hreq, err := http.NewRequestWithContext(rctx, http.MethodGet, s.endpoint(PathEvents, q), nil)
	if err != nil {
		return nil, fmt.Errorf("transport: long-poll %q: %w", ns, err)
	}
	hreq.Header.Set("Accept", "application/json")
	hreq.Header.Set("Accept-Encoding", "gzip")
	resp, err := s.poll.Do(hreq)
	if err != nil {
		return nil, s.pollError(ctx, rctx, ns, err)
	}
	defer closeBody(resp.Body)
	if err := checkOK(resp, "long-poll", ns); err != nil {
		return nil, err
	}
	body, err := readBody(resp, s.opts.maxSnapshotBytes)
	if err != nil {
		return nil, s.pollError(ctx, rctx, ns, err)
	}
	r, err := decodeEvents(body, ns, s.opts.maxEventBytes)
	if err != nil {
		if errors.Is(err, ErrMalformed) {
			err = notHoldfast(err, resp, body, "a long-poll reply")
		}
		return nil, fmt.Errorf("transport: long-poll %q: %w", ns, err)
	}
	replyAge(resp.Header, &r.AgeMillis, &r.Unconfirmed)
	return r, nil
}

// pollError is requestError, naming a long-poll that outlived its own
// deadline (wait + idle timeout) as idle.
func (s *HTTPSource) pollError(ctx, rctx context.Context, ns string, err error) error {
	if ctx.Err() == nil && errors.Is(rctx.Err(), context.DeadlineExceeded) {
		return fmt.Errorf("transport: long-poll %q: %w: no reply within wait %v + idle timeout %v",
			ns, ErrStreamIdle, s.opts.longPollWait, s.replyTimeout())
	}
	return requestError(ctx, "long-poll", ns, err)
}

// pauseAfterEmptyPoll waits out the rest of minEmptyPoll since started (or
// until ctx ends): a server that answers an empty poll at once (one that
// ignores wait) must not make polling a busy loop.
func pauseAfterEmptyPoll(ctx context.Context, started time.Time) {
	if pause := minEmptyPoll - time.Since(started); pause > 0 {
		t := time.NewTimer(pause)
		defer t.Stop()
		select {
		case <-ctx.Done():
		case <-t.C:
		}
	}
}
