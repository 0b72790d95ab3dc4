package dataplane

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"strconv"
	"time"

	"github.com/holdfast-dev/holdfast/internal/wire"
	"github.com/holdfast-dev/holdfast/transport"
)

// The multi-namespace watch (docs/PROTOCOL.md, "GET /sdk/stream"): one
// watcher, one bounded queue, however many namespaces a stream carries.

// parseStreamNamespaces reads the ns parameters of a stream request, each
// "<name>:<since>". It refuses the request whole (an error wrapping
// ErrInvalid) for no parameter, a malformed one, a name given twice or more
// than transport.MaxStreamNamespaces. Names are not checked here: an
// invalid one ends only itself (see splitInvalid).
func parseStreamNamespaces(values []string) ([]SinceReq, error) {
	switch {
	case len(values) == 0:
		return nil, fmt.Errorf("%w: no ns parameter (want ns=<name>:<since>, one per namespace)", ErrInvalid)
	case len(values) > transport.MaxStreamNamespaces:
		return nil, fmt.Errorf("%w: %d namespaces, at most %d per stream", ErrInvalid, len(values), transport.MaxStreamNamespaces)
	}
	reqs := make([]SinceReq, 0, len(values))
	seen := make(map[string]struct{}, len(values))
	for _, v := range values {
		i := lastColon(v)
		if i < 0 {
			return nil, fmt.Errorf("%w: ns parameter %q is not <name>:<since>", ErrInvalid, truncate(v))
		}
		name, num := v[:i], v[i+1:]
		since, ok := parseSince(num)
		if !ok {
			return nil, fmt.Errorf("%w: ns parameter %q: since %q is not a non-negative decimal integer", ErrInvalid, truncate(v), truncate(num))
		}
		if _, dup := seen[name]; dup {
			return nil, fmt.Errorf("%w: namespace %q named twice", ErrInvalid, truncate(name))
		}
		seen[name] = struct{}{}
		reqs = append(reqs, SinceReq{Name: name, Since: since})
	}
	return reqs, nil
}

// lastColon returns the index of the last ':' in v, or -1. A valid name
// has none, so the last one separates the since; an invalid name with a
// colon still gets its own ended event.
func lastColon(v string) int {
	for i := len(v) - 1; i >= 0; i-- {
		if v[i] == ':' {
			return i
		}
	}
	return -1
}

// parseSince accepts decimal digits only (no sign, no space) within int64.
func parseSince(s string) (int64, bool) {
	if s == "" || len(s) > 19 {
		return 0, false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return 0, false
		}
	}
	n, err := strconv.ParseInt(s, 10, 64)
	return n, err == nil
}

// truncate shortens what an error message quotes from a request.
func truncate(s string) string {
	if len(s) > 140 {
		return s[:140] + "…"
	}
	return s
}

// splitInvalid takes the namespaces with an invalid name out of reqs:
// each is an ended event of its own.
func splitInvalid(reqs []SinceReq) ([]SinceReq, []wire.NamespaceEndedBody) {
	var ended []wire.NamespaceEndedBody
	valid := reqs[:0:0]
	for _, r := range reqs {
		if err := transport.ValidateNamespace(r.Name); err != nil {
			ended = append(ended, wire.NamespaceEndedBody{Namespace: r.Name, Code: transport.CodeInvalidNamespace, Message: err.Error()})
			continue
		}
		valid = append(valid, r)
	}
	return valid, ended
}

// streamRequest reads a stream request's namespaces: those to subscribe,
// and those already ended by an invalid name or refused by the backend.
func (s *Server) streamRequest(r *http.Request) ([]SinceReq, []wire.NamespaceEndedBody, error) {
	reqs, err := parseStreamNamespaces(r.URL.Query()["ns"])
	if err != nil {
		return nil, nil, err
	}
	valid, ended := splitInvalid(reqs)
	valid, denied := s.splitForbidden(r, valid) // before demand: a relay follows none of them
	ended = append(ended, denied...)
	refused := s.be.Demand(r.Context(), valid)
	if len(refused) == 0 {
		return valid, ended, nil
	}
	kept := valid[:0:0]
	for _, q := range valid {
		if err := refused[q.Name]; err != nil {
			_, body := errorReply(err)
			ended = append(ended, wire.NamespaceEndedBody{Namespace: q.Name, Code: body.Error, Message: body.Message})
			continue
		}
		kept = append(kept, q)
	}
	return kept, ended, nil
}

