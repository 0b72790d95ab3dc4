package dataplane

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/holdfast-dev/holdfast/access"
	"github.com/holdfast-dev/holdfast/internal/wire"
	"github.com/holdfast-dev/holdfast/transport"
)

const defaultWait = 30 * time.Second

// The write deadline of a reply (streams have theirs: watcher.arm):
// replyWriteGrace, plus the time to send its bytes at minReplyRate. A
// client that reads slower, or not at all, loses the reply, and its
// handler returns (a snapshot's admission slot with it). Never
// http.Server.WriteTimeout, which would cut streams and long-polls.
const (
	replyWriteGrace = 10 * time.Second
	minReplyRate    = 256 << 10 // bytes a second
)

// setReplyDeadline bounds the write of a reply of n bytes, from now.
func setReplyDeadline(w http.ResponseWriter, n int) {
	d := replyWriteGrace + time.Duration(n)*time.Second/minReplyRate
	_ = http.NewResponseController(w).SetWriteDeadline(time.Now().Add(d))
}

// writeTimeout bounds one batch of writes to a watch stream: a reader that
// takes longer is stalled and is disconnected.
func (s *Server) writeTimeout() time.Duration { return max(10*time.Second, 3*s.opts.heartbeat) }

// gate applies the faults and the bearer token to a data-plane request. It
// reports whether the handler should go on; when it does not, the reply (or
// the silence) has been dealt with.
func (s *Server) gate(w http.ResponseWriter, r *http.Request, failable bool) bool {
	s.hold(r)
	if d := s.faults.Delay(); d > 0 {
		t := time.NewTimer(d)
		select {
		case <-t.C:
		case <-r.Context().Done():
			t.Stop()
			panic(http.ErrAbortHandler)
		case <-stopping(r):
			t.Stop()
			panic(http.ErrAbortHandler)
		}
	}
	if failable {
		if status, retryAfter, ok := s.faults.Fail(); ok {
			code := transport.CodeUnavailable
			switch {
			case status == http.StatusUnauthorized:
				code = transport.CodeUnauthorized
			case status == http.StatusForbidden:
				code = transport.CodeForbidden
			case status == http.StatusNotFound:
				code = transport.CodeNotFound
			case status >= 500 && status != http.StatusServiceUnavailable:
				code = transport.CodeInternal
			}
			defer s.speak(r)()
			// Whole seconds, rounded to the nearest: a test that asks for
			// 10ms wants a quick retry, and "Retry-After: 0" says so.
			secs := (retryAfter + time.Second/2) / time.Second
			w.Header().Set("Retry-After", strconv.FormatInt(int64(secs), 10))
			s.planeHeaders(w, "")
			writeError(w, status, transport.ErrorBody{Error: code, Message: "injected fault", StoreID: s.StoreID()})
			return false
		}
	}
	if !s.admitted(r) {
		defer s.speak(r)()
		w.Header().Set("WWW-Authenticate", `Bearer realm="holdfast"`)
		s.planeHeaders(w, "")
		writeError(w, http.StatusUnauthorized, transport.ErrorBody{Error: transport.CodeUnauthorized, Message: "missing or wrong bearer token", StoreID: s.StoreID()})
		return false
	}
	return true
}

// speak waits while the data plane is black-holed (Faults.Speak) and
// returns with the right to write, to be released once the write is done.
// A request whose client leaves, or whose server stops, meanwhile is
// aborted without a byte.
func (s *Server) speak(r *http.Request) (release func()) {
	for {
		release, ch := s.faults.Speak()
		if ch == nil {
			return release
		}
		select {
		case <-ch:
		case <-r.Context().Done():
			panic(http.ErrAbortHandler)
		case <-stopping(r):
			panic(http.ErrAbortHandler)
		}
	}
}

// hold waits while the data plane is black-holed. A request whose client
// leaves, or whose server stops, meanwhile is aborted without a byte.
func (s *Server) hold(r *http.Request) { s.speak(r)() }

// planeHeaders sets the headers every data-plane reply carries. With ns
// empty (or unknown) the revision is 0.
func (s *Server) planeHeaders(w http.ResponseWriter, ns string) {
	id, head, _ := s.be.Info()
	var rev int64
	if ns != "" {
		rev, _ = s.be.NsRevision(ns)
	}
	s.setPlaneHeaders(w, id, rev, head)
}

