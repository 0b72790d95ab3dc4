package transport

// Every decoder of bytes from the server lives here, so that the fuzz
// targets (http_fuzz_test.go) exercise exactly the code the source runs.

import (
	"bytes"
	"compress/gzip"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"strconv"
	"strings"
	"time"
	"unsafe"

	"github.com/holdfast-dev/holdfast/internal/jsonscan"
	"github.com/holdfast-dev/holdfast/internal/wire"
)

// readBody reads a reply's body, decompressing gzip itself, and fails with
// ErrTooLarge when the body — compressed or decompressed — exceeds limit.
func readBody(resp *http.Response, limit int64) ([]byte, error) {
	var r io.Reader = &capReader{r: resp.Body, left: limit, limit: limit}
	switch ce := strings.ToLower(strings.TrimSpace(resp.Header.Get("Content-Encoding"))); ce {
	case "", "identity":
		if resp.ContentLength > limit {
			return nil, tooLarge("body", limit)
		}
	case "gzip", "x-gzip":
		gz, err := gzip.NewReader(r)
		if err != nil {
			if errors.Is(err, ErrTooLarge) {
				return nil, err
			}
			return nil, fmt.Errorf("%w: gzip: %v", ErrMalformed, err)
		}
		defer gz.Close()
		r = &capReader{r: gz, left: limit, limit: limit}
	default:
		return nil, fmt.Errorf("%w: unsupported Content-Encoding %q", ErrMalformed, wire.Truncate(ce, 64))
	}
	b, err := io.ReadAll(r)
	if err != nil {
		if errors.Is(err, gzip.ErrChecksum) || errors.Is(err, gzip.ErrHeader) {
			return nil, fmt.Errorf("%w: gzip: %v", ErrMalformed, err)
		}
		return nil, err
	}
	return b, nil
}

// capReader reads at most limit bytes and fails with ErrTooLarge, rather
// than a quiet EOF, when there are more.
type capReader struct {
	r           io.Reader
	left, limit int64
}

func (c *capReader) Read(p []byte) (int, error) {
	if c.left <= 0 {
		var one [1]byte
		for {
			n, err := c.r.Read(one[:])
			if n > 0 {
				return 0, tooLarge("body", c.limit)
			}
			if err != nil {
				return 0, err
			}
		}
	}
	if int64(len(p)) > c.left {
		p = p[:c.left]
	}
	n, err := c.r.Read(p)
	c.left -= int64(n)
	return n, err
}

// tooLarge names the limit as configured, so that the message points at
// the option to raise (WithMaxEventBytes, WithMaxSnapshotBytes).
func tooLarge(what string, limit int64) error {
	return fmt.Errorf("%w: %s exceeds the limit of %d bytes", ErrTooLarge, what, limit)
}

// statusError turns a non-success reply into a *StatusError, reading at most
// maxErrorBodyBytes of its body (the caller closes it).
func statusError(resp *http.Response) *StatusError {
	e := &StatusError{StatusCode: resp.StatusCode, RetryAfter: parseRetryAfter(resp.Header.Get("Retry-After"), time.Now())}
	var eb ErrorBody
	if body, err := readBody(resp, maxErrorBodyBytes); err == nil {
		if b, derr := decodeErrorBody(body); derr == nil {
			eb = b
			e.Code = wire.Truncate(b.Error, 128)
			e.Message = wire.Truncate(b.Message, 1024)
		}
	}
	e.StoreID = wire.Truncate(eb.StoreID, 128)
	if e.StoreID == "" {
		e.StoreID = wire.Truncate(resp.Header.Get(HeaderStoreID), 128)
	}
	switch resp.StatusCode {
	case http.StatusNotFound:
		// Only a holdfast server's 404 names a store; a web server's, a
		// framework's, or the reference server's for an unknown path (a
		// wrong base path) does not, whatever its body says.
		e.Err = ErrNotHoldfast
		if resp.Header.Get(HeaderStoreID) != "" || eb.Error == CodeNotFound && eb.StoreID != "" {
			e.Err = ErrNotFound
		}
	case http.StatusBadRequest:
		switch {
		case eb.Error == CodeCursorAhead: // a server of version 0 (or one that kept the old status)
			e.Err = ErrCursorAhead
		case eb.Error == CodeBadRequest && serverProtocol(resp.Header) >= 1:
			// Version 1 gives a refused cursor a status of its own: this
			// 400 is about the request, and a new snapshot would not fix it.
			e.Err = ErrBadRequest
		}
	case http.StatusConflict:
		// Version 1's status for a cursor above the head; a body cut short
		// still says so by its status.
		switch eb.Error {
		case CodeCursorAhead, "":
			e.Err = ErrCursorAhead
		case CodeCohortUnknown:
			e.Err = ErrCohortUnknown
		case CodePresenceUnknown:
			e.Err = ErrPresenceUnknown
		}
	case http.StatusUnauthorized, http.StatusForbidden:
		e.Err = ErrUnauthorized
	case http.StatusGone:
		e.Err = &CompactedError{CompactRevision: max(eb.CompactRevision, 0)}
	case http.StatusRequestEntityTooLarge:
		e.Err = ErrTooLarge
	}
	return e
}

