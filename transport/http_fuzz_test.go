package transport

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/holdfast-dev/holdfast/internal/jsonscan"
	"github.com/holdfast-dev/holdfast/internal/wire"
)

// Fuzz targets for every decoder of bytes from the server. Their seeds run
// in a plain `go test`; `go test -fuzz FuzzX ./transport/` explores.

func seedJSON(f *testing.F, vs ...any) {
	for _, v := range vs {
		b, err := json.Marshal(v)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
}

func wantKind(t *testing.T, err error, kinds ...error) {
	t.Helper()
	for _, k := range kinds {
		if errors.Is(err, k) {
			return
		}
	}
	t.Fatalf("error %v is none of %v", err, kinds)
}

func checkChange(t *testing.T, cs *ChangeSet) {
	t.Helper()
	if cs.Namespace != testNS || cs.StoreID == "" || cs.Revision <= 0 || cs.PrevRevision < 0 || cs.PrevRevision >= cs.Revision {
		t.Fatalf("accepted an invalid change %+v", cs)
	}
}

func checkProgress(t *testing.T, p *Progress) {
	t.Helper()
	if p.Namespace != testNS || p.StoreID == "" || p.Revision < 0 || p.Cursor < p.Revision {
		t.Fatalf("accepted an invalid progress %+v", p)
	}
	checkAge(t, p.AgeMillis)
}

// checkAge: an age taken from the server is never negative (fresher than
// the server said) nor past MaxAge.
func checkAge(t *testing.T, ms int64) {
	t.Helper()
	if ms < 0 || ms > maxAgeMillis {
		t.Fatalf("accepted an age of %d ms, outside 0..%d", ms, maxAgeMillis)
	}
}

func FuzzDecodeSSEEvent(f *testing.F) {
	for _, typ := range []string{EventChange, EventProgress} {
		for _, v := range []any{change(12, 11, map[string]string{"a": "1", "b": `{"x":[1,"y"]}`}, "c"), progress(11, 15)} {
			b, _ := json.Marshal(v)
			f.Add(typ, b)
		}
	}
	f.Add(EventChange, []byte(`{"ns":"payments.prod","revision":1e3}`))
	f.Add(EventProgress, []byte(`{"ns":"payments.prod","store_id":"s","revision":3,"cursor":2}`))
	f.Add("message", []byte(`{}`))
	f.Add(EventChange, []byte(`{"ns":"payments.prod","store_id":"s","revision":2,"prev_revision":1,"committed_at":"not a time"}`))
	f.Add(EventProgress, []byte(`{"ns":"payments.prod","store_id":"s","revision":3,"cursor":4,"age_ms":1500,"unconfirmed":true}`))
	f.Add(EventProgress, []byte(`{"ns":"payments.prod","store_id":"s","revision":3,"cursor":4,"age_ms":-7,"unconfirmed":"yes"}`))
	f.Add(EventProgress, []byte(`{"ns":"payments.prod","store_id":"s","revision":3,"cursor":4,"age_ms":1e400}`))
	f.Fuzz(func(t *testing.T, typ string, data []byte) {
		const maxBytes = 4 << 10
		e, err := decodeSSEEvent(typ, data, testNS, maxBytes)
		if err != nil {
			wantKind(t, err, ErrMalformed, ErrTooLarge)
			if e.Change != nil || e.Progress != nil {
				t.Fatalf("error %v with an event %+v", err, e)
			}
			return
		}
		if len(data) > maxBytes {
			t.Fatalf("accepted %d bytes over the %d limit", len(data), maxBytes)
		}
		switch {
		case e.Change != nil && e.Progress == nil:
			checkChange(t, e.Change)
		case e.Progress != nil && e.Change == nil:
			checkProgress(t, e.Progress)
		default:
			t.Fatalf("event %+v must have exactly one of Change and Progress", e)
		}
	})
}

func FuzzDecodeSnapshot(f *testing.F) {
	seedJSON(f, testSnapshot(), Snapshot{Namespace: testNS, StoreID: "s"})
	f.Add([]byte(`{"ns":"payments.prod","store_id":"s","revision":1,"cursor":1,"values":null}`))
	f.Add([]byte(`{"ns":"payments.prod","store_id":"s","revision":1,"cursor":1,"values":{"k":nul}}`))
	f.Add([]byte(`{"ns":"payments.prod","store_id":"s","revision":9223372036854775807,"cursor":9223372036854775807}`))
	f.Add([]byte(`{"ns":"payments.prod","store_id":"s","revision":1,"cursor":1,"values":[1]}`))
	f.Add([]byte(`{"ns":"payments.prod","store_id":"s","revision":1,"cursor":1,"values":{"a":1,"b":{"c":[2,"d:e"]},"f\"g:":3,"h":4}}`))
	f.Add([]byte(`{"ns":"payments.prod","store_id":"s","revision":1,"cursor":1,"age_ms":90000,"unconfirmed":true}`))
	f.Add([]byte(`{"ns":"payments.prod","store_id":"s","revision":1,"cursor":1,"age_ms":99999999999999999999999,"unconfirmed":1}`))
	f.Add([]byte(`{"ns":"payments.prod","store_id":"s","revision":1,"cursor":1,"age_ms":"12","unconfirmed":null}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		const maxKeys = 3
		s, err := decodeSnapshot(data, testNS, maxKeys)
		if err != nil {
			wantKind(t, err, ErrMalformed, ErrTooLarge)
			if errors.Is(err, ErrTooLarge) {
				var m map[string]json.RawMessage
				if json.Unmarshal(wireValues(t, data), &m) == nil && len(m) <= maxKeys && !hasDuplicateKeys(wireValues(t, data)) {
					t.Fatalf("refused %d keys as too many: %v", len(m), err)
				}
			}
			return
		}
		if s.Namespace != testNS || s.StoreID == "" || s.Revision < 0 || s.Cursor < s.Revision || s.CompactRevision < 0 || s.Values == nil {
			t.Fatalf("accepted an invalid snapshot %+v", s)
		}
		checkAge(t, s.AgeMillis)
		var m map[string]json.RawMessage
		if err := json.Unmarshal(s.Values, &m); err != nil || m == nil {
			t.Fatalf("values %q are not a JSON object: %v", s.Values, err)
		}
		if len(m) > maxKeys {
			t.Fatalf("accepted %d keys, more than %d", len(m), maxKeys)
		}
	})
}

func FuzzDecodeEvents(f *testing.F) {
	seedJSON(f,
		EventsResponse{StoreID: "s", Cursor: 15, Revision: 13, Changes: []ChangeSet{change(11, 10, map[string]string{"a": "1"}), change(13, 11, nil, "a")}},
		EventsResponse{Namespace: testNS, StoreID: "s", Cursor: 20},
	)
	f.Add([]byte(`{"store_id":"s","cursor":3,"changes":[{"ns":"payments.prod","store_id":"s","revision":4,"prev_revision":1}]}`))
	f.Add([]byte(`{"store_id":"s","cursor":3,"changes":null}`))
	f.Add([]byte(`{"store_id":"s","cursor":3,"changes":[],"age_ms":250.9,"unconfirmed":true}`))
	f.Add([]byte(`{"store_id":"s","cursor":3,"changes":[],"age_ms":-1e3,"unconfirmed":false}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		const maxEvent = 2 << 10
		r, err := decodeEvents(data, testNS, maxEvent)
		if err != nil {
			wantKind(t, err, ErrMalformed, ErrTooLarge)
			return
		}
		if r.Namespace != testNS || r.StoreID == "" || r.Revision < 0 || r.Cursor < r.Revision {
			t.Fatalf("accepted invalid events %+v", r)
		}
		checkAge(t, r.AgeMillis)
		var last int64
		for i := range r.Changes {
			checkChange(t, &r.Changes[i])
			if r.Changes[i].Revision <= last || r.Changes[i].Revision > r.Cursor {
				t.Fatalf("accepted change revisions out of order or past the cursor: %+v", r)
			}
			last = r.Changes[i].Revision
		}
	})
}

func FuzzDecodeErrorBody(f *testing.F) {
	seedJSON(f, ErrorBody{Error: CodeCompacted, CompactRevision: 812, StoreID: "s"},
		ErrorBody{Error: CodeSchemaViolation, Message: "m", Details: []string{"a", "b"}},
		ErrorBody{Error: CodeNotFound, Message: "unknown namespace", StoreID: "s"},
		ErrorBody{Error: CodeCursorAhead, Message: "cursor 9 is above the store's head 3", StoreID: "s"})
	f.Add([]byte(`not json`))
	f.Add([]byte(`{"error":7}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		if _, err := decodeErrorBody(data); err != nil {
			wantKind(t, err, ErrMalformed)
		}
		// The whole error path, as the source runs it on a reply.
		for _, status := range []int{http.StatusBadRequest, http.StatusNotFound, http.StatusGone, http.StatusServiceUnavailable} {
			resp := &http.Response{StatusCode: status, Header: http.Header{"Retry-After": {string(data)}},
				Body: io.NopCloser(bytes.NewReader(data))}
			e := statusError(resp)
			if e.StatusCode != status || e.RetryAfter < 0 || e.RetryAfter > 24*time.Hour || len(e.Code) > 128+3 || len(e.Message) > 1024+3 || len(e.StoreID) > 128+3 {
				t.Fatalf("statusError = %+v", e)
			}
			var ce *CompactedError
			if status == http.StatusGone && (!errors.As(e, &ce) || ce.CompactRevision < 0) {
				t.Fatalf("410 gave %+v", e)
			}
			if status == http.StatusNotFound && errors.Is(e, ErrNotFound) == errors.Is(e, ErrNotHoldfast) {
				t.Fatalf("404 gave %+v: want exactly one of ErrNotFound and ErrNotHoldfast", e)
			}
			if errors.Is(e, ErrNotFound) && e.StoreID == "" {
				t.Fatalf("404 naming no store gave ErrNotFound: %+v", e)
			}
			if errors.Is(e, ErrCursorAhead) != (status == http.StatusBadRequest && e.Code == CodeCursorAhead) {
				t.Fatalf("%d with code %q: ErrCursorAhead %v", status, e.Code, errors.Is(e, ErrCursorAhead))
			}
		}
	})
}

// fuzzGzip is reused: a new gzip.Writer allocates about 1 MB, which made
// each exec (and the fuzzer's minimisation) slow. Fuzz functions run one at
// a time per process.
var fuzzGzip = gzip.NewWriter(io.Discard)

func FuzzReadBody(f *testing.F) {
	f.Add([]byte(`{"ok":true}`), false)
	f.Add([]byte(`{"ok":true}`), true)
	f.Add(bytes.Repeat([]byte{0}, 5000), true)
	f.Add([]byte("\x1f\x8b\x08\x00\x00\x00\x00\x00"), false)
	f.Fuzz(func(t *testing.T, data []byte, compress bool) {
		const limit = 4 << 10
		body := data
		h := http.Header{}
		if len(data) > 4*limit {
			return // cheap execs; larger bodies add nothing
		}
		if compress {
			var buf bytes.Buffer
			zw := fuzzGzip
			zw.Reset(&buf)
			_, _ = zw.Write(data)
			_ = zw.Close()
			body = buf.Bytes()
			h.Set("Content-Encoding", "gzip")
		}
		// As sent, and as a server that claims gzip but sends anything.
		for _, hdr := range []http.Header{h, {"Content-Encoding": {"gzip"}}} {
			resp := &http.Response{StatusCode: 200, Header: hdr, ContentLength: -1, Body: io.NopCloser(bytes.NewReader(body))}
			got, err := readBody(resp, limit)
			if err != nil {
				if len(data) <= limit && hdr.Get("Content-Encoding") == h.Get("Content-Encoding") {
					t.Fatalf("readBody of %d valid bytes: %v", len(data), err)
				}
				continue
			}
			if len(got) > limit {
				t.Fatalf("readBody returned %d bytes over the %d limit", len(got), limit)
			}
			if hdr.Get("Content-Encoding") == h.Get("Content-Encoding") && !bytes.Equal(got, data) {
				t.Fatalf("readBody changed the body")
			}
		}
	})
}

func FuzzParseRetryAfter(f *testing.F) {
	now := time.Date(2026, 11, 29, 8, 0, 0, 0, time.UTC)
	for _, s := range []string{"", "5", "-1", "1e3", now.Add(time.Minute).Format(http.TimeFormat), "Sun, 06 Nov 1994 08:49:37 GMT", "Sunday, 06-Nov-94 08:49:37 GMT"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if d := parseRetryAfter(s, now); d < 0 || d > 24*time.Hour {
			t.Fatalf("parseRetryAfter(%q) = %v", s, d)
		}
	})
}

// bytesTransport answers every request with one fixed SSE body.
type bytesTransport struct{ body []byte }

func (b bytesTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	return &http.Response{
		StatusCode: 200, Request: req, ContentLength: -1,
		Header: http.Header{"Content-Type": {"text/event-stream"}},
		Body:   io.NopCloser(bytes.NewReader(b.body)),
	}, nil
}

// FuzzSSEStream runs whole streams through Watch: the frame reader,
// r3labs/sse's parser and the event decoder together.
func FuzzSSEStream(f *testing.F) {
	ch, _ := json.Marshal(change(12, 11, map[string]string{"a": "1"}))
	pr, _ := json.Marshal(progress(12, 14))
	f.Add([]byte("event: change\nid: 12\ndata: " + string(ch) + "\n\nevent: progress\nid: 14\ndata: " + string(pr) + "\n\n"))
	f.Add([]byte(": comment\n\nretry: 100\n\nid: 3\n\nevent: progress\r\ndata: " + string(pr) + "\r\n\r\n"))
	f.Add([]byte("event: change\ndata: {\"ns\":\n\n"))
	f.Add([]byte("event: progress\ndata: " + string(pr) + "\n"))
	f.Add([]byte("data: " + strings.Repeat("x", 3000) + "\n\n"))
	f.Fuzz(func(t *testing.T, stream []byte) {
		s, err := NewHTTPSource("http://fuzz.invalid", WithHTTPClient(&http.Client{Transport: bytesTransport{stream}}),
			WithMaxEventBytes(1<<10))
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		err = s.Watch(context.Background(), WatchRequest{Namespace: testNS}, func(e Event) error {
			switch {
			case e.Change != nil && e.Progress == nil:
				checkChange(t, e.Change)
			case e.Progress != nil && e.Change == nil:
				checkProgress(t, e.Progress)
			default:
				t.Fatalf("event %+v", e)
			}
			return nil
		})
		if err == nil {
			t.Fatal("Watch returned nil")
		}
		wantKind(t, err, ErrMalformed, ErrTooLarge, io.ErrUnexpectedEOF)
	})
}

// wireValues is the text of a snapshot body's "values" field.
func wireValues(t *testing.T, data []byte) json.RawMessage {
	var w struct {
		Values json.RawMessage `json:"values"`
	}
	if err := json.Unmarshal(data, &w); err != nil {
		t.Fatalf("a body decodeSnapshot accepted as JSON: %v", err)
	}
	return w.Values
}

// hasDuplicateKeys reports whether the JSON object obj names a key twice
// (a map decodes them into one, and countMembers counts both).
func hasDuplicateKeys(obj json.RawMessage) bool {
	dec := json.NewDecoder(bytes.NewReader(obj))
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return false
	}
	seen := map[string]bool{}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return false
		}
		k, _ := tok.(string)
		if seen[k] {
			return true
		}
		seen[k] = true
		var skip json.RawMessage
		if err := dec.Decode(&skip); err != nil {
			return false
		}
	}
	return false
}

// FuzzCountMembers checks countMembers against encoding/json on every
// valid JSON object.
func FuzzCountMembers(f *testing.F) {
	for _, s := range []string{`{}`, `{"a":1}`, `{"a:":"b:","c\\":{"d":[1,{"e":2}]}, "f" : "\":"}`, ` { "x" : [ ] } `} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, obj []byte) {
		var m map[string]json.RawMessage
		if json.Unmarshal(obj, &m) != nil || m == nil || hasDuplicateKeys(obj) {
			return
		}
		if n := countMembers(obj, len(m)); n != len(m) {
			t.Fatalf("countMembers(%q) = %d, want %d", obj, n, len(m))
		}
		if len(m) > 0 {
			if n := countMembers(obj, len(m)-1); n != len(m) {
				t.Fatalf("countMembers(%q, %d) = %d, want %d (one past the limit)", obj, len(m)-1, n, len(m))
			}
		}
	})
}

func FuzzDecodeNamespaceEnded(f *testing.F) {
	seedJSON(f, wire.NamespaceEndedBody{Namespace: "a", Code: CodeCompacted, CompactRevision: 7, Message: "m"},
		wire.NamespaceEndedBody{Namespace: "Bad Name", Code: CodeInvalidNamespace},
		wire.NamespaceEndedBody{Namespace: "a", Code: CodeCursorAhead})
	f.Add([]byte(`{"ns":"a","error":"compacted","compact_revision":-1}`))
	f.Add([]byte(`{"ns":"","error":"not_found"}`))
	f.Add([]byte(`{"ns":"a"}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		b, err := decodeNamespaceEnded(data)
		if err != nil {
			wantKind(t, err, ErrMalformed)
			return
		}
		if b.Namespace == "" || b.Code == "" || b.CompactRevision < 0 || len(b.Message) > 1024+len("…") {
			t.Fatalf("accepted an invalid ended %+v", b)
		}
		st := newStreamState([]WatchRequest{{Namespace: b.Namespace}})
		e, err := st.ended(b)
		var se *StatusError
		if err != nil || e.Namespace != b.Namespace || !errors.As(e.Err, &se) || se.Code != b.Code {
			t.Fatalf("ended %+v: %+v, %v", b, e, err)
		}
		if _, err := st.ended(b); !errors.Is(err, ErrMalformed) {
			t.Fatalf("a second end of %q: %v; want ErrMalformed", b.Namespace, err)
		}
	})
}

func FuzzDecodeStreamProgress(f *testing.F) {
	seedJSON(f, StreamProgress{StoreID: "s", Cursor: 12}, StreamProgress{StoreID: "s"})
	f.Add([]byte(`{"store_id":"s","cursor":-1}`))
	f.Add([]byte(`{"store_id":"s"}`))
	f.Add([]byte(`{"cursor":1}`))
	f.Add([]byte(`{"store_id":"s","cursor":1.5}`))
	f.Add([]byte(`{"store_id":"s","cursor":1,"age_ms":4000,"unconfirmed":true}`))
	f.Add([]byte(`{"store_id":"s","cursor":1,"age_ms":-9223372036854775809,"unconfirmed":{}}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		p, err := decodeStreamProgress(data)
		if err != nil {
			wantKind(t, err, ErrMalformed)
			return
		}
		if p.StoreID == "" || p.Cursor < 0 {
			t.Fatalf("accepted an invalid progress %+v", p)
		}
		checkAge(t, p.AgeMillis)
	})
}

func FuzzDecodeStreamEvents(f *testing.F) {
	a := change(12, 11, map[string]string{"k": "1"})
	b := change(13, 0, nil, "x")
	b.Namespace = "other"
	seedJSON(f,
		wire.StreamEventsResponse{StoreID: "s", Cursor: 20, Changes: []ChangeSet{a, b}},
		wire.StreamEventsResponse{StoreID: "s", Cursor: 20, Changes: []ChangeSet{}, Ended: []wire.NamespaceEndedBody{{Namespace: "gone", Code: CodeNotFound}}},
		wire.StreamEventsResponse{StoreID: "s", Cursor: 11, Changes: []ChangeSet{a}},
		wire.StreamEventsResponse{StoreID: "s", Cursor: 20, Changes: []ChangeSet{a, a}})
	f.Add([]byte(`{"store_id":"s","cursor":5,"changes":null}`))
	f.Add([]byte(`{"store_id":"s","changes":[]}`))
	f.Add([]byte(`{"store_id":"s","cursor":5,"changes":[],"age_ms":315360000001,"unconfirmed":true}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		r, err := decodeStreamEvents(data, 512)
		if err != nil {
			wantKind(t, err, ErrMalformed, ErrTooLarge)
			return
		}
		if r.StoreID == "" || r.Cursor < 0 {
			t.Fatalf("accepted %+v", r)
		}
		checkAge(t, r.AgeMillis)
		st := newStreamState([]WatchRequest{{Namespace: testNS, Since: 10}, {Namespace: "other"}, {Namespace: "gone"}})
		last := map[string]int64{}
		for i := range r.Changes {
			c := &r.Changes[i]
			if c.StoreID == "" || c.Revision <= 0 || c.PrevRevision < 0 || c.PrevRevision >= c.Revision || c.Revision > r.Cursor {
				t.Fatalf("accepted an invalid change %+v (cursor %d)", c, r.Cursor)
			}
			_, member := st.floor[c.Namespace]
			floor := max(st.floor[c.Namespace], last[c.Namespace])
			err := st.change(c)
			if ok := member && c.Revision > floor; ok != (err == nil) {
				t.Fatalf("change %+v (floor %d, member %v): %v", c, floor, member, err)
			}
			if err != nil {
				return
			}
			last[c.Namespace] = c.Revision
		}
		for _, b := range r.Ended {
			if b.Namespace == "" || b.Code == "" || b.CompactRevision < 0 {
				t.Fatalf("accepted an invalid ended %+v", b)
			}
		}
	})
}

func FuzzParseAge(f *testing.F) {
	for _, s := range []string{"", "0", "1500", " 42 ", "-1", "1.9", "1e3", "-0", "1e400", "-1e400",
		"9223372036854775808", "Inf", "NaN", "0x10", "+5", "12abc", "--1", "1e", "315360000000", "315360000001"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		ms := parseAge(s)
		checkAge(t, ms)
		if n, err := strconv.ParseInt(strings.TrimSpace(s), 10, 64); err == nil && n >= 0 && n <= maxAgeMillis && ms != n {
			t.Fatalf("parseAge(%q) = %d; want %d", s, ms, n)
		}
	})
}