// setPlaneHeaders sets the store's headers, and what the server speaks:
// its protocol version, its capabilities and its heartbeat, which clients
// of version 0 ignore.
func (s *Server) setPlaneHeaders(w http.ResponseWriter, storeID string, rev, cursor int64) {
	h := w.Header()
	h.Set(transport.HeaderStoreID, storeID)
	h.Set(transport.HeaderRevision, strconv.FormatInt(rev, 10))
	h.Set(transport.HeaderCursor, strconv.FormatInt(cursor, 10))
	h.Set(transport.HeaderProtocol, strconv.Itoa(transport.ProtocolVersion))
	if s.caps != "" {
		h.Set(transport.HeaderCapabilities, s.caps)
	}
	// Whole milliseconds, rounded up: a client's idle timeout must not
	// come out shorter than the real heartbeat allows.
	ms := max((s.opts.heartbeat+time.Millisecond-1)/time.Millisecond, 1)
	h.Set(transport.HeaderHeartbeat, strconv.FormatInt(int64(ms), 10))
}

// clientProtocol is the protocol version a request names: 0 when it names
// none (a client that predates versions) or names it badly.
func clientProtocol(r *http.Request) int {
	v, err := strconv.Atoi(strings.TrimSpace(r.Header.Get(transport.HeaderProtocol)))
	if err != nil || v < 0 {
		return 0
	}
	return v
}

// planeError replies to a data-plane request with the error's status.
func (s *Server) planeError(w http.ResponseWriter, r *http.Request, ns string, err error) {
	defer s.speak(r)()
	s.planeHeaders(w, ns)
	status, body := errorReply(err)
	if status == http.StatusBadRequest && body.Error == transport.CodeCursorAhead && clientProtocol(r) >= 1 {
		// Version 1 splits 400: a refused cursor is a conflict with the
		// store's state, not a malformed request.
		status = http.StatusConflict
	}
	s.writeErrorReply(w, status, body, err)
}

func (s *Server) replyError(w http.ResponseWriter, err error) {
	status, body := errorReply(err)
	s.writeErrorReply(w, status, body, err)
}

func (s *Server) writeErrorReply(w http.ResponseWriter, status int, body transport.ErrorBody, err error) {
	body.StoreID = s.StoreID()
	if status == http.StatusInternalServerError {
		s.log.Error("dataplane: internal error", "err", err)
	}
	writeError(w, status, body)
}

// errorReply maps an error to its status and body. Client mistakes never
// become a 500.
func errorReply(err error) (int, transport.ErrorBody) {
	var ce *transport.CompactedError
	var mbe *http.MaxBytesError
	var re *RefusedError
	var ae *accessError
	switch {
	case errors.As(err, &ae):
		return ae.status, transport.ErrorBody{Error: ae.code(), Message: ae.msg}
	case errors.As(err, &re):
		return re.Status, transport.ErrorBody{Error: re.Code, Message: err.Error()}
	case errors.As(err, &ce):
		return http.StatusGone, transport.ErrorBody{Error: transport.CodeCompacted, Message: err.Error(), CompactRevision: ce.CompactRevision}
	case errors.As(err, &mbe):
		return http.StatusRequestEntityTooLarge, transport.ErrorBody{Error: transport.CodeTooLarge, Message: "body larger than " + strconv.FormatInt(mbe.Limit, 10) + " bytes"}
	case errors.Is(err, transport.ErrCohortUnknown):
		return http.StatusConflict, transport.ErrorBody{Error: transport.CodeCohortUnknown, Message: err.Error()}
	case errors.Is(err, transport.ErrPresenceUnknown):
		return http.StatusConflict, transport.ErrorBody{Error: transport.CodePresenceUnknown, Message: err.Error()}
	case errors.Is(err, ErrUnknownNamespace):
		return http.StatusNotFound, transport.ErrorBody{Error: transport.CodeNotFound, Message: err.Error()}
	case errors.Is(err, transport.ErrCursorAhead):
		return http.StatusBadRequest, transport.ErrorBody{Error: transport.CodeCursorAhead, Message: err.Error()}
	case errors.Is(err, ErrInvalid), errors.Is(err, transport.ErrInvalidNamespace), errors.Is(err, transport.ErrInvalidKey):
		return http.StatusBadRequest, transport.ErrorBody{Error: transport.CodeBadRequest, Message: err.Error()}
	case errors.Is(err, ErrClosed):
		return http.StatusServiceUnavailable, transport.ErrorBody{Error: transport.CodeUnavailable, Message: err.Error()}
	}
	return http.StatusInternalServerError, transport.ErrorBody{Error: transport.CodeInternal, Message: err.Error()}
}