// serverProtocol is the protocol version a reply names, 0 when none.
func serverProtocol(h http.Header) int {
	v, err := strconv.Atoi(strings.TrimSpace(h.Get(HeaderProtocol)))
	if err != nil || v < 0 {
		return 0
	}
	return v
}

// notHoldfast turns err, the failure to read a 200 reply as the protocol's,
// into ErrNotHoldfast when nothing says the reply came from a holdfast
// server: no Holdfast-Store-Id header, and a body (at most its first bytes)
// that is not a JSON object naming a store_id — a web page, another API, a
// single-page app answering every path. Otherwise err stands.
func notHoldfast(err error, resp *http.Response, body []byte, what string) error {
	if resp.Header.Get(HeaderStoreID) != "" || namesStore(body) {
		return err
	}
	return fmt.Errorf("%w: a 200 reply (Content-Type %q) without a %s header, and not %s: %v",
		ErrNotHoldfast, wire.Truncate(resp.Header.Get("Content-Type"), 64), HeaderStoreID, what, err)
}

// namesStore reports whether body starts with a JSON object with a
// non-empty store_id string.
func namesStore(body []byte) bool {
	var v struct {
		StoreID string `json:"store_id"`
	}
	return json.NewDecoder(bytes.NewReader(body)).Decode(&v) == nil && v.StoreID != ""
}

// parseRetryAfter reads a Retry-After value, seconds or an HTTP date; zero
// when absent, malformed or in the past.
func parseRetryAfter(v string, now time.Time) time.Duration {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0
	}
	if secs, err := strconv.ParseInt(v, 10, 64); err == nil {
		if secs <= 0 {
			return 0
		}
		if secs > int64(24*time.Hour/time.Second) {
			secs = int64(24 * time.Hour / time.Second)
		}
		return time.Duration(secs) * time.Second
	}
	if t, err := http.ParseTime(v); err == nil {
		if d := t.Sub(now); d > 0 {
			return min(d, 24*time.Hour)
		}
	}
	return 0
}

// maxAgeMillis is MaxAge in the wire's unit.
const maxAgeMillis = int64(MaxAge / time.Millisecond)

// parseAge reads an age in milliseconds from a Holdfast-Age value or an
// age_ms number's text. What is not a number says nothing: 0. A number is
// clamped to 0..maxAgeMillis, a fraction cut: a negative age would make
// data look fresher than its server said, and an absurd one is taken as
// very old, never as new.
func parseAge(s string) int64 {
	s = strings.TrimSpace(s)
	if !isNumberText(s) {
		return 0
	}
	if n, err := strconv.ParseInt(s, 10, 64); err == nil || errors.Is(err, strconv.ErrRange) {
		// Out of int64's range, n is its bound of the same sign.
		return min(max(n, 0), maxAgeMillis)
	}
	f, err := strconv.ParseFloat(s, 64) // a fraction or an exponent; ±Inf past float64
	if err != nil && !errors.Is(err, strconv.ErrRange) || math.IsNaN(f) {
		return 0
	}
	switch {
	case f <= 0:
		return 0
	case f >= float64(maxAgeMillis):
		return maxAgeMillis
	}
	return int64(f)
}

// isNumberText reports whether s looks like a JSON number (a sign, digits,
// a fraction, an exponent): not "Inf", "NaN", hex or words.
func isNumberText(s string) bool {
	if s == "" || s[0] != '-' && s[0] != '+' && (s[0] < '0' || s[0] > '9') {
		return false
	}
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c >= '0' && c <= '9', c == '-', c == '+', c == '.', c == 'e', c == 'E':
		default:
			return false
		}
	}
	return true
}

// ageJSON reads an age_ms member as parseAge does; absent, null or not a
// number is 0.
func ageJSON(raw json.RawMessage) int64 { return parseAge(string(raw)) }

// unconfirmedJSON reads an unconfirmed member: only its absence, null or
// false clear it; any other value sets it (a garbled flag is not taken
// for a confirmation).
func unconfirmedJSON(raw json.RawMessage) bool {
	switch v := strings.TrimSpace(string(raw)); v {
	case "", "null", "false":
		return false
	}
	return true
}

// unconfirmedHeader reads Holdfast-Unconfirmed as unconfirmedJSON does:
// set by any value but "false" (or an empty one).
func unconfirmedHeader(h http.Header) bool {
	for _, v := range h.Values(HeaderUnconfirmed) {
		if v = strings.TrimSpace(v); v != "" && !strings.EqualFold(v, "false") {
			return true
		}
	}
	return false
}

// replyAge folds a reply's age headers into what its body said (the
// body's age in *ageMillis, its flag in *unconfirmed): the staler wins,
// so a server that says it in only one place is heard.
func replyAge(h http.Header, ageMillis *int64, unconfirmed *bool) {
	*ageMillis = max(*ageMillis, parseAge(h.Get(HeaderAge)))
	*unconfirmed = *unconfirmed || unconfirmedHeader(h)
}