// streamProgressSeeds are stream progresses as servers write them, and
// near misses that quickStreamProgress must leave to encoding/json.
var streamProgressSeeds = []string{
	`{"store_id":"3f1c2a9e5b7d4c1a","cursor":123456}`,
	`{"store_id":"s","cursor":0,"age_ms":1500,"unconfirmed":true}`,
	`{"cursor":7,"unconfirmed":false,"store_id":"s","age_ms":0}`,
	`{"store_id":"s","cursor":7,"unconfirmed":null}`,
	`{"store_id":"s","cursor":-1}`,
	`{"store_id":"s","cursor":01}`,
	`{"store_id":"s","cursor":1.0}`,
	`{"store_id":"s","cursor":9223372036854775807,"age_ms":99999999999999999999999}`,
	`{"store_id":"s","cursor":9223372036854775808}`,
	`{"store_id":"s","cursor":1,"age_ms":-9223372036854775809}`,
	`{"store_id":"s","cursor":1,"cursor":2}`,
	`{"Store_ID":"s","cursor":1}`,
	`{"store_id":"s\u0041","cursor":1}`,
	`{"store_id":"é","cursor":1}`,
	`{"store_id":"s","cursor":1,"extra":[1,2]}`,
	`{"store_id":"s", "cursor":1}`,
	`{"store_id":"s","cursor":1,}`,
	`{"store_id":"s","cursor":1}}`,
	`{"store_id":"","cursor":1}`,
	`{"store_id":"s"}`,
	`{}`,
	`null`,
}