// writeError replies with a JSON error body. 429 and 503 always carry
// Retry-After (1s unless the caller set one).
func writeError(w http.ResponseWriter, status int, body transport.ErrorBody) {
	if (status == http.StatusTooManyRequests || status == http.StatusServiceUnavailable) && w.Header().Get("Retry-After") == "" {
		w.Header().Set("Retry-After", "1")
	}
	writeJSON(w, status, body)
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	data, err := json.Marshal(v)
	if err != nil {
		status, data = http.StatusInternalServerError, []byte(`{"error":"internal","message":"encode reply"}`)
	}
	setReplyDeadline(w, len(data))
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", strconv.Itoa(len(data)+1))
	w.WriteHeader(status)
	_, _ = w.Write(append(data, '\n'))
}

// namespaceParam reads and checks the ns query parameter.
func namespaceParam(r *http.Request) (string, error) {
	ns := r.URL.Query().Get("ns")
	if err := transport.ValidateNamespace(ns); err != nil {
		return "", err
	}
	return ns, nil
}

// readable passes a request for one namespace through the gate, its
// name and the caller's data scope; it returns the namespace, or false
// once the refusal is written.
func (s *Server) readable(w http.ResponseWriter, r *http.Request) (string, bool) {
	if !s.gate(w, r, true) {
		return "", false
	}
	ns, err := namespaceParam(r)
	if err != nil {
		s.planeError(w, r, "", err)
		return "", false
	}
	if err := s.mayRead(r, ns); err != nil {
		s.planeError(w, r, "", err) // no headers of ns: a refusal tells nothing of it
		return "", false
	}
	return ns, true
}

func (s *Server) handleSnapshot(w http.ResponseWriter, r *http.Request) {
	s.stats.snapshots.Add(1)
	ns, ok := s.readable(w, r)
	if !ok {
		return
	}
	s.bindClient(r, false)
	if !s.demanded(w, r, ns, -1) {
		return
	}
	snap, err := s.be.Snapshot(ns)
	if err != nil {
		s.planeError(w, r, ns, err)
		return
	}
	if s.follow != nil && holdsNewer(r.Header.Get("If-None-Match"), snap.StoreID, snap.Rev) {
		if _, unconfirmed := s.be.Freshness(ns); unconfirmed {
			// A relay cut off, behind what the client holds: its older
			// data would be refused and then, persisting, taken for
			// rewritten history. As for a cursor ahead (Follower.check).
			s.planeError(w, r, ns, &RefusedError{Namespace: ns, Status: http.StatusServiceUnavailable, Code: transport.CodeUnavailable,
				Message: fmt.Sprintf("the relay is at revision %d, behind the client's, and its upstream is not confirming it", snap.Rev)})
			return
		}
	}
	defer s.speak(r)()
	values := snap.Values
	etag := wire.ETag(snap.StoreID, snap.Rev)
	inm := r.Header.Get("If-None-Match")
	notModified := etagMatches(inm, etag)
	stripped := false
	if !rolloutAware(r) {
		var base map[string]json.RawMessage
		if base, stripped = s.reserved.base(ns, values); stripped {
			// The base, without reserved keys: another representation
			// of the revision, with a tag of its own. A client names
			// the revision it holds with wire.ETag, and one that
			// predates rollouts holds nothing but the base.
			values, etag = base, baseETag(snap.StoreID, snap.Rev)
			notModified = notModified || etagMatches(inm, etag)
		}
	}
	s.setPlaneHeaders(w, snap.StoreID, snap.Rev, snap.Cursor)
	age, unconfirmed := s.setAge(w, ns)
	h := w.Header()
	h.Set("ETag", etag)
	h.Set("Cache-Control", "no-cache")
	h.Set("Vary", "Accept-Encoding, "+transport.HeaderCapabilities)
	if notModified {
		s.stats.notModified.Add(1)
		w.WriteHeader(http.StatusNotModified)
		return
	}
	rp, ok := s.admit(w, r)
	if !ok {
		return
	}
	var body io.Writer = w
	if rp != nil {
		defer rp.release()
		body = progressWriter{w: w, rp: rp}
	}
	if r.Context().Err() != nil {
		return // the client is gone (a reset stream): no encoding for no one
	}
	plain, shared, err := s.snaps.values(ns, stripped, values)
	if err != nil {
		s.replyError(w, err)
		return
	}
	head := snapshotHead(ns, snap.StoreID, snap.Rev, snap.Cursor, snap.Compact)
	tail := snapshotTail(age, unconfirmed)
	h.Set("Content-Type", "application/json")
	// A reader too slow for the deadline (or one that does not read)
	// loses the reply; one that makes no progress stops counting against
	// the slots sooner (admission).
	size := len(head) + len(plain) + len(tail)
	setReplyDeadline(w, size)
	if !acceptsGzip(r.Header.Get("Accept-Encoding")) {
		h.Set("Content-Length", strconv.Itoa(size))
		w.WriteHeader(http.StatusOK)
		_, _ = body.Write(head)
		_, _ = body.Write(plain)
		_, _ = body.Write(tail)
		return
	}
	deflated := s.snaps.gzipped(shared)
	h.Set("Content-Encoding", "gzip")
	w.WriteHeader(http.StatusOK)
	_ = writeGzip(body, head, plain, deflated, tail)
}