// decodeErrorBody decodes the JSON body of an error reply.
func decodeErrorBody(data []byte) (ErrorBody, error) {
	var eb ErrorBody
	if err := json.Unmarshal(data, &eb); err != nil {
		return ErrorBody{}, fmt.Errorf("%w: error body: %v", ErrMalformed, err)
	}
	return eb, nil
}

// notModifiedSnapshot builds the Snapshot of a 304 from the Holdfast-*
// headers (its age too), falling back on what the request named.
func notModifiedSnapshot(req SnapshotRequest, h http.Header) (*Snapshot, error) {
	snap := &Snapshot{
		Namespace: req.Namespace,
		StoreID:   h.Get(HeaderStoreID),
		Revision:  req.KnownRevision,
	}
	if snap.StoreID == "" {
		snap.StoreID = req.KnownStoreID
	}
	if snap.StoreID != req.KnownStoreID {
		return nil, fmt.Errorf("%w: 304 for store %q to a request naming store %q", ErrMalformed, wire.Truncate(snap.StoreID, 64), req.KnownStoreID)
	}
	if v := h.Get(HeaderRevision); v != "" {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n != req.KnownRevision {
			return nil, fmt.Errorf("%w: 304 with %s header %q to a request naming revision %d", ErrMalformed, HeaderRevision, wire.Truncate(v, 64), req.KnownRevision)
		}
	}
	snap.Cursor = snap.Revision
	if v := h.Get(HeaderCursor); v != "" {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < snap.Revision {
			return nil, fmt.Errorf("%w: %s header %q (revision %d)", ErrMalformed, HeaderCursor, wire.Truncate(v, 64), snap.Revision)
		}
		snap.Cursor = n
	}
	replyAge(h, &snap.AgeMillis, &snap.Unconfirmed)
	return snap, nil
}

// decodeSnapshot decodes a 200 body of GET /sdk/snapshot for namespace ns.
// Unknown fields are ignored; ns, store_id, revision and cursor are required
// (0 <= revision <= cursor). Values must be a JSON object (absent or null is
// an empty one) of at most maxKeys members: a larger one fails with
// ErrTooLarge before anything is built for its keys. Values is never nil.
// A bad age_ms or unconfirmed fails nothing (see parseAge,
// unconfirmedJSON).
func decodeSnapshot(data []byte, ns string, maxKeys int) (*Snapshot, error) {
	var w struct {
		Snapshot
		Revision    *int64          `json:"revision"`
		Cursor      *int64          `json:"cursor"`
		AgeMillis   json.RawMessage `json:"age_ms"`
		Unconfirmed json.RawMessage `json:"unconfirmed"`
	}
	if err := json.Unmarshal(data, &w); err != nil {
		return nil, fmt.Errorf("%w: snapshot: %v", ErrMalformed, err)
	}
	s := w.Snapshot
	switch {
	case s.Namespace != ns:
		return nil, fmt.Errorf("%w: snapshot of namespace %q, want %q", ErrMalformed, wire.Truncate(s.Namespace, 130), ns)
	case s.StoreID == "":
		return nil, fmt.Errorf("%w: snapshot without store_id", ErrMalformed)
	case w.Revision == nil || w.Cursor == nil:
		return nil, fmt.Errorf("%w: snapshot without revision or cursor", ErrMalformed)
	case *w.Revision < 0 || *w.Cursor < *w.Revision:
		return nil, fmt.Errorf("%w: snapshot revision %d, cursor %d (want 0 <= revision <= cursor)", ErrMalformed, *w.Revision, *w.Cursor)
	case s.CompactRevision < 0:
		return nil, fmt.Errorf("%w: snapshot compact_revision %d", ErrMalformed, s.CompactRevision)
	}
	s.Revision, s.Cursor = *w.Revision, *w.Cursor
	s.AgeMillis, s.Unconfirmed = ageJSON(w.AgeMillis), unconfirmedJSON(w.Unconfirmed)
	// json.Unmarshal checked that values is JSON; here, that it is an object.
	switch v := bytes.TrimLeft(s.Values, " \t\r\n"); {
	case len(v) == 0 || v[0] == 'n':
		s.Values = json.RawMessage(`{}`)
	case v[0] != '{':
		return nil, fmt.Errorf("%w: snapshot values are not a JSON object", ErrMalformed)
	default:
		if n := countMembers(v, maxKeys); n > maxKeys {
			return nil, fmt.Errorf("%w: snapshot has more than %d keys (the limit set by WithMaxSnapshotKeys)", ErrTooLarge, maxKeys)
		}
	}
	return &s, nil
}

// decodeChangeSet decodes one change set of namespace ns: store_id set,
// revision > 0 and 0 <= prev_revision < revision. Keys are not checked here.
func decodeChangeSet(data []byte, ns string) (*ChangeSet, error) {
	cs, err := decodeAnyChangeSet(data)
	if err != nil {
		return nil, err
	}
	if cs.Namespace != ns {
		return nil, fmt.Errorf("%w: change of namespace %q, want %q", ErrMalformed, wire.Truncate(cs.Namespace, 130), ns)
	}
	return cs, nil
}

