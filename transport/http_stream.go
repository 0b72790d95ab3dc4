package transport

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/holdfast-dev/holdfast/internal/wire"
)

var (
	_ StreamSource = (*HTTPSource)(nil)
	_ BatchAcker   = (*HTTPSource)(nil)
)

// maxAckBatch bounds the acks of one batched POST /sdk/ack: with errors
// at MaxAckErrorBytes, a batch stays within a few hundred KiB.
const maxAckBatch = 64

// WatchStream follows every namespace of req over one multi-namespace
// watch (GET /sdk/stream as Server-Sent Events, or GET /sdk/stream/events
// as long-polls, as Watch chooses: WithWatchMode, and WatchAuto's switch),
// calling handle for each event from the calling goroutine, in order.
//
// It returns ErrStreamUnsupported, without a request, once the server's
// ServerInfo is known and lacks CapabilityStream, and when the server
// answers 404 to the stream's path (an older server). A request with no
// namespace, more than MaxStreamNamespaces, one named twice or a negative
// cursor fails with an error wrapping ErrBadRequest, without a request.
// A name that ValidateNamespace refuses is an Ended event for it
// (ErrInvalidNamespace), delivered first, without asking the server; a
// request with no valid name left waits for ctx.
//
// Trouble the server reports for one namespace is an Ended event whose Err
// is what the namespace's Watch would have returned (a *StatusError
// unwrapping to *CompactedError, ErrNotFound, ErrUnauthorized,
// ErrCursorAhead, ...). A change of a namespace not in the stream (or
// ended), a change at or below its namespace's cursor, an event that does
// not decode, a progress going back, or an oversized event ends the stream
// with ErrMalformed or ErrTooLarge: nothing of it is delivered. Otherwise
// it ends as Watch does (ErrStreamIdle, a *StatusError, io.ErrUnexpectedEOF,
// ctx.Err(), handle's error), never with nil.
func (s *HTTPSource) WatchStream(ctx context.Context, req StreamRequest, handle func(StreamEvent) error) error {
	if handle == nil {
		return errors.New("transport: stream: handle is nil")
	}
	if p := s.info.Load(); p != nil && !p.HasCapability(CapabilityStream) {
		return ErrStreamUnsupported
	}
	valid, invalid, err := splitStreamRequest(req)
	if err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	for _, ns := range invalid {
		e := StreamEvent{Ended: &NamespaceEnded{Namespace: ns,
			Err: fmt.Errorf("transport: stream: namespace %q ended: %w", ns, ValidateNamespace(ns))}}
		if err := handle(e); err != nil {
			return err
		}
	}
	if len(valid) == 0 {
		<-ctx.Done()
		return ctx.Err()
	}
	if s.WatchMode() == WatchLongPoll {
		return unsupported(s.watchStreamLongPoll(ctx, valid, handle))
	}
	r := s.watchStreamSSE(ctx, valid, handle)
	if s.opts.mode == WatchAuto {
		s.noteStream(ctx, r, func(ctx context.Context) bool {
			return s.probeURL(ctx, s.endpoint(PathStreamEvents, streamQuery(valid, "0s")))
		})
	}
	return unsupported(r.err)
}

// splitStreamRequest checks a stream request: the namespaces to ask the
// server for, and the names ValidateNamespace refuses.
func splitStreamRequest(req StreamRequest) (valid []WatchRequest, invalid []string, err error) {
	switch n := len(req.Namespaces); {
	case n == 0:
		return nil, nil, fmt.Errorf("transport: stream: %w: no namespace", ErrBadRequest)
	case n > MaxStreamNamespaces:
		return nil, nil, fmt.Errorf("transport: stream: %w: %d namespaces, more than %d", ErrBadRequest, n, MaxStreamNamespaces)
	}
	seen := make(map[string]bool, len(req.Namespaces))
	for _, r := range req.Namespaces {
		switch {
		case seen[r.Namespace]:
			return nil, nil, fmt.Errorf("transport: stream: %w: namespace %q named twice", ErrBadRequest, wire.Truncate(r.Namespace, 130))
		case r.Since < 0:
			return nil, nil, fmt.Errorf("transport: stream: %w: namespace %q with negative cursor %d", ErrBadRequest, wire.Truncate(r.Namespace, 130), r.Since)
		}
		seen[r.Namespace] = true
		if ValidateNamespace(r.Namespace) != nil {
			invalid = append(invalid, r.Namespace)
		} else {
			valid = append(valid, r)
		}
	}
	return valid, invalid, nil
}

// unsupported turns a 404 to the stream's path into ErrStreamUnsupported:
// the stream has no 404 of its own (a missing namespace is an ended
// event), so it is a server without the path.
func unsupported(err error) error {
	var se *StatusError
	if errors.As(err, &se) && se.StatusCode == http.StatusNotFound {
		return fmt.Errorf("%w (404: %v)", ErrStreamUnsupported, se)
	}
	return err
}