// etagMatches implements If-None-Match: a list of (weak or strong) tags, or "*".
func etagMatches(header, etag string) bool {
	if header == "" {
		return false
	}
	for _, t := range strings.Split(header, ",") {
		t = strings.TrimPrefix(strings.TrimSpace(t), "W/")
		if t == "*" || t == etag {
			return true
		}
	}
	return false
}

// holdsNewer reports whether an If-None-Match header names a revision of
// storeID after rev: the client holds newer data than rev.
func holdsNewer(header, storeID string, rev int64) bool {
	for _, t := range strings.Split(header, ",") {
		t = strings.Trim(strings.TrimPrefix(strings.TrimSpace(t), "W/"), `"`)
		i := strings.LastIndexByte(t, '.')
		if i < 0 || t[:i] != storeID {
			continue
		}
		if n, err := strconv.ParseInt(t[i+1:], 10, 64); err == nil && n > rev {
			return true
		}
	}
	return false
}

// acceptsGzip reports whether an Accept-Encoding header allows gzip: an
// explicit gzip entry decides, else a "*" entry; q=0 refuses.
func acceptsGzip(header string) bool {
	gzip, star := -1.0, -1.0 // the q of each entry; -1: absent
	for _, part := range strings.Split(header, ",") {
		fields := strings.Split(part, ";")
		name := strings.TrimSpace(fields[0])
		q := 1.0
		for _, p := range fields[1:] {
			k, v, _ := strings.Cut(strings.TrimSpace(p), "=")
			if strings.EqualFold(strings.TrimSpace(k), "q") {
				if f, err := strconv.ParseFloat(strings.TrimSpace(v), 64); err == nil {
					q = f
				}
			}
		}
		switch {
		case strings.EqualFold(name, "gzip"):
			gzip = q
		case name == "*":
			star = q
		}
	}
	if gzip >= 0 {
		return gzip > 0
	}
	return star > 0
}