// decodeAnyChangeSet is decodeChangeSet for a change of any namespace (a
// stream's: its caller checks that the stream carries it).
func decodeAnyChangeSet(data []byte) (*ChangeSet, error) {
	if cs, ok := quickChangeSet(data); ok {
		return cs, nil
	}
	return decodeAnyChangeSetJSON(data)
}

// decodeAnyChangeSetJSON is decodeAnyChangeSet by encoding/json: the
// definition, and what quickChangeSet leaves to it.
func decodeAnyChangeSetJSON(data []byte) (*ChangeSet, error) {
	var cs ChangeSet
	if err := json.Unmarshal(data, &cs); err != nil {
		return nil, fmt.Errorf("%w: change: %v", ErrMalformed, err)
	}
	return checkChangeSet(&cs, data)
}

// checkChangeSet checks a decoded change set, and keeps data as its Raw.
func checkChangeSet(cs *ChangeSet, data []byte) (*ChangeSet, error) {
	switch {
	case cs.Namespace == "":
		return nil, fmt.Errorf("%w: change without ns", ErrMalformed)
	case cs.StoreID == "":
		return nil, fmt.Errorf("%w: change without store_id", ErrMalformed)
	case cs.Revision <= 0 || cs.PrevRevision < 0 || cs.PrevRevision >= cs.Revision:
		return nil, fmt.Errorf("%w: change revision %d, prev_revision %d (want 0 <= prev_revision < revision)", ErrMalformed, cs.Revision, cs.PrevRevision)
	}
	if cs.Raw == nil {
		cs.Raw = bytes.Clone(data) // the caller's buffer may be reused
	}
	return cs, nil
}

// quickChangeSet reads a change set as servers write it (encoding/json's
// compact output, which a relay passes on as it came), without
// reflection: every client reads one per change, and encoding/json spent
// about 900 bytes and ten microseconds on each. It takes only members ns,
// revision, prev_revision, store_id, committed_at, puts and deletes, each
// at most once, no whitespace between them, names and keys of printable
// ASCII without escapes, a valid change set; values are taken as they are
// (checked by jsonscan.SkipValue as json.Valid would), sharing the bytes
// of Raw. Anything else, ok false, is decodeAnyChangeSetJSON's to read or
// refuse; what it takes, that one reads alike (fuzzed).
func quickChangeSet(data []byte) (*ChangeSet, bool) {
	b := bytes.Clone(data) // Raw: the caller's buffer may be reused
	cs := &ChangeSet{Raw: b}
	var seen [7]bool
	ok := quickMembers(b, func(key []byte, i int) (int, bool) {
		var k int
		var v []byte
		var exact, ok bool
		switch string(key) {
		case "ns":
			v, i, ok = quickString(b, i)
			k, cs.Namespace = 0, string(v)
		case "revision":
			k = 1
			cs.Revision, i, exact, ok = jsonscan.Int(bytesString(b), i)
			ok = ok && exact
		case "prev_revision":
			k = 2
			cs.PrevRevision, i, exact, ok = jsonscan.Int(bytesString(b), i)
			ok = ok && exact
		case "store_id":
			v, i, ok = quickString(b, i)
			k, cs.StoreID = 3, string(v)
		case "committed_at":
			k = 4
			start := i
			if _, i, ok = quickString(b, i); ok {
				ok = cs.CommittedAt.UnmarshalJSON(b[start:i]) == nil
			}
		case "puts":
			k = 5
			cs.Puts, i, ok = quickPuts(b, i)
		case "deletes":
			k = 6
			cs.Deletes, i, ok = quickDeletes(b, i)
		}
		if !ok || seen[k] {
			return 0, false
		}
		seen[k] = true
		return i, true
	})
	if !ok {
		return nil, false
	}
	if _, err := checkChangeSet(cs, nil); err != nil {
		return nil, false // encoding/json's to refuse, with its words
	}
	return cs, true
}

// quickMembers reads the members of the object b, with no whitespace
// between them and names as quickString takes them: member reads the
// value of each at b[i:] and returns the index after it. ok false when
// the object is not of that form, or member refused a value (an unknown
// name too).
func quickMembers(b []byte, member func(name []byte, i int) (next int, ok bool)) bool {
	if len(b) < 2 || b[0] != '{' || b[len(b)-1] != '}' {
		return false
	}
	i := 1
	for i < len(b)-1 {
		if i > 1 {
			if b[i] != ',' {
				return false
			}
			i++
		}
		name, next, ok := quickString(b, i)
		if !ok || next >= len(b) || b[next] != ':' {
			return false
		}
		if i, ok = member(name, next+1); !ok {
			return false
		}
	}
	return i == len(b)-1
}