// streamQuery encodes the namespaces as ns=<name>:<since>, and wait when
// set.
func streamQuery(nss []WatchRequest, wait string) url.Values {
	q := url.Values{"ns": make([]string, 0, len(nss))}
	for _, r := range nss {
		q["ns"] = append(q["ns"], r.Namespace+":"+strconv.FormatInt(r.Since, 10))
	}
	if wait != "" {
		q.Set("wait", wait)
	}
	return q
}

func streamName(nss []WatchRequest) string {
	if len(nss) == 1 {
		return strconv.Quote(nss[0].Namespace)
	}
	return fmt.Sprintf("of %d namespaces (%q, ...)", len(nss), nss[0].Namespace)
}

// watchStreamSSE follows one SSE stream of GET /sdk/stream.
func (s *HTTPSource) watchStreamSSE(ctx context.Context, nss []WatchRequest, handle func(StreamEvent) error) sseResult {
	st := newStreamState(nss)
	return s.followSSE(ctx, sseSpec{
		url:       s.endpoint(PathStream, streamQuery(nss, "")),
		op:        "stream",
		name:      streamName(nss),
		connected: func(h http.Header) { st.storeID = h.Get(HeaderStoreID) },
		decode: func(typ string, data []byte) (func() error, error) {
			e, err := decodeStreamSSEEvent(typ, data, st, s.opts.maxEventBytes)
			if err != nil {
				return nil, err
			}
			return func() error { return handle(e) }, nil
		},
	})
}

// watchStreamLongPoll repeats GET /sdk/stream/events, delivering each
// reply's changes, then its ended namespaces, then a progress at its
// cursor, and resumes every namespace still in the stream from
// max(its cursor, the reply's).
func (s *HTTPSource) watchStreamLongPoll(ctx context.Context, nss []WatchRequest, handle func(StreamEvent) error) error {
	st := newStreamState(nss)
	name := streamName(nss)
	for {
		started := time.Now()
		next := make([]WatchRequest, 0, len(st.floor))
		for _, r := range nss {
			if f, ok := st.floor[r.Namespace]; ok {
				next = append(next, WatchRequest{Namespace: r.Namespace, Since: max(f, st.cursor)})
			}
		}
		if len(next) == 0 {
			<-ctx.Done()
			return ctx.Err()
		}
		r, storeID, err := s.streamPoll(ctx, next, name)
		if err != nil {
			return err
		}
		st.storeID = storeID
		// Checked whole before any of it is delivered.
		events := make([]StreamEvent, 0, len(r.Changes)+len(r.Ended)+1)
		for i := range r.Changes {
			if err := st.change(&r.Changes[i]); err != nil {
				return fmt.Errorf("transport: long-poll stream %s: %w", name, err)
			}
			events = append(events, StreamEvent{Change: &r.Changes[i]})
		}
		for _, b := range r.Ended {
			e, err := st.ended(b)
			if err != nil {
				return fmt.Errorf("transport: long-poll stream %s: %w", name, err)
			}
			events = append(events, StreamEvent{Ended: e})
		}
		p := &StreamProgress{StoreID: r.StoreID, Cursor: r.Cursor, AgeMillis: r.AgeMillis, Unconfirmed: r.Unconfirmed}
		if err := st.progress(p); err != nil {
			return fmt.Errorf("transport: long-poll stream %s: %w", name, err)
		}
		events = append(events, StreamEvent{Progress: p})
		for _, e := range events {
			if err := handle(e); err != nil {
				return err
			}
		}
		if len(r.Changes) == 0 && len(r.Ended) == 0 {
			pauseAfterEmptyPoll(ctx, started)
		}
		if err := ctx.Err(); err != nil {
			return err
		}
	}
}

// streamPoll makes one long-poll of a stream, bounded by the wait plus the
// idle timeout; it returns the reply and its store id header.
func (s *HTTPSource) streamPoll(ctx context.Context, nss []WatchRequest, name string) (*wire.StreamEventsResponse, string, error) {
	limit := s.opts.longPollWait + s.replyTimeout()
	rctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	hreq, err := http.NewRequestWithContext(rctx, http.MethodGet,
		s.endpoint(PathStreamEvents, streamQuery(nss, s.opts.longPollWait.String())), nil)
	if err != nil {
		return nil, "", fmt.Errorf("transport: long-poll stream %s: %w", name, err)
	}
	hreq.Header.Set("Accept", "application/json")
	hreq.Header.Set("Accept-Encoding", "gzip")
	resp, err := s.poll.Do(hreq)
	if err != nil {
		return nil, "", s.streamPollError(ctx, rctx, name, err)
	}
	defer closeBody(resp.Body)
	if err := checkOK(resp, "long-poll stream", nss[0].Namespace); err != nil {
		return nil, "", err
	}
	body, err := readBody(resp, s.opts.maxSnapshotBytes)
	if err != nil {
		return nil, "", s.streamPollError(ctx, rctx, name, err)
	}
	r, err := decodeStreamEvents(body, s.opts.maxEventBytes)
	if err != nil {
		if errors.Is(err, ErrMalformed) {
			err = notHoldfast(err, resp, body, "a stream long-poll reply")
		}
		return nil, "", fmt.Errorf("transport: long-poll stream %s: %w", name, err)
	}
	replyAge(resp.Header, &r.AgeMillis, &r.Unconfirmed)
	return r, resp.Header.Get(HeaderStoreID), nil
}