func (s *Server) handleEvents(w http.ResponseWriter, r *http.Request) {
	s.stats.events.Add(1)
	ns, ok := s.readable(w, r)
	if !ok {
		return
	}
	defer s.bindClient(r, true)()
	defer s.present(r, false).Close()
	q := r.URL.Query()
	since, err := parseCursor(q.Get("since"))
	if err != nil {
		s.planeError(w, r, ns, err)
		return
	}
	wait := min(defaultWait, s.opts.maxWait)
	if v := q.Get("wait"); v != "" {
		if wait, err = parseDuration(v); err != nil {
			s.planeError(w, r, ns, err)
			return
		}
		wait = min(wait, s.opts.maxWait)
	}

	if !s.demanded(w, r, ns, since) {
		return
	}
	var wt *watcher
	sub, err := s.be.Subscribe(ns, since, func(sub Subscription) {
		if len(sub.Backlog) == 0 && wait > 0 {
			wt = newWatcher(ns, sub.Gen, s.opts.watcherBuffer, false).since(sub)
			s.hub.add(wt)
		}
	})
	if err != nil {
		s.planeError(w, r, ns, err)
		return
	}
	resp := transport.EventsResponse{Namespace: ns, StoreID: sub.StoreID, Cursor: sub.Head, Revision: sub.NsRev}
	changes := slices.Clip(sub.Backlog)
	if n := len(changes); n > 0 {
		resp.Revision = changes[n-1].CS.Revision
	}
	if wt != nil {
		defer s.unwatch(wt)
		s.guard.track(wt, r)
		timer := time.NewTimer(wait)
		defer timer.Stop()
		cursor := sub.Head
	wait:
		for {
			final, killed := false, false
			select {
			case <-wt.wake:
			case <-timer.C:
				final = true
			case <-wt.done:
				final, killed = true, true
			case <-r.Context().Done():
				return
			case <-stopping(r):
				panic(http.ErrAbortHandler)
			}
			d := s.hub.cursor(wt, cursor) // before take: every change up to d is queued
			if killed {
				// An ended watcher (DropStreams) is handed nothing
				// more: the hub's mark may be past what it got.
				d = cursor
			}
			items, overflow := wt.take()
			if overflow {
				// Changes were dropped from this watcher's queue: answer
				// without moving the cursor past them; the next poll gets
				// them from the history.
				resp.Cursor = cursor
				break wait
			}
			for _, c := range items {
				if c.CS.Revision > cursor {
					changes = append(changes, c)
					resp.Revision = c.CS.Revision
					cursor = c.CS.Revision
				}
			}
			if len(changes) > 0 || final {
				resp.Cursor = max(d, cursor)
				break wait
			}
		}
		if rv := wt.revocation(); rv != nil {
			s.refuseRevoked(w, r, rv)
			return
		}
		if wt.gen != s.be.Generation() {
			// The store was reset or restored meanwhile: what this poll
			// read is another history's. Cut it, as a restart would.
			panic(http.ErrAbortHandler)
		}
	}
	defer s.speak(r)()
	s.setPlaneHeaders(w, resp.StoreID, resp.Revision, resp.Cursor)
	resp.AgeMillis, resp.Unconfirmed = s.setAge(w, ns)
	writeEvents(w, resp, changes, rolloutAware(r))
}

// writeEvents writes a transport.EventsResponse whose changes are the
// bytes encoded once for every reader (a relay's: its upstream's), as a
// client that evaluates rollouts (aware) or not sees them (change.view).
func writeEvents(w http.ResponseWriter, resp transport.EventsResponse, changes []*Change, aware bool) {
	resp.Changes = []transport.ChangeSet{} // a placeholder: "changes":[]
	head, err := json.Marshal(resp)
	if err != nil {
		writeJSON(w, http.StatusInternalServerError, transport.ErrorBody{Error: transport.CodeInternal, Message: "encode reply"})
		return
	}
	i := bytes.Index(head, []byte(`"changes":[]`))
	b := make([]byte, 0, len(head)+len(changes)*256)
	b = append(b, head[:i+len(`"changes":[`)]...)
	b = appendChanges(b, changes, aware)
	b = append(b, head[i+len(`"changes":[`):]...)
	b = append(b, '\n')
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", strconv.Itoa(len(b)))
	setReplyDeadline(w, len(b))
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(b)
}

// appendChanges appends changes' JSON, comma-separated, as a client that
// evaluates rollouts (aware) or not sees them.
func appendChanges(b []byte, changes []*Change, aware bool) []byte {
	for i, c := range changes {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, c.view(aware).json()...)
	}
	return b
}