// quickPuts reads a puts object at b[i:]: keys as quickString takes them,
// each once, values as they are (a slice of b, its capacity cut so that
// an append cannot reach the bytes after it).
func quickPuts(b []byte, i int) (map[string]json.RawMessage, int, bool) {
	if i >= len(b) || b[i] != '{' {
		return nil, 0, false
	}
	puts := make(map[string]json.RawMessage)
	i++
	for first := true; ; first = false {
		if i < len(b) && b[i] == '}' && first {
			return puts, i + 1, true
		}
		key, next, ok := quickString(b, i)
		if !ok || next >= len(b) || b[next] != ':' {
			return nil, 0, false
		}
		// One JSON value, checked as json.Valid would, within
		// encoding/json's nesting limit counting the change set's object
		// and puts; no white space before it (encoding/json keeps a value
		// without the space around it), none after it (SkipValue stops at
		// its end).
		end, err := jsonscan.SkipValue(bytesString(b), next+1, 2)
		if err != nil {
			return nil, 0, false
		}
		if _, dup := puts[string(key)]; dup {
			return nil, 0, false // encoding/json keeps the last: its to say
		}
		puts[string(key)] = b[next+1 : end : end]
		switch {
		case end < len(b) && b[end] == ',':
			i = end + 1
		case end < len(b) && b[end] == '}':
			return puts, end + 1, true
		default:
			return nil, 0, false
		}
	}
}

// quickDeletes reads a deletes array of strings at b[i:].
func quickDeletes(b []byte, i int) ([]string, int, bool) {
	if i >= len(b) || b[i] != '[' {
		return nil, 0, false
	}
	dels := []string{}
	i++
	for first := true; ; first = false {
		if i < len(b) && b[i] == ']' && first {
			return dels, i + 1, true
		}
		v, next, ok := quickString(b, i)
		if !ok || next >= len(b) {
			return nil, 0, false
		}
		dels = append(dels, string(v))
		switch b[next] {
		case ',':
			i = next + 1
		case ']':
			return dels, next + 1, true
		default:
			return nil, 0, false
		}
	}
}

// decodeProgress decodes one progress event of namespace ns: store_id set,
// cursor present and 0 <= revision <= cursor.
func decodeProgress(data []byte, ns string) (*Progress, error) {
	var w struct {
		Progress
		Cursor      *int64          `json:"cursor"`
		AgeMillis   json.RawMessage `json:"age_ms"`
		Unconfirmed json.RawMessage `json:"unconfirmed"`
	}
	if err := json.Unmarshal(data, &w); err != nil {
		return nil, fmt.Errorf("%w: progress: %v", ErrMalformed, err)
	}
	p := w.Progress
	switch {
	case p.Namespace != ns:
		return nil, fmt.Errorf("%w: progress of namespace %q, want %q", ErrMalformed, wire.Truncate(p.Namespace, 130), ns)
	case p.StoreID == "":
		return nil, fmt.Errorf("%w: progress without store_id", ErrMalformed)
	case w.Cursor == nil:
		return nil, fmt.Errorf("%w: progress without cursor", ErrMalformed)
	case p.Revision < 0 || *w.Cursor < p.Revision:
		return nil, fmt.Errorf("%w: progress revision %d, cursor %d (want 0 <= revision <= cursor)", ErrMalformed, p.Revision, *w.Cursor)
	}
	p.Cursor = *w.Cursor
	p.AgeMillis, p.Unconfirmed = ageJSON(w.AgeMillis), unconfirmedJSON(w.Unconfirmed)
	return &p, nil
}

// decodeSSEEvent decodes the data of one SSE event of type typ. Events
// without data never reach it (the caller skips them).
func decodeSSEEvent(typ string, data []byte, ns string, maxBytes int) (Event, error) {
	if len(data) > maxBytes {
		return Event{}, tooLarge("event", int64(maxBytes))
	}
	switch typ {
	case EventChange:
		cs, err := decodeChangeSet(data, ns)
		if err != nil {
			return Event{}, err
		}
		return Event{Change: cs}, nil
	case EventProgress:
		p, err := decodeProgress(data, ns)
		if err != nil {
			return Event{}, err
		}
		return Event{Progress: p}, nil
	}
	return Event{}, fmt.Errorf("%w: unknown event type %q", ErrMalformed, wire.Truncate(typ, 64))
}