func endedFrame(b []byte, e wire.NamespaceEndedBody) []byte {
	data, _ := json.Marshal(e)
	return appendFrame(b, transport.EventEnded, -1, data)
}

func (s *Server) handleStream(w http.ResponseWriter, r *http.Request) {
	s.stats.streams.Add(1)
	if !s.gate(w, r, true) {
		return
	}
	defer s.bindClient(r, true)()
	here := s.present(r, true)
	defer here.Close()
	reqs, ended, err := s.streamRequest(r)
	if err != nil {
		s.planeError(w, r, "", err)
		return
	}
	rc := http.NewResponseController(w)
	aware := rolloutAware(r)
	// The tick channel before the subscription: a head move after
	// sub.head closes it (or a later one), even one made while the
	// stream is still opening.
	tick := s.hub.ticks()
	var wt *watcher
	sub, more := s.be.SubscribeMany(reqs, func(sub Subscription, names []string) {
		// Even with every namespace ended the stream stays: it still
		// speaks for the store (progress), and ends with it (reset).
		wt = newMultiWatcher(names, sub.Gen, s.opts.watcherBuffer, true).since(sub)
		wt.attach(rc.SetWriteDeadline)
		s.hub.add(wt)
	})
	ended = append(ended, more...)
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
	names := wt.names()
	s.writeSSEHeaders(w, sub.StoreID, 0, sub.Head, names...)

	// The ended namespaces, the backlog in store order, then a progress
	// event at the head: the client learns at once that every namespace
	// it joined is current up to it.
	told := sub.Head
	if !wt.arm(s.writeTimeout()) {
		return
	}
	var buf []byte
	for _, e := range ended {
		buf = endedFrame(buf, e)
	}
	if len(buf) > 0 {
		if _, err := w.Write(buf); err != nil {
			return
		}
	}
	for _, c := range sub.Backlog {
		if _, err := w.Write(c.view(aware).frame()); err != nil {
			return
		}
	}
	// A relay's: its upstream's confirmations and flag changes when
	// progress last went out, when, and the flag and date it told.
	var toldConfirms, toldFlips uint64
	var toldAt, toldDated time.Time
	toldUnconfirmed := false
	progress := func(cursor int64) error {
		p := transport.StreamProgress{StoreID: sub.StoreID, Cursor: cursor}
		if s.follow != nil {
			st := s.follow.StreamState(names...)
			toldConfirms, toldFlips, toldUnconfirmed, toldAt, toldDated = st.Confirms, st.Flips, st.Unconfirmed, time.Now(), st.Dated
			p.AgeMillis, p.Unconfirmed = st.Age.Milliseconds(), st.Unconfirmed
		}
		_, err := w.Write(s.hub.streamProgress(p))
		return err
	}
	if progress(told) != nil || rc.Flush() != nil {
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
		beat, prompt, confirmed := false, false, false
		select {
		case <-wt.wake:
		case <-ticker.C:
			beat = true
		case <-beats:
			beat, confirmed, beats = true, true, s.hub.beats(shard)
		case <-tick:
			prompt = true
		case <-wt.done:
			if rv := wt.revocation(); rv != nil {
				// Its credentials ended it: each namespace says so, as a
				// new request would (the client reports unauthorized).
				var buf []byte
				for _, e := range rv.ended() {
					buf = endedFrame(buf, e)
				}
				if _, err := w.Write(buf); err == nil {
					_ = rc.Flush()
				}
			}
			return
		case <-r.Context().Done():
			return
		}
		var healed, ok bool
		unquiet, healed, ok = s.heard(wt, r) // send nothing at all while black-holed
		if !ok {
			return
		}
		beat = beat || healed // say at once that the stream is alive
		// The next tick's channel before the cursor: a tick for a head
		// beyond d closes this channel after d was read.
		tick = s.hub.ticks()
		d := s.hub.cursor(wt, told) // before take: every change up to d is queued
		items, overflow := wt.take()
		if overflow {
			return // fell behind: the client resumes every namespace from its cursor
		}
		if !wt.arm(s.writeTimeout()) {
			return
		}
		wrote := false
		var last int64 // the revision of the last change written
		for _, c := range items {
			if s.follow == nil && c.CS.Revision <= told || !wt.fresh(c) {
				continue // already sent with the backlog
			}
			if _, err := w.Write(c.view(aware).frame()); err != nil {
				return
			}
			wrote, last = true, c.CS.Revision
			if s.follow == nil {
				// In store order: a change's id speaks for the whole
				// stream. A relay's namespaces are each complete up to
				// a cursor of their own: its progress speaks for them.
				told = c.CS.Revision
			}
		}
		wt.recycle(items)
		if s.follow != nil {
			if wrote {
				st := s.follow.StreamState(names...)
				if len(names) == 1 && d <= last && !toldUnconfirmed && st.Flips == toldFlips && st.AtReceipt {
					// One namespace, its flag as told, its data dated at
					// the relay's receipt: the change says all a progress
					// at its revision would (its id is the namespace's
					// cursor at the client, which dates it at receipt, as
					// the relay dated it a moment before), and its
					// confirmation's beat is news to nobody. Data the
					// relay dates earlier (a resnapshot's, an aged
					// progress's) needs the progress: its age.
					told, toldAt, toldConfirms, toldDated = last, time.Now(), st.Confirms, st.Dated
				} else {
					// A relay's progress goes in the same write as the
					// changes it follows (the head covers them once their
					// upstream confirmed them), and the beat that
					// confirmation asked for is then news to nobody: one
					// frame per client per publish, not two. (The
					// heartbeat's beat always goes.)
					prompt = true
				}
			}
			// A flag's change always goes. Without one, a confirmation
			// is not worth a write to a stream that told progress just
			// before either (a publish's, say), unless it dates the data
			// earlier than told (a resnapshot's, an aged progress's): the
			// age its client knows is at most recentProgress older than
			// it could be.
			if confirmed && !healed && d <= told {
				st := s.follow.StreamState(names...)
				if st.Flips == toldFlips && (st.Confirms == toldConfirms || !st.Dated.Before(toldDated) && time.Since(toldAt) < recentProgress(s.opts.heartbeat)) {
					beat = false
				}
			}
		}
		if beat || (prompt && d > told) {
			told = max(told, d)
			if progress(told) != nil {
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

func (s *Server) handleStreamEvents(w http.ResponseWriter, r *http.Request) {
	s.stats.streamPolls.Add(1)
	if !s.gate(w, r, true) {
		return
	}
	defer s.bindClient(r, true)()
	defer s.present(r, false).Close()
	reqs, ended, err := s.streamRequest(r)
	if err != nil {
		s.planeError(w, r, "", err)
		return
	}
	wait := min(defaultWait, s.opts.maxWait)
	if v := r.URL.Query().Get("wait"); v != "" {
		if wait, err = parseDuration(v); err != nil {
			s.planeError(w, r, "", err)
			return
		}
		wait = min(wait, s.opts.maxWait)
	}
	tick := s.hub.ticks() // before the subscription, as in handleStream
	var wt *watcher
	var low int64 // the smallest since of the namespaces subscribed
	sub, more := s.be.SubscribeMany(reqs, func(sub Subscription, names []string) {
		low = sub.Head
		for _, q := range reqs {
			if q.Since < low && q.Since <= sub.Head {
				low = q.Since
			}
		}
		// Wait only when there is nothing to tell: no change (a relay's:
		// none it may send with its cursor), no ended namespace, and no
		// namespace behind the head.
		tell := len(sub.Backlog)
		if s.follow != nil {
			tell = len(upTo(sub.Backlog, sub.Head))
		}
		if tell == 0 && len(ended) == 0 && len(names) == len(reqs) && low >= sub.Head && wait > 0 {
			wt = newMultiWatcher(names, sub.Gen, s.opts.watcherBuffer, false).since(sub)
			s.hub.add(wt)
		}
	})
	ended = append(ended, more...)
	changes := sub.Backlog
	cursor := sub.Head
	if s.follow != nil {
		changes = upTo(changes, cursor)
	}
	if wt != nil {
		defer s.unwatch(wt)
		s.guard.track(wt, r)
		timer := time.NewTimer(wait)
		defer timer.Stop()
		var got []*Change
		if s.follow != nil {
			got = sub.Backlog // a relay's changes above its cursor: sent once the cursor reaches them
		}
	wait:
		for {
			final, prompt, killed := false, false, false
			select {
			case <-wt.wake:
			case <-tick:
				prompt = true
			case <-timer.C:
				final = true
			case <-wt.done:
				final, killed = true, true
			case <-r.Context().Done():
				return
			case <-stopping(r):
				panic(http.ErrAbortHandler)
			}
			tick = s.hub.ticks()
			d := s.hub.cursor(wt, cursor) // before take: every change up to d is queued
			if killed {
				// An ended watcher (DropStreams) is handed nothing
				// more: the hub's mark may be past what it got.
				d = cursor
			}
			items, overflow := wt.take()
			if overflow {
				// Changes were dropped from the queue: answer without
				// moving the cursor past them; the next poll reads them
				// from the history.
				got = nil
				break wait
			}
			for _, c := range items {
				switch {
				case s.follow != nil:
					// Each of a relay's namespaces is complete up to
					// its own cursor: the reply's speaks for them all.
					if wt.fresh(c) {
						got = append(got, c)
					}
				case c.CS.Revision > cursor:
					got = append(got, c)
					cursor = c.CS.Revision
				}
			}
			if s.follow != nil {
				if ready := upTo(got, max(d, cursor)); len(ready) > 0 || final || (prompt && d > low) {
					got, cursor = ready, max(d, cursor)
					break wait
				}
				continue
			}
			if len(got) > 0 || final || (prompt && d > low) {
				cursor = max(d, cursor)
				break wait
			}
		}
		changes = got
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
	s.setPlaneHeaders(w, sub.StoreID, 0, cursor)
	names := make([]string, len(reqs))
	for i, q := range reqs {
		names[i] = q.Name
	}
	age, unconfirmed := s.setAge(w, names...)
	writeStreamEvents(w, sub.StoreID, cursor, changes, ended, age, unconfirmed, rolloutAware(r))
}

// upTo returns the changes at or below cursor, in a new slice (changes is
// kept whole: the others come with a later cursor): what a relay's
// multi-namespace poll may send with that cursor.
func upTo(changes []*Change, cursor int64) []*Change {
	var out []*Change
	for _, c := range changes {
		if c.CS.Revision <= cursor {
			out = append(out, c)
		}
	}
	return out
}

// writeStreamEvents writes a wire.StreamEventsResponse, each change
// as the bytes encoded once for every reader that evaluates rollouts
// (aware), or for every one that does not (change.view).
func writeStreamEvents(w http.ResponseWriter, storeID string, cursor int64, changes []*Change, ended []wire.NamespaceEndedBody,
	ageMillis int64, unconfirmed, aware bool) {
	id, _ := json.Marshal(storeID)
	b := make([]byte, 0, 64+len(changes)*256)
	b = append(b, `{"store_id":`...)
	b = append(b, id...)
	b = append(b, `,"cursor":`...)
	b = strconv.AppendInt(b, cursor, 10)
	b = append(b, `,"changes":[`...)
	b = appendChanges(b, changes, aware)
	b = append(b, ']')
	if ageMillis > 0 {
		b = append(b, `,"age_ms":`...)
		b = strconv.AppendInt(b, ageMillis, 10)
	}
	if unconfirmed {
		b = append(b, `,"unconfirmed":true`...)
	}
	if len(ended) > 0 {
		data, _ := json.Marshal(ended)
		b = append(b, `,"ended":`...)
		b = append(b, data...)
	}
	b = append(b, "}\n"...)
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", strconv.Itoa(len(b)))
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(b)
}