func (s *Server) handleWatch(w http.ResponseWriter, r *http.Request) {
	s.stats.watches.Add(1)
	ns, ok := s.readable(w, r)
	if !ok {
		return
	}
	defer s.bindClient(r, true)()
	here := s.present(r, true)
	defer here.Close()
	// Last-Event-ID wins: on a reconnect the URL still has the first cursor.
	cur := r.URL.Query().Get("since")
	if id := r.Header.Get("Last-Event-ID"); id != "" {
		cur = id
	}
	since, err := parseCursor(cur)
	if err != nil {
		s.planeError(w, r, ns, err)
		return
	}
	if !s.demanded(w, r, ns, since) {
		return
	}
	rc := http.NewResponseController(w)
	aware := rolloutAware(r)
	var wt *watcher
	sub, err := s.be.Subscribe(ns, since, func(sub Subscription) {
		wt = newWatcher(ns, sub.Gen, s.opts.watcherBuffer, true).since(sub)
		wt.attach(rc.SetWriteDeadline)
		s.hub.add(wt)
	})
	if err != nil {
		s.planeError(w, r, ns, err)
		return
	}
	defer func() {
		wt.finish()
		s.unwatch(wt)
	}()
	s.guard.track(wt, r)
	if rv := wt.revocation(); rv != nil {
		s.refuseRevoked(w, r, rv)
		return
	}

	unquiet := s.speak(r) // no black hole may open mid-write, until unquiet
	defer func() {
		if unquiet != nil {
			unquiet()
		}
	}()
	s.writeSSEHeaders(w, sub.StoreID, sub.NsRev, sub.Head, ns)

	// The backlog, then a progress event: the client learns at once that it
	// is current up to the head.
	cursor, nsRev := sub.Head, sub.NsRev
	if !wt.arm(s.writeTimeout()) {
		return
	}
	for _, c := range sub.Backlog {
		if _, err := w.Write(c.view(aware).frame()); err != nil {
			return
		}
	}
	var buf []byte
	progress := func() error {
		age, unconfirmed := s.be.Freshness(ns)
		data, _ := json.Marshal(transport.Progress{Namespace: ns, StoreID: sub.StoreID, Revision: nsRev, Cursor: cursor,
			AgeMillis: age.Milliseconds(), Unconfirmed: unconfirmed})
		buf = appendFrame(buf[:0], transport.EventProgress, cursor, data)
		_, err := w.Write(buf)
		return err
	}
	// Not past sub.head: changes after it may be queued but not yet sent.
	if progress() != nil || rc.Flush() != nil {
		return
	}
	here.Confirm()
	unquiet()
	unquiet = nil

	ticker := time.NewTicker(s.opts.heartbeat)
	defer ticker.Stop()
	shard := rand.Int() // which of a relay's beats this stream hears
	beats := s.hub.beats(shard)
	for {
		beat := false
		select {
		case <-wt.wake:
		case <-ticker.C:
			beat = true
		case <-beats:
			beat, beats = true, s.hub.beats(shard)
		case <-wt.done:
			return
		case <-r.Context().Done():
			return
		}
		var healed, ok bool
		unquiet, healed, ok = s.heard(wt, r) // send nothing at all while black-holed
		if !ok {
			return
		}
		beat = beat || healed         // say at once that the stream is alive
		d := s.hub.cursor(wt, cursor) // before take: every change up to d is queued
		items, overflow := wt.take()
		if overflow {
			return // fell behind: the client resumes from its last id
		}
		if !wt.arm(s.writeTimeout()) {
			return
		}
		wrote := false
		for _, c := range items {
			if c.CS.Revision <= cursor {
				continue // already sent with the backlog
			}
			if _, err := w.Write(c.view(aware).frame()); err != nil {
				return
			}
			cursor, nsRev, wrote = c.CS.Revision, c.CS.Revision, true
		}
		wt.recycle(items)
		if beat {
			cursor = max(cursor, d)
			if progress() != nil {
				return
			}
			wrote = true
		}
		if wrote {
			if rc.Flush() != nil {
				return
			}
			here.Confirm()
		}
		unquiet()
		unquiet = nil
	}
}