// decodeEvents decodes a 200 body of GET /sdk/events for namespace ns: each
// change at most maxEventBytes and valid, revisions strictly increasing and
// at most the cursor, store_id set, cursor present, 0 <= revision <= cursor.
func decodeEvents(data []byte, ns string, maxEventBytes int) (*EventsResponse, error) {
	var w struct {
		Namespace   string            `json:"ns"`
		StoreID     string            `json:"store_id"`
		Cursor      *int64            `json:"cursor"`
		Revision    int64             `json:"revision"`
		Changes     []json.RawMessage `json:"changes"`
		AgeMillis   json.RawMessage   `json:"age_ms"`
		Unconfirmed json.RawMessage   `json:"unconfirmed"`
	}
	if err := json.Unmarshal(data, &w); err != nil {
		return nil, fmt.Errorf("%w: events: %v", ErrMalformed, err)
	}
	switch {
	case w.Namespace != "" && w.Namespace != ns:
		return nil, fmt.Errorf("%w: events of namespace %q, want %q", ErrMalformed, wire.Truncate(w.Namespace, 130), ns)
	case w.StoreID == "":
		return nil, fmt.Errorf("%w: events without store_id", ErrMalformed)
	case w.Cursor == nil:
		return nil, fmt.Errorf("%w: events without cursor", ErrMalformed)
	case w.Revision < 0 || *w.Cursor < w.Revision:
		return nil, fmt.Errorf("%w: events revision %d, cursor %d (want 0 <= revision <= cursor)", ErrMalformed, w.Revision, *w.Cursor)
	}
	r := &EventsResponse{Namespace: ns, StoreID: w.StoreID, Cursor: *w.Cursor, Revision: w.Revision,
		AgeMillis: ageJSON(w.AgeMillis), Unconfirmed: unconfirmedJSON(w.Unconfirmed)}
	if len(w.Changes) > 0 {
		r.Changes = make([]ChangeSet, 0, len(w.Changes))
	}
	var last int64
	for i, raw := range w.Changes {
		if len(raw) > maxEventBytes {
			return nil, tooLarge(fmt.Sprintf("change %d", i), int64(maxEventBytes))
		}
		cs, err := decodeChangeSet(raw, ns)
		if err != nil {
			return nil, fmt.Errorf("events: change %d: %w", i, err)
		}
		if cs.Revision <= last || cs.Revision > r.Cursor {
			return nil, fmt.Errorf("%w: events: change %d has revision %d after %d, cursor %d", ErrMalformed, i, cs.Revision, last, r.Cursor)
		}
		last = cs.Revision
		r.Changes = append(r.Changes, *cs)
	}
	return r, nil
}

// decodeStreamProgress decodes the data of a stream's progress event:
// store_id set, cursor present and not negative. It names no namespace.
func decodeStreamProgress(data []byte) (*StreamProgress, error) {
	if p, ok := quickStreamProgress(data); ok {
		return p, nil
	}
	return decodeStreamProgressJSON(data)
}

// decodeStreamProgressJSON is decodeStreamProgress by encoding/json: the
// definition, and what quickStreamProgress leaves to it.
func decodeStreamProgressJSON(data []byte) (*StreamProgress, error) {
	var w struct {
		StoreID     string          `json:"store_id"`
		Cursor      *int64          `json:"cursor"`
		AgeMillis   json.RawMessage `json:"age_ms"`
		Unconfirmed json.RawMessage `json:"unconfirmed"`
	}
	if err := json.Unmarshal(data, &w); err != nil {
		return nil, fmt.Errorf("%w: stream progress: %v", ErrMalformed, err)
	}
	switch {
	case w.StoreID == "":
		return nil, fmt.Errorf("%w: stream progress without store_id", ErrMalformed)
	case w.Cursor == nil || *w.Cursor < 0:
		return nil, fmt.Errorf("%w: stream progress without a cursor >= 0", ErrMalformed)
	}
	return &StreamProgress{StoreID: w.StoreID, Cursor: *w.Cursor,
		AgeMillis: ageJSON(w.AgeMillis), Unconfirmed: unconfirmedJSON(w.Unconfirmed)}, nil
}

// quickStreamProgress reads a stream progress as servers write it,
// without reflection: a relay sends one to each client with every change,
// and encoding/json spent 280 bytes and a few microseconds on each. It
// takes only the plain form: members store_id (a string of printable
// ASCII, no escape), cursor and age_ms (integers) and unconfirmed (true,
// false or null), each at most once, in any order, no whitespace, the
// progress valid. Anything else, ok false, is decodeStreamProgressJSON's
// to read or refuse; what it takes, that one reads alike (fuzzed).
func quickStreamProgress(b []byte) (p *StreamProgress, ok bool) {
	var out StreamProgress
	var seen [4]bool
	ok = quickMembers(b, func(name []byte, i int) (int, bool) {
		var k int
		var ok bool
		switch string(name) {
		case "store_id":
			var v []byte
			v, i, ok = quickString(b, i)
			k, out.StoreID = 0, string(v)
		case "cursor":
			var exact bool
			out.Cursor, i, exact, ok = jsonscan.Int(bytesString(b), i)
			k, ok = 1, ok && exact // out of int64: encoding/json refuses it
		case "age_ms":
			var n int64
			n, i, _, ok = jsonscan.Int(bytesString(b), i)
			k, out.AgeMillis = 2, min(max(n, 0), maxAgeMillis) // as parseAge: out of range, the bound of its sign
		case "unconfirmed":
			k, ok = 3, true
			switch {
			case bytes.HasPrefix(b[i:], []byte("true")):
				out.Unconfirmed, i = true, i+4
			case bytes.HasPrefix(b[i:], []byte("false")):
				i += 5
			case bytes.HasPrefix(b[i:], []byte("null")):
				i += 4
			default:
				ok = false
			}
		}
		if !ok || seen[k] {
			return 0, false
		}
		seen[k] = true
		return i, true
	})
	if !ok || out.StoreID == "" || !seen[1] || out.Cursor < 0 {
		return nil, false
	}
	return &out, true
}