func (s *HTTPSource) streamPollError(ctx, rctx context.Context, name string, err error) error {
	if ctx.Err() == nil && errors.Is(rctx.Err(), context.DeadlineExceeded) {
		return fmt.Errorf("transport: long-poll stream %s: %w: no reply within wait %v + idle timeout %v",
			name, ErrStreamIdle, s.opts.longPollWait, s.replyTimeout())
	}
	if ctxErr := ctx.Err(); ctxErr != nil {
		return ctxErr
	}
	return fmt.Errorf("transport: long-poll stream %s: %w", name, err)
}

// AckBatch reports several acks. When the server listed CapabilityAckBatch
// it POSTs them to /sdk/ack as batches ({"client_id":…,"acks":[…]}), one
// per client id (and at most 64 acks each); otherwise — an older server,
// or before any reply — it sends one Ack per request, as Ack does, in
// order, going on past a failed one. Every ack is checked first
// (namespace, status): one that fails sends none. The error joins the failures; a failed batch fails
// all its acks. An empty slice sends nothing.
func (s *HTTPSource) AckBatch(ctx context.Context, acks []Ack) error {
	for _, a := range acks {
		if err := checkAck(a); err != nil {
			return err
		}
	}
	if len(acks) == 0 {
		return nil
	}
	if !s.offers(CapabilityAckBatch) {
		var errs []error
		for _, a := range acks {
			if err := s.Ack(ctx, a); err != nil {
				if ctx.Err() != nil {
					return ctx.Err()
				}
				errs = append(errs, err)
			}
		}
		return errors.Join(errs...)
	}
	return s.sendBatches(ctx, batches(acks))
}

// sendBatches sends each batch as a line of the ack stream when it is
// usable, else as a POST; it goes on past a failed POST and returns every
// error (ctx's alone once it ended).
func (s *HTTPSource) sendBatches(ctx context.Context, bs []wire.AckBatch) error {
	var errs []error
	for _, b := range bs {
		if s.ackStreamUsable() && s.sendOnAckStream(ctx, b) == nil {
			continue
		}
		if err := s.postAckBatch(ctx, b); err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

func checkAck(a Ack) error {
	if err := ValidateNamespace(a.Namespace); err != nil {
		return err
	}
	if a.Status != AckApplied && a.Status != AckRejected && a.Status != AckWouldReject {
		return fmt.Errorf("transport: ack %q: status %q (want %q, %q or %q)", a.Namespace, a.Status, AckApplied, AckRejected, AckWouldReject)
	}
	return nil
}

// batches groups acks by client id, in order of first appearance, at most
// maxAckBatch per batch; each ack's own client id is left to the batch's.
func batches(acks []Ack) []wire.AckBatch {
	var out []wire.AckBatch
	// open maps a client id to its batch being filled, once there are
	// more than a few: a client's own acks (one id) make no map.
	var open map[string]int
	filling := func(id string) (int, bool) {
		if open != nil {
			i, ok := open[id]
			return i, ok
		}
		for i := len(out) - 1; i >= 0; i-- {
			if out[i].ClientID == id {
				return i, true
			}
		}
		return 0, false
	}
	for _, a := range acks {
		i, ok := filling(a.ClientID)
		if !ok || len(out[i].Acks) == maxAckBatch {
			out = append(out, wire.AckBatch{ClientID: a.ClientID})
			i = len(out) - 1
			switch {
			case open != nil:
				open[a.ClientID] = i
			case len(out) > 8:
				open = make(map[string]int, len(out))
				for j, b := range out {
					open[b.ClientID] = j // the last of each id is the one filling
				}
			}
		}
		a.ClientID = ""
		a.Error = wire.TruncateAckError(a.Error)
		out[i].Acks = append(out[i].Acks, a)
	}
	return out
}

func (s *HTTPSource) postAckBatch(ctx context.Context, b wire.AckBatch) error {
	return s.postJSON(ctx, PathAck, "ack", fmt.Sprintf("batch of %d", len(b.Acks)), wire.AppendAckBatch(nil, b))
}