func (s *Server) handleAck(w http.ResponseWriter, r *http.Request) {
	s.stats.acks.Add(1)
	if !s.gate(w, r, false) {
		return
	}
	bp := ackBuffers.Get().(*[]byte)
	defer ackBuffers.Put(bp)
	data, err := readBodyInto(w, r, maxAckBatch, bp)
	if err != nil {
		s.planeError(w, r, "", err)
		return
	}
	if len(data) > maxAckBytes && !bytes.Contains(data, []byte(`"acks"`)) {
		s.planeError(w, r, "", &http.MaxBytesError{Limit: maxAckBytes}) // one ack, too large
		return
	}
	acks, batch, err := parseAckBody(data, s.opts.offers(transport.CapabilityAckRelay), s.follow != nil)
	switch {
	case err != nil:
	case !batch && len(data) > maxAckBytes:
		err = &http.MaxBytesError{Limit: maxAckBytes}
	case batch && !s.opts.offers(transport.CapabilityAckBatch):
		err = fmt.Errorf("%w: batched acks are not offered", ErrInvalid)
	}
	if err != nil {
		s.planeError(w, r, "", err)
		return
	}
	if acks, err = s.readableAcks(r, acks, batch); err != nil {
		s.planeError(w, r, "", err) // before the lookup: a refusal tells nothing of the namespace
		return
	}
	s.bindAckSender(r)
	if acks, err = s.boundAcks(r, acks, batch); err != nil {
		s.planeError(w, r, "", err)
		return
	}
	if !batch && s.follow == nil {
		if _, ok := s.be.NsRevision(acks[0].Namespace); !ok {
			s.planeError(w, r, acks[0].Namespace, ErrUnknownNamespace)
			return
		}
	}
	// One namespace's trouble must not refuse the others: acks of
	// namespaces that do not exist (any more), or of revisions a restore
	// undid, are dropped.
	s.recordAcks(s.be.Known(acks))
	defer s.speak(r)()
	ns := ""
	if !batch {
		ns = acks[0].Namespace
	}
	s.planeHeaders(w, ns)
	w.WriteHeader(http.StatusNoContent)
}

// handleAckStream is POST /sdk/ack/stream (capability ack-stream, over
// HTTP/2 only): the reply's headers go at once, then the request body is
// read for as long as the client keeps it open, one AckBatch per line,
// each recorded as a batched POST /sdk/ack is. A malformed or oversized
// line ends the stream (the client opens another); so does a server stop.
func (s *Server) handleAckStream(w http.ResponseWriter, r *http.Request) {
	if !s.opts.offers(transport.CapabilityAckStream) || !s.opts.offers(transport.CapabilityAckBatch) {
		s.planeError(w, r, "", fmt.Errorf("%w: the ack stream is not offered", ErrInvalid))
		return
	}
	if r.ProtoMajor < 2 {
		// Over HTTP/1.1 a body that never ends holds a connection.
		s.planeError(w, r, "", fmt.Errorf("%w: the ack stream needs HTTP/2", ErrInvalid))
		return
	}
	s.stats.ackStreams.Add(1)
	if !s.gate(w, r, false) {
		return
	}
	s.planeHeaders(w, "")
	w.WriteHeader(http.StatusOK)
	_ = http.NewResponseController(w).Flush()
	sc := bufio.NewScanner(r.Body)
	sc.Buffer(make([]byte, 0, 256), maxAckBatch) // a client's line fits; a relay's grows it
	// A client's id and namespaces allocated once; the slice of acks
	// reused line after line (a sink keeps none).
	dec := ackDecoder{intern: true, reuse: true}
	ownIDs, relay := s.opts.offers(transport.CapabilityAckRelay), s.follow != nil
	s.bindAckSender(r)
	// The stream outlives its authentication: when the token table
	// changed (the guard's count moved) or the identity's expiry passed,
	// the next line authenticates again, and a refusal ends the stream.
	seen := s.guard.generation()
	id, _ := access.FromContext(r.Context())
	expires := id.Expires()
	for sc.Scan() {
		acks, batch, err := dec.parse(sc.Bytes(), ownIDs, relay)
		if err != nil || !batch {
			return
		}
		s.stats.acks.Add(1)
		if s.opts.tokens != nil {
			if g := s.guard.generation(); g != seen || !expires.IsZero() && !time.Now().Before(expires) {
				seen = g
				now, ok := s.opts.tokens.AuthenticateRequest(r)
				if !ok {
					s.log.Debug("dataplane: ack stream ended: its token was revoked or has expired", "token", id.Name)
					return
				}
				id, expires = now, now.Expires()
				r = r.WithContext(access.NewContext(r.Context(), now))
			}
		}
		acks, _ = s.readableAcks(r, acks, true)
		acks, _ = s.boundAcks(r, acks, true)
		release := s.speak(r) // a black hole holds acks too
		s.recordAcks(s.be.Known(acks))
		release()
	}
}

// ackBuffers are the bodies of acks being read: decoding copies what it
// keeps, so a buffer serves request after request.
var ackBuffers = sync.Pool{New: func() any { b := make([]byte, 0, 1024); return &b }}