// quickString reads a JSON string of printable ASCII without escapes at
// b[i:], returning its bytes and the index after its closing quote. (It is
// not jsonscan.PlainString, which takes any UTF-8: this one inlines, and
// reading a progress event through that one measured 8% slower.)
func quickString(b []byte, i int) (v []byte, next int, ok bool) {
	if i >= len(b) || b[i] != '"' {
		return nil, 0, false
	}
	for j := i + 1; j < len(b); j++ {
		switch c := b[j]; {
		case c == '"':
			return b[i+1 : j], j + 1, true
		case c < 0x20 || c >= 0x7f || c == '\\':
			return nil, 0, false
		}
	}
	return nil, 0, false
}

// bytesString is b as a string, without a copy: the quick decoders scan
// bytes that nothing writes while they do, and keep copies of what they
// take.
func bytesString(b []byte) string { return unsafe.String(unsafe.SliceData(b), len(b)) }

// decodeNamespaceEnded decodes the data of an ended event (or an element
// of a long-poll's ended list): ns and error set, compact_revision not
// negative. The message is cut to 1 KiB.
func decodeNamespaceEnded(data []byte) (wire.NamespaceEndedBody, error) {
	var b wire.NamespaceEndedBody
	if err := json.Unmarshal(data, &b); err != nil {
		return wire.NamespaceEndedBody{}, fmt.Errorf("%w: ended: %v", ErrMalformed, err)
	}
	if err := checkEnded(&b); err != nil {
		return wire.NamespaceEndedBody{}, err
	}
	return b, nil
}

func checkEnded(b *wire.NamespaceEndedBody) error {
	switch {
	case b.Namespace == "":
		return fmt.Errorf("%w: ended without ns", ErrMalformed)
	case b.Code == "":
		return fmt.Errorf("%w: ended %q without an error code", ErrMalformed, wire.Truncate(b.Namespace, 130))
	case b.CompactRevision < 0:
		return fmt.Errorf("%w: ended %q with compact_revision %d", ErrMalformed, wire.Truncate(b.Namespace, 130), b.CompactRevision)
	}
	b.Code = wire.Truncate(b.Code, 128)
	b.Message = wire.Truncate(b.Message, 1024)
	return nil
}

// endedStatus maps an ended event's code to the status and sentinel the
// namespace's own watch would have failed with.
var endedStatus = map[string]struct {
	status int
	err    error
}{
	CodeInvalidNamespace: {http.StatusBadRequest, ErrInvalidNamespace},
	CodeBadRequest:       {http.StatusBadRequest, ErrBadRequest},
	CodeNotFound:         {http.StatusNotFound, ErrNotFound},
	CodeUnauthorized:     {http.StatusUnauthorized, ErrUnauthorized},
	CodeForbidden:        {http.StatusForbidden, ErrUnauthorized},
	CodeCursorAhead:      {http.StatusConflict, ErrCursorAhead},
	CodeTooLarge:         {http.StatusRequestEntityTooLarge, ErrTooLarge},
	CodeUnavailable:      {http.StatusServiceUnavailable, nil},
}

// endedError is what a namespace's own watch would have returned for the
// trouble an ended event reports: a *StatusError (with the status its
// watch would have had, the stream's store id) that unwraps to
// *CompactedError, ErrNotFound, ErrUnauthorized, ErrCursorAhead,
// ErrInvalidNamespace, ...; an unknown code is a 500 without a sentinel
// (retryable).
func endedError(b wire.NamespaceEndedBody, storeID string) error {
	se := &StatusError{Code: b.Code, Message: b.Message, StoreID: wire.Truncate(storeID, 128)}
	if b.Code == CodeCompacted {
		se.StatusCode, se.Err = http.StatusGone, &CompactedError{CompactRevision: b.CompactRevision}
	} else if m, ok := endedStatus[b.Code]; ok {
		se.StatusCode, se.Err = m.status, m.err
	} else {
		se.StatusCode = http.StatusInternalServerError
	}
	return fmt.Errorf("transport: stream: namespace %q ended: %w", b.Namespace, se)
}