// FuzzQuickStreamProgress: what quickStreamProgress takes, encoding/json
// reads alike; what it leaves, decodeStreamProgress still decides as
// encoding/json does.
func FuzzQuickStreamProgress(f *testing.F) {
	for _, s := range streamProgressSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		want, wantErr := decodeStreamProgressJSON(data)
		got, err := decodeStreamProgress(data)
		if (err == nil) != (wantErr == nil) {
			t.Fatalf("%q: err %v, encoding/json's %v", data, err, wantErr)
		}
		if err == nil && *got != *want {
			t.Fatalf("%q: %+v, encoding/json's %+v", data, *got, *want)
		}
		if quick, ok := quickStreamProgress(data); ok {
			if wantErr != nil || *quick != *want {
				t.Fatalf("%q: quick %+v, encoding/json's %+v, %v", data, *quick, want, wantErr)
			}
			checkAge(t, quick.AgeMillis)
		}
	})
}

// The plain form takes the quick path: no encoding/json, one allocation
// (the store id) beside the result.
func TestQuickStreamProgressTakesThePlainForm(t *testing.T) {
	for _, s := range streamProgressSeeds[:4] {
		if _, ok := quickStreamProgress([]byte(s)); !ok {
			t.Errorf("%s: left to encoding/json", s)
		}
	}
	data := []byte(streamProgressSeeds[1])
	if n := testing.AllocsPerRun(100, func() { _, _ = decodeStreamProgress(data) }); n > 2 {
		t.Errorf("%v allocations a progress", n)
	}
}