// readBodyInto reads a request body of at most limit bytes into *bp,
// growing it as needed.
func readBodyInto(w http.ResponseWriter, r *http.Request, limit int64, bp *[]byte) ([]byte, error) {
	if r.ContentLength > limit {
		return nil, &http.MaxBytesError{Limit: limit}
	}
	buf := (*bp)[:0]
	if n := int(r.ContentLength); n > cap(buf) {
		buf = make([]byte, 0, n)
	}
	body := http.MaxBytesReader(w, r.Body, limit)
	for {
		if len(buf) == cap(buf) {
			buf = append(buf, 0)[:len(buf)]
		}
		n, err := body.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+n]
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, err
		}
	}
	if cap(buf) <= 64<<10 { // keep small buffers only
		*bp = buf
	}
	return buf, nil
}

// heard waits while the server is black-holed, for a stream's writer: it
// returns with the right to write (the caller writes, then releases it),
// healed when a black hole ended meanwhile, or ok false when the stream
// ended (wt.done, the request's context).
func (s *Server) heard(wt *watcher, r *http.Request) (release func(), healed, ok bool) {
	for {
		release, hole := s.faults.Speak()
		if hole == nil {
			return release, healed, true
		}
		select {
		case <-hole:
			healed = true
		case <-wt.done:
			return nil, healed, false
		case <-r.Context().Done():
			return nil, healed, false
		}
	}
}

// writeSSEHeaders starts an SSE reply (a watch's or a stream's, of
// names): no caching, no proxy buffering, the plane's headers.
func (s *Server) writeSSEHeaders(w http.ResponseWriter, storeID string, nsRev, head int64, names ...string) {
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	h.Set("X-Accel-Buffering", "no")
	s.setPlaneHeaders(w, storeID, nsRev, head)
	s.setAge(w, names...)
	w.WriteHeader(http.StatusOK)
}

// setAge sets the age headers of a reply about names (none from an
// origin) and returns the age in milliseconds and the unconfirmed flag
// for its body.
func (s *Server) setAge(w http.ResponseWriter, names ...string) (int64, bool) {
	age, unconfirmed := s.be.Freshness(names...)
	h := w.Header()
	if age > 0 {
		h.Set(transport.HeaderAge, strconv.FormatInt(age.Milliseconds(), 10))
	}
	if unconfirmed {
		h.Set(transport.HeaderUnconfirmed, "true")
	}
	return age.Milliseconds(), unconfirmed
}

// demanded asks the backend for ns before a request reads it (a relay may
// have to follow it first) and answers the request itself when ns is
// refused. since is the request's cursor (-1: none).
func (s *Server) demanded(w http.ResponseWriter, r *http.Request, ns string, since int64) bool {
	if err := s.be.Demand(r.Context(), []SinceReq{{Name: ns, Since: since}})[ns]; err != nil {
		s.planeError(w, r, ns, err)
		return false
	}
	return true
}

// recordAcks records acks at the origin (and hands them to its observer),
// or hands them to a relay's forwarder.
func (s *Server) recordAcks(acks []transport.Ack) {
	if s.opts.ackSink != nil {
		s.opts.ackSink(acks, false)
		return
	}
	s.acks.record(acks, time.Now())
	if s.opts.observe != nil {
		s.opts.observe(acks)
	}
}

// admit bounds the snapshot bodies being written at once
// (WithMaxSnapshotsInFlight, counted by admission). Past the bound it
// answers 503 with a Retry-After spread over the window, so that a
// reconnect storm is served in waves rather than all at once. Without a
// bound, rp is nil.
func (s *Server) admit(w http.ResponseWriter, r *http.Request) (rp *reply, ok bool) {
	if s.snapshotSlots == nil {
		return nil, true
	}
	if rp, ok := s.snapshotSlots.admit(w, r); ok {
		return rp, true
	}
	s.stats.shed.Add(1)
	spread := time.Second + rand.N(max(s.opts.retryWindow, time.Second))
	w.Header().Set("Retry-After", strconv.FormatInt(int64(spread/time.Second), 10))
	w.Header().Del("ETag")
	writeError(w, http.StatusServiceUnavailable, transport.ErrorBody{Error: transport.CodeUnavailable,
		Message: "too many snapshots in flight; retry later", StoreID: s.StoreID()})
	return nil, false
}