// decodeStreamEvents decodes a 200 body of GET /sdk/stream/events: store_id
// set, cursor present and not negative, each change at most maxEventBytes,
// valid and at most the cursor, each ended element valid. Which namespaces
// the changes and ended elements may name, and their order, is the
// stream's to check (streamState).
func decodeStreamEvents(data []byte, maxEventBytes int) (*wire.StreamEventsResponse, error) {
	var w struct {
		StoreID     string            `json:"store_id"`
		Cursor      *int64            `json:"cursor"`
		Changes     []json.RawMessage `json:"changes"`
		Ended       []json.RawMessage `json:"ended"`
		AgeMillis   json.RawMessage   `json:"age_ms"`
		Unconfirmed json.RawMessage   `json:"unconfirmed"`
	}
	if err := json.Unmarshal(data, &w); err != nil {
		return nil, fmt.Errorf("%w: stream events: %v", ErrMalformed, err)
	}
	switch {
	case w.StoreID == "":
		return nil, fmt.Errorf("%w: stream events without store_id", ErrMalformed)
	case w.Cursor == nil || *w.Cursor < 0:
		return nil, fmt.Errorf("%w: stream events without a cursor >= 0", ErrMalformed)
	}
	r := &wire.StreamEventsResponse{StoreID: w.StoreID, Cursor: *w.Cursor,
		AgeMillis: ageJSON(w.AgeMillis), Unconfirmed: unconfirmedJSON(w.Unconfirmed)}
	if len(w.Changes) > 0 {
		r.Changes = make([]ChangeSet, 0, len(w.Changes))
	}
	for i, raw := range w.Changes {
		if len(raw) > maxEventBytes {
			return nil, tooLarge(fmt.Sprintf("change %d", i), int64(maxEventBytes))
		}
		cs, err := decodeAnyChangeSet(raw)
		if err != nil {
			return nil, fmt.Errorf("stream events: change %d: %w", i, err)
		}
		if cs.Revision > r.Cursor {
			return nil, fmt.Errorf("%w: stream events: change %d has revision %d above the cursor %d", ErrMalformed, i, cs.Revision, r.Cursor)
		}
		r.Changes = append(r.Changes, *cs)
	}
	for i, raw := range w.Ended {
		if len(raw) > maxEventBytes {
			return nil, tooLarge(fmt.Sprintf("ended %d", i), int64(maxEventBytes))
		}
		b, err := decodeNamespaceEnded(raw)
		if err != nil {
			return nil, fmt.Errorf("stream events: ended %d: %w", i, err)
		}
		r.Ended = append(r.Ended, b)
	}
	return r, nil
}

// streamState checks a stream's events against its request: a change or
// an end only of a namespace still in the stream, a namespace's changes
// above its cursor (since, its last change, the stream's progress) and
// increasing, the stream's progress never going back.
type streamState struct {
	floor   map[string]int64 // the namespaces still in the stream: their cursor
	cursor  int64            // the stream's last progress
	storeID string           // of the reply, for ended errors
}

func newStreamState(nss []WatchRequest) *streamState {
	st := &streamState{floor: make(map[string]int64, len(nss))}
	for _, r := range nss {
		st.floor[r.Namespace] = r.Since
	}
	return st
}

func (st *streamState) change(cs *ChangeSet) error {
	f, ok := st.floor[cs.Namespace]
	switch {
	case !ok:
		return fmt.Errorf("%w: change of namespace %q, which the stream does not carry (or no longer)", ErrMalformed, wire.Truncate(cs.Namespace, 130))
	case cs.Revision <= max(f, st.cursor):
		return fmt.Errorf("%w: change of %q at revision %d, at or below its cursor %d", ErrMalformed, cs.Namespace, cs.Revision, max(f, st.cursor))
	}
	st.floor[cs.Namespace] = cs.Revision
	return nil
}

func (st *streamState) progress(p *StreamProgress) error {
	if p.Cursor < st.cursor {
		return fmt.Errorf("%w: stream progress at %d, behind its progress at %d", ErrMalformed, p.Cursor, st.cursor)
	}
	st.cursor = p.Cursor
	return nil
}

func (st *streamState) ended(b wire.NamespaceEndedBody) (*NamespaceEnded, error) {
	if _, ok := st.floor[b.Namespace]; !ok {
		return nil, fmt.Errorf("%w: ended for namespace %q, which the stream does not carry (or no longer)", ErrMalformed, wire.Truncate(b.Namespace, 130))
	}
	delete(st.floor, b.Namespace)
	return &NamespaceEnded{Namespace: b.Namespace, Err: endedError(b, st.storeID)}, nil
}

// decodeStreamSSEEvent decodes the data of one event of a stream and checks
// it against the stream's state (which it advances).
func decodeStreamSSEEvent(typ string, data []byte, st *streamState, maxBytes int) (StreamEvent, error) {
	if len(data) > maxBytes {
		return StreamEvent{}, tooLarge("event", int64(maxBytes))
	}
	switch typ {
	case EventChange:
		cs, err := decodeAnyChangeSet(data)
		if err == nil {
			err = st.change(cs)
		}
		if err != nil {
			return StreamEvent{}, err
		}
		return StreamEvent{Change: cs}, nil
	case EventProgress:
		p, err := decodeStreamProgress(data)
		if err == nil {
			err = st.progress(p)
		}
		if err != nil {
			return StreamEvent{}, err
		}
		return StreamEvent{Progress: p}, nil
	case EventEnded:
		b, err := decodeNamespaceEnded(data)
		if err != nil {
			return StreamEvent{}, err
		}
		e, err := st.ended(b)
		if err != nil {
			return StreamEvent{}, err
		}
		return StreamEvent{Ended: e}, nil
	}
	return StreamEvent{}, fmt.Errorf("%w: unknown event type %q", ErrMalformed, wire.Truncate(typ, 64))
}