// BenchmarkDecodeStreamProgress: a relay's progress (one per client per
// change), by encoding/json and by the quick path, in one run.
func BenchmarkDecodeStreamProgress(b *testing.B) {
	data := []byte(`{"store_id":"3f1c2a9e5b7d4c1a","cursor":123456,"age_ms":12}`)
	for name, decode := range map[string]func([]byte) (*StreamProgress, error){"json": decodeStreamProgressJSON, "quick": decodeStreamProgress} {
		b.Run(name, func(b *testing.B) {
			b.ReportAllocs()
			for range b.N {
				if _, err := decode(data); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// changeSetSeeds are change sets as servers write them, and near misses
// that quickChangeSet must leave to encoding/json.
func changeSetSeeds(t testing.TB) [][]byte {
	at := time.Date(2026, 12, 2, 1, 2, 3, 456789000, time.UTC)
	var out [][]byte
	for _, cs := range []ChangeSet{
		{Namespace: "payments.prod", Revision: 12, PrevRevision: 11, StoreID: "3f1c", CommittedAt: at,
			Puts:    map[string]json.RawMessage{"a": json.RawMessage(`1`), "b": json.RawMessage(`{"x":[1,"y\"<z>",{"q":null}],"t":true}`), "c": json.RawMessage(`"s\u00e9"`)},
			Deletes: []string{"d", "e"}},
		{Namespace: "a", Revision: 1, StoreID: "s"},
		{Namespace: "a", Revision: 3, PrevRevision: 2, StoreID: "s", Puts: map[string]json.RawMessage{}, Deletes: []string{}},
		{Namespace: "a", Revision: 3, PrevRevision: 2, StoreID: "s", Puts: map[string]json.RawMessage{"k<&>": json.RawMessage(`[]`), "é": json.RawMessage(`-0.5e3`)}},
	} {
		b, err := json.Marshal(cs)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, b)
	}
	for _, s := range []string{
		`{"ns":"a","revision":2,"prev_revision":1,"store_id":"s","puts":{"k":1,"k":2}}`,
		`{"ns":"a","revision":2,"prev_revision":1,"store_id":"s","puts":{"k": 1}}`,
		`{"ns":"a","revision":2,"prev_revision":1,"store_id":"s","puts":{"k":01}}`,
		`{"ns":"a","revision":2,"prev_revision":1,"store_id":"s","puts":{"k":[1,}}`,
		`{"ns":"a","revision":2,"prev_revision":1,"store_id":"s","puts":{"k":"\x"}}`,
		`{"ns":"a","revision":2,"prev_revision":1,"store_id":"s","puts":null,"deletes":null}`,
		`{"ns":"a","revision":2,"prev_revision":1,"store_id":"s","deletes":["x",1]}`,
		`{"ns":"a","revision":2,"prev_revision":2,"store_id":"s"}`,
		`{"ns":"a","revision":2,"prev_revision":1,"store_id":"s","committed_at":"yesterday"}`,
		`{"ns":"a","revision":2,"prev_revision":1,"store_id":"s","rollout":{"id":"r"}}`,
		`{"NS":"a","revision":2,"prev_revision":1,"store_id":"s"}`,
		`{"ns":"a","revision":2,"revision":3,"prev_revision":1,"store_id":"s"}`,
		`{"ns":"a","revision":2.0,"prev_revision":1,"store_id":"s"}`,
		// Valid alone, but 10,001 levels deep in the change set: past
		// encoding/json's limit.
		`{"ns":"a","revision":2,"prev_revision":1,"store_id":"s","puts":{"k":` + strings.Repeat("[", 9999) + strings.Repeat("]", 9999) + `}}`,
		`{"ns":"a","revision":2,"prev_revision":1,"store_id":"s","puts":{"k":` + strings.Repeat(`{"a":`, 9999) + "1" + strings.Repeat("}", 9999) + `}}`,
	} {
		out = append(out, []byte(s))
	}
	return out
}

// FuzzQuickChangeSet: what quickChangeSet takes, encoding/json reads
// alike; what it leaves, decodeAnyChangeSet still decides as encoding/json
// does.
func FuzzQuickChangeSet(f *testing.F) {
	for _, s := range changeSetSeeds(f) {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		want, wantErr := decodeAnyChangeSetJSON(data)
		got, err := decodeAnyChangeSet(data)
		if (err == nil) != (wantErr == nil) {
			t.Fatalf("%q: err %v, encoding/json's %v", data, err, wantErr)
		}
		if err == nil && !reflect.DeepEqual(got, want) {
			t.Fatalf("%q:\n%+v\nencoding/json's\n%+v", data, got, want)
		}
		if quick, ok := quickChangeSet(data); ok && (wantErr != nil || !reflect.DeepEqual(quick, want)) {
			t.Fatalf("%q: quick %+v, encoding/json's %+v, %v", data, quick, want, wantErr)
		}
	})
}

// A put's value nested as deep as encoding/json takes, the change set's
// object and puts counted, takes the quick path; one level deeper, the
// quick path refuses it as encoding/json does (jsonscan.SkipValue's limit
// is encoding/json's, counted from the change set).
func TestQuickChangeSetNestingLimit(t *testing.T) {
	for _, tc := range []struct {
		levels int
		ok     bool
	}{{jsonscan.MaxDepth - 2, true}, {jsonscan.MaxDepth - 1, false}} {
		v := strings.Repeat("[", tc.levels) + strings.Repeat("]", tc.levels)
		data := []byte(`{"ns":"a","revision":2,"prev_revision":1,"store_id":"s","committed_at":"2026-12-02T01:02:03Z","puts":{"k":` + v + `}}`)
		_, wantErr := decodeAnyChangeSetJSON(data)
		_, ok := quickChangeSet(data)
		if ok != tc.ok || (wantErr == nil) != tc.ok {
			t.Errorf("a value of %d levels: quick %v, encoding/json's error %v; want both to take it: %v", tc.levels, ok, wantErr, tc.ok)
		}
	}
}

// A change set as servers write it takes the quick path, and an append
// to one of its values does not write into its Raw.
func TestQuickChangeSetTakesThePlainForm(t *testing.T) {
	seeds := changeSetSeeds(t)
	for _, s := range seeds[:3] {
		if _, ok := quickChangeSet(s); !ok {
			t.Errorf("%s: left to encoding/json", s)
		}
	}
	cs, ok := quickChangeSet(seeds[0])
	if !ok {
		t.Fatal("not quick")
	}
	raw := string(cs.Raw)
	_ = append(cs.Puts["a"], "garbage"...)
	if string(cs.Raw) != raw {
		t.Errorf("an append to a value wrote into Raw: %s", cs.Raw)
	}
}

// BenchmarkDecodeChangeSet: a one-key change (every client reads one per
// publish), by encoding/json and by the quick path, in one run.
func BenchmarkDecodeChangeSet(b *testing.B) {
	data := []byte(`{"ns":"bench","revision":123456,"prev_revision":123455,"store_id":"3f1c2a9e5b7d4c1a","committed_at":"2026-12-02T01:02:03.456789Z","puts":{"k":"12:1733100000000000000"}}`)
	for name, decode := range map[string]func([]byte) (*ChangeSet, error){"json": decodeAnyChangeSetJSON, "quick": decodeAnyChangeSet} {
		b.Run(name, func(b *testing.B) {
			b.ReportAllocs()
			for range b.N {
				if _, err := decode(data); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
