package transport

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/holdfast-dev/holdfast/internal/version"
	"github.com/holdfast-dev/holdfast/internal/wire"
)

// Helpers shared by the HTTP source's tests.

const testNS = "payments.prod"

// leakCheck verifies, after every other cleanup of the test (servers,
// sources) has run, that the test left no goroutine behind.
func leakCheck(t *testing.T) {
	t.Helper()
	ignore := goleak.IgnoreCurrent()
	t.Cleanup(func() { goleak.VerifyNone(t, ignore) })
}

// newServer starts a loopback server; handlers blocked on r.Context() end
// when the client goes away or the server closes.
func newServer(t *testing.T, h http.HandlerFunc) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return srv
}

func newSource(t *testing.T, url string, opts ...HTTPOption) *HTTPSource {
	t.Helper()
	s, err := NewHTTPSource(url, opts...)
	if err != nil {
		t.Fatalf("NewHTTPSource: %v", err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

func writeJSON(t *testing.T, w http.ResponseWriter, status int, v any) {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Errorf("marshal: %v", err)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(b)
}

func gzipBytes(t *testing.T, b []byte) []byte {
	t.Helper()
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	if _, err := zw.Write(b); err != nil {
		t.Fatal(err)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func testSnapshot() Snapshot {
	return Snapshot{
		Namespace: testNS, StoreID: "store-1", Revision: 41, Cursor: 45, CompactRevision: 3,
		Values: json.RawMessage(`{"retry-timeout-ms":50,"name":"x"}`),
	}
}

// valuesOf decodes a snapshot's values into a map, as only a test would.
func valuesOf(t testing.TB, snap *Snapshot) map[string]json.RawMessage {
	t.Helper()
	var m map[string]json.RawMessage
	if err := json.Unmarshal(snap.Values, &m); err != nil {
		t.Fatalf("values %.64q: %v", snap.Values, err)
	}
	return m
}

func TestNewHTTPSourceValidates(t *testing.T) {
	leakCheck(t)
	bad := []struct {
		url  string
		opts []HTTPOption
	}{
		{url: "ftp://host"},
		{url: "http://"},
		{url: "://x"},
		{url: "host:80"},
		{url: "http://host/?a=b"},
		{url: "http://host/#frag"},
		{url: "http://host", opts: []HTTPOption{WithHTTPClient(nil)}},
		{url: "http://host", opts: []HTTPOption{WithMaxEventBytes(0)}},
		{url: "http://host", opts: []HTTPOption{WithMaxSnapshotBytes(-1)}},
		{url: "http://host", opts: []HTTPOption{WithMaxSnapshotKeys(0)}},
		{url: "http://host", opts: []HTTPOption{WithIdleTimeout(0)}},
		{url: "http://host", opts: []HTTPOption{WithLongPollWait(-time.Second)}},
		{url: "http://host", opts: []HTTPOption{WithWatchMode(WatchMode(9))}},
		{url: "http://host", opts: []HTTPOption{WithBearerToken("a\r\nX-Evil: 1")}},
		{url: "http://host", opts: []HTTPOption{WithClientID("a\r\nX-Evil: 1")}},
	}
	for _, c := range bad {
		s, err := NewHTTPSource(c.url, c.opts...)
		if err == nil {
			s.Close()
			t.Errorf("NewHTTPSource(%q) succeeded, want error", c.url)
			continue
		}
		if !strings.HasPrefix(err.Error(), "transport: ") {
			t.Errorf("NewHTTPSource(%q) error %q lacks the transport: prefix", c.url, err)
		}
	}
	s, err := NewHTTPSource("https://cfg.example.com/plane/", WithLogger(nil))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if got, want := s.endpoint(PathSnapshot, nil), "https://cfg.example.com/plane/sdk/snapshot"; got != want {
		t.Errorf("endpoint = %q, want %q", got, want)
	}
	if s.WatchMode() != WatchSSE {
		t.Errorf("default WatchMode = %v, want sse", s.WatchMode())
	}
	if err := s.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
}

func TestSnapshotOK(t *testing.T) {
	leakCheck(t)
	var gotReq *http.Request
	srv := newServer(t, func(w http.ResponseWriter, r *http.Request) {
		gotReq = r.Clone(context.Background())
		writeJSON(t, w, http.StatusOK, testSnapshot())
	})
	s := newSource(t, srv.URL, WithBearerToken("tok-1"), WithUserAgent("ua/1"), WithClientID("client-1"))
	snap, err := s.Snapshot(context.Background(), SnapshotRequest{Namespace: testNS})
	if err != nil {
		t.Fatalf("Snapshot: %v", err)
	}
	want := testSnapshot()
	if snap.Namespace != want.Namespace || snap.StoreID != want.StoreID || snap.Revision != 41 ||
		snap.Cursor != 45 || snap.CompactRevision != 3 || len(valuesOf(t, snap)) != 2 ||
		string(valuesOf(t, snap)["retry-timeout-ms"]) != "50" {
		t.Errorf("Snapshot = %+v, want %+v", snap, want)
	}
	if gotReq.URL.Path != PathSnapshot || gotReq.URL.Query().Get("ns") != testNS {
		t.Errorf("request %s, want %s?ns=%s", gotReq.URL, PathSnapshot, testNS)
	}
	if h := gotReq.Header.Get("Authorization"); h != "Bearer tok-1" {
		t.Errorf("Authorization = %q", h)
	}
	if h := gotReq.Header.Get("User-Agent"); h != "ua/1" {
		t.Errorf("User-Agent = %q", h)
	}
	if h := gotReq.Header.Get(HeaderClientID); h != "client-1" {
		t.Errorf("%s = %q", HeaderClientID, h)
	}
	if h := gotReq.Header.Get("Accept-Encoding"); h != "gzip" {
		t.Errorf("Accept-Encoding = %q", h)
	}
	if h := gotReq.Header.Get("If-None-Match"); h != "" {
		t.Errorf("unconditional request sent If-None-Match %q", h)
	}
}

func TestSnapshotEmptyValuesNotNil(t *testing.T) {
	leakCheck(t)
	srv := newServer(t, func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, `{"ns":"payments.prod","store_id":"s","revision":0,"cursor":0,"future_field":[1,2]}`)
	})
	s := newSource(t, srv.URL)
	snap, err := s.Snapshot(context.Background(), SnapshotRequest{Namespace: testNS})
	if err != nil {
		t.Fatalf("Snapshot: %v", err)
	}
	if string(snap.Values) != "{}" {
		t.Errorf("Values = %q, want {}", snap.Values)
	}
}

func TestSnapshotNotModified(t *testing.T) {
	leakCheck(t)
	var inm string
	srv := newServer(t, func(w http.ResponseWriter, r *http.Request) {
		inm = r.Header.Get("If-None-Match")
		w.Header().Set(HeaderStoreID, "store-1")
		w.Header().Set(HeaderRevision, "41")
		w.Header().Set(HeaderCursor, "97")
		w.WriteHeader(http.StatusNotModified)
	})
	s := newSource(t, srv.URL)
	snap, err := s.Snapshot(context.Background(), SnapshotRequest{Namespace: testNS, KnownStoreID: "store-1", KnownRevision: 41})
	if !errors.Is(err, ErrNotModified) {
		t.Fatalf("Snapshot error = %v, want ErrNotModified", err)
	}
	if inm != wire.ETag("store-1", 41) {
		t.Errorf("If-None-Match = %q, want %q", inm, wire.ETag("store-1", 41))
	}
	if snap == nil || snap.Values != nil || snap.StoreID != "store-1" || snap.Revision != 41 || snap.Cursor != 97 || snap.Namespace != testNS {
		t.Errorf("Snapshot = %+v, want store-1/41/97 with nil Values", snap)
	}
}

func TestSnapshotGzip(t *testing.T) {
	leakCheck(t)
	body, _ := json.Marshal(testSnapshot())
	zipped := gzipBytes(t, body)
	srv := newServer(t, func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Accept-Encoding") != "gzip" {
			t.Errorf("Accept-Encoding = %q", r.Header.Get("Accept-Encoding"))
		}
		w.Header().Set("Content-Encoding", "gzip")
		_, _ = w.Write(zipped)
	})
	s := newSource(t, srv.URL)
	snap, err := s.Snapshot(context.Background(), SnapshotRequest{Namespace: testNS})
	if err != nil {
		t.Fatalf("Snapshot: %v", err)
	}
	if snap.Revision != 41 || len(valuesOf(t, snap)) != 2 {
		t.Errorf("Snapshot = %+v", snap)
	}
}

func TestSnapshotErrors(t *testing.T) {
	leakCheck(t)
	cases := []struct {
		name   string
		status int
		header map[string]string
		body   string
		check  func(t *testing.T, err error)
	}{
		{"404", 404, map[string]string{HeaderStoreID: "store-1"}, `{"error":"not_found","message":"no such namespace"}`, func(t *testing.T, err error) {
			var se *StatusError
			if !errors.Is(err, ErrNotFound) || !errors.As(err, &se) || se.Code != CodeNotFound || se.Message != "no such namespace" {
				t.Errorf("err = %#v, want ErrNotFound with code and message", err)
			}
		}},
		{"410", 410, nil, `{"error":"compacted","compact_revision":812}`, func(t *testing.T, err error) {
			var ce *CompactedError
			if !errors.Is(err, ErrCompacted) || !errors.As(err, &ce) || ce.CompactRevision != 812 {
				t.Errorf("err = %v, want *CompactedError{812}", err)
			}
		}},
		{"401", 401, nil, `{"error":"unauthorized"}`, func(t *testing.T, err error) {
			if !errors.Is(err, ErrUnauthorized) {
				t.Errorf("err = %v, want ErrUnauthorized", err)
			}
		}},
		{"403", 403, nil, `not json at all`, func(t *testing.T, err error) {
			var se *StatusError
			if !errors.Is(err, ErrUnauthorized) || !errors.As(err, &se) || se.StatusCode != 403 || se.Code != "" {
				t.Errorf("err = %v, want 403 ErrUnauthorized without code", err)
			}
		}},
		{"413", 413, nil, `{"error":"too_large"}`, func(t *testing.T, err error) {
			if !errors.Is(err, ErrTooLarge) {
				t.Errorf("err = %v, want ErrTooLarge", err)
			}
		}},
		{"503 seconds", 503, map[string]string{"Retry-After": "7"}, `{"error":"unavailable"}`, func(t *testing.T, err error) {
			var se *StatusError
			if !errors.As(err, &se) || se.StatusCode != 503 || se.RetryAfter != 7*time.Second || se.Code != CodeUnavailable || se.Err != nil {
				t.Errorf("err = %#v, want 503 with RetryAfter 7s", err)
			}
			if !Retryable(err) {
				t.Errorf("503 not retryable")
			}
		}},
		{"503 date", 503, map[string]string{"Retry-After": time.Now().Add(90 * time.Second).UTC().Format(http.TimeFormat)}, ``, func(t *testing.T, err error) {
			var se *StatusError
			if !errors.As(err, &se) || se.RetryAfter < 80*time.Second || se.RetryAfter > 91*time.Second {
				t.Errorf("err = %#v, want RetryAfter about 90s", err)
			}
		}},
		{"huge error body", 500, nil, `{"error":"internal","message":"` + strings.Repeat("x", 1<<20) + `"}`, func(t *testing.T, err error) {
			var se *StatusError
			if !errors.As(err, &se) || se.StatusCode != 500 || se.Code != "" {
				t.Errorf("err = %v, want 500 without a decoded (oversized) body", err)
			}
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			srv := newServer(t, func(w http.ResponseWriter, r *http.Request) {
				for k, v := range c.header {
					w.Header().Set(k, v)
				}
				w.WriteHeader(c.status)
				_, _ = io.WriteString(w, c.body)
			})
			s := newSource(t, srv.URL)
			snap, err := s.Snapshot(context.Background(), SnapshotRequest{Namespace: testNS})
			if err == nil || snap != nil {
				t.Fatalf("Snapshot = %v, %v; want an error", snap, err)
			}
			c.check(t, err)
		})
	}
}

func TestSnapshotMalformed(t *testing.T) {
	leakCheck(t)
	bodies := map[string]string{
		"not json":          `{"ns":`,
		"trailing garbage":  `{"ns":"payments.prod","store_id":"s","revision":1,"cursor":1} x`,
		"ns mismatch":       `{"ns":"other","store_id":"s","revision":1,"cursor":1,"values":{}}`,
		"no store id":       `{"ns":"payments.prod","revision":1,"cursor":1,"values":{}}`,
		"no cursor":         `{"ns":"payments.prod","store_id":"s","revision":1,"values":{}}`,
		"cursor < revision": `{"ns":"payments.prod","store_id":"s","revision":5,"cursor":4,"values":{}}`,
		"negative revision": `{"ns":"payments.prod","store_id":"s","revision":-1,"cursor":4,"values":{}}`,
		"values not object": `{"ns":"payments.prod","store_id":"s","revision":1,"cursor":1,"values":[1]}`,
	}
	for name, body := range bodies {
		t.Run(name, func(t *testing.T) {
			srv := newServer(t, func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set(HeaderStoreID, "s") // from a holdfast server
				_, _ = io.WriteString(w, body)
			})
			s := newSource(t, srv.URL)
			_, err := s.Snapshot(context.Background(), SnapshotRequest{Namespace: testNS})
			if !errors.Is(err, ErrMalformed) {
				t.Errorf("err = %v, want ErrMalformed", err)
			}
		})
	}
}

func TestSnapshotTooLarge(t *testing.T) {
	leakCheck(t)
	const limit = 64 << 10
	big := `{"ns":"payments.prod","store_id":"s","revision":1,"cursor":1,"values":{"k":"` + strings.Repeat("a", 2*limit) + `"}}`
	zeros := make([]byte, 4<<20) // a gzip bomb: 4 MiB of zeros is ~4 KiB compressed
	bomb := gzipBytes(t, zeros)
	if len(bomb) > limit {
		t.Fatalf("bomb is %d bytes compressed, want < %d", len(bomb), limit)
	}
	cases := map[string]http.HandlerFunc{
		"content-length": func(w http.ResponseWriter, r *http.Request) { _, _ = io.WriteString(w, big) },
		"chunked": func(w http.ResponseWriter, r *http.Request) {
			for i := 0; i < len(big); i += 1000 {
				_, _ = io.WriteString(w, big[i:min(i+1000, len(big))])
				w.(http.Flusher).Flush()
			}
		},
		"gzip bomb": func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Encoding", "gzip")
			_, _ = w.Write(bomb)
		},
	}
	for name, h := range cases {
		t.Run(name, func(t *testing.T) {
			srv := newServer(t, h)
			s := newSource(t, srv.URL, WithMaxSnapshotBytes(limit))
			_, err := s.Snapshot(context.Background(), SnapshotRequest{Namespace: testNS})
			if !errors.Is(err, ErrTooLarge) {
				t.Errorf("err = %v, want ErrTooLarge", err)
			}
		})
	}
}

func TestSnapshotBadGzip(t *testing.T) {
	leakCheck(t)
	srv := newServer(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Encoding", "gzip")
		_, _ = io.WriteString(w, "this is not gzip")
	})
	s := newSource(t, srv.URL)
	if _, err := s.Snapshot(context.Background(), SnapshotRequest{Namespace: testNS}); !errors.Is(err, ErrMalformed) {
		t.Errorf("err = %v, want ErrMalformed", err)
	}
}

func TestSnapshotBlackHole(t *testing.T) {
	leakCheck(t)
	srv := newServer(t, func(w http.ResponseWriter, r *http.Request) { <-r.Context().Done() })
	const idle = 200 * time.Millisecond
	s := newSource(t, srv.URL, WithIdleTimeout(idle))
	start := time.Now()
	_, err := s.Snapshot(context.Background(), SnapshotRequest{Namespace: testNS})
	if !errors.Is(err, ErrStreamIdle) {
		t.Fatalf("err = %v, want ErrStreamIdle", err)
	}
	if d := time.Since(start); d < idle || d > 10*idle {
		t.Errorf("gave up after %v, want about %v", d, idle)
	}
}

func TestSnapshotContextCanceled(t *testing.T) {
	leakCheck(t)
	srv := newServer(t, func(w http.ResponseWriter, r *http.Request) { <-r.Context().Done() })
	s := newSource(t, srv.URL)
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if _, err := s.Snapshot(ctx, SnapshotRequest{Namespace: testNS}); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("err = %v, want context.DeadlineExceeded", err)
	}
}

func TestSnapshotInvalidNamespace(t *testing.T) {
	leakCheck(t)
	s := newSource(t, "http://127.0.0.1:1")
	if _, err := s.Snapshot(context.Background(), SnapshotRequest{Namespace: "../etc"}); !errors.Is(err, ErrInvalidNamespace) {
		t.Errorf("err = %v, want ErrInvalidNamespace", err)
	}
}

func TestBearerTokenNotSentToOtherHost(t *testing.T) {
	leakCheck(t)
	other := newServer(t, func(w http.ResponseWriter, r *http.Request) {
		if h := r.Header.Get("Authorization"); h != "" {
			t.Errorf("redirect target got Authorization %q", h)
		}
		if h := r.Header.Get(HeaderClientID); h != "" {
			t.Errorf("redirect target got the client id %q", h)
		}
		writeJSON(t, w, http.StatusOK, testSnapshot())
	})
	srv := newServer(t, func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer secret" {
			t.Errorf("origin got Authorization %q", r.Header.Get("Authorization"))
		}
		http.Redirect(w, r, other.URL+r.URL.RequestURI(), http.StatusFound)
	})
	// Same IP, other port: a different host as far as the token goes.
	s := newSource(t, srv.URL, WithBearerToken("secret"), WithClientID("client-1"))
	if _, err := s.Snapshot(context.Background(), SnapshotRequest{Namespace: testNS}); err != nil {
		t.Fatalf("Snapshot: %v", err)
	}
}

func TestAck(t *testing.T) {
	leakCheck(t)
	var got Ack
	var calls int
	srv := newServer(t, func(w http.ResponseWriter, r *http.Request) {
		calls++
		if r.Method != http.MethodPost || r.URL.Path != PathAck || r.Header.Get("Content-Type") != "application/json" {
			t.Errorf("request %s %s (%s)", r.Method, r.URL.Path, r.Header.Get("Content-Type"))
		}
		if r.Header.Get("Authorization") != "Bearer t" {
			t.Errorf("Authorization = %q", r.Header.Get("Authorization"))
		}
		if err := json.NewDecoder(r.Body).Decode(&got); err != nil {
			t.Errorf("decode ack: %v", err)
		}
		if got.Status == AckRejected {
			writeJSON(t, w, http.StatusForbidden, ErrorBody{Error: CodeForbidden})
			return
		}
		w.WriteHeader(http.StatusNoContent)
	})
	s := newSource(t, srv.URL, WithBearerToken("t"))
	ack := Ack{ClientID: "c-1", Namespace: testNS, Revision: 9, Status: AckApplied}
	if err := s.Ack(context.Background(), ack); err != nil {
		t.Fatalf("Ack: %v", err)
	}
	if got != ack {
		t.Errorf("server got %+v, want %+v", got, ack)
	}
	err := s.Ack(context.Background(), Ack{ClientID: "c-1", Namespace: testNS, Revision: 10, Status: AckRejected, Error: "schema"})
	if !errors.Is(err, ErrUnauthorized) {
		t.Errorf("nack err = %v, want ErrUnauthorized", err)
	}
	if err := s.Ack(context.Background(), Ack{Namespace: testNS, Status: "maybe"}); err == nil {
		t.Error("Ack with a bad status succeeded")
	}
	if calls != 2 {
		t.Errorf("server saw %d acks, want 2", calls)
	}
}

func TestParseRetryAfter(t *testing.T) {
	now := time.Date(2026, 11, 29, 8, 0, 0, 0, time.UTC)
	cases := map[string]time.Duration{
		"":                     0,
		"0":                    0,
		"-5":                   0,
		"12":                   12 * time.Second,
		" 3 ":                  3 * time.Second,
		"1e9":                  0,
		"99999999999999999999": 0,
		"999999999":            24 * time.Hour,
		now.Add(30 * time.Second).Format(http.TimeFormat): 30 * time.Second,
		now.Add(-time.Hour).Format(http.TimeFormat):       0,
		"soon": 0,
	}
	for in, want := range cases {
		if got := parseRetryAfter(in, now); got != want {
			t.Errorf("parseRetryAfter(%q) = %v, want %v", in, got, want)
		}
	}
}

func ExampleHTTPSource_Snapshot() {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, `{"ns":"payments.prod","store_id":"s1","revision":7,"cursor":9,"values":{"retry-timeout-ms":50}}`)
	}))
	defer srv.Close()
	src, err := NewHTTPSource(srv.URL)
	if err != nil {
		panic(err)
	}
	defer src.Close()
	snap, err := src.Snapshot(context.Background(), SnapshotRequest{Namespace: "payments.prod"})
	if err != nil {
		panic(err)
	}
	fmt.Println(snap.Revision, snap.Cursor, string(snap.Values))
	// Output: 7 9 {"retry-timeout-ms":50}
}

func TestSnapshotUnaskedNotModified(t *testing.T) {
	leakCheck(t)
	srv := newServer(t, func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusNotModified) })
	s := newSource(t, srv.URL)
	if _, err := s.Snapshot(context.Background(), SnapshotRequest{Namespace: testNS}); !errors.Is(err, ErrMalformed) || errors.Is(err, ErrNotModified) {
		t.Errorf("err = %v, want ErrMalformed for a 304 nobody asked for", err)
	}
}

// TestDefaultUserAgent: without WithUserAgent a source sends
// holdfast-go/VERSION, the SDK's version.
func TestDefaultUserAgent(t *testing.T) {
	leakCheck(t)
	var ua string
	srv := newServer(t, func(w http.ResponseWriter, r *http.Request) {
		ua = r.Header.Get("User-Agent")
		writeJSON(t, w, http.StatusOK, testSnapshot())
	})
	s := newSource(t, srv.URL)
	if _, err := s.Snapshot(context.Background(), SnapshotRequest{Namespace: testNS}); err != nil {
		t.Fatalf("Snapshot: %v", err)
	}
	if want := "holdfast-go/" + version.SDK; ua != want || DefaultUserAgent != want {
		t.Errorf("User-Agent = %q (DefaultUserAgent %q), want %q", ua, DefaultUserAgent, want)
	}
}

// TestDefaultClientID: a source without WithClientID sends the default
// it is given (package config's client id, for a source of WithSource),
// every endpoint of a failover source alike; one with its own keeps it.
func TestDefaultClientID(t *testing.T) {
	leakCheck(t)
	ids := make(chan string, 4)
	srv := newServer(t, func(w http.ResponseWriter, r *http.Request) {
		ids <- r.Header.Get(HeaderClientID)
		writeJSON(t, w, http.StatusOK, testSnapshot())
	})
	own := newSource(t, srv.URL, WithClientID("own-1"))
	own.DefaultClientID("default-1")
	plain := newSource(t, srv.URL+"/")
	f, err := NewFailoverSource([]*HTTPSource{plain, newSource(t, srv.URL+"/b")})
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	f.DefaultClientID("default-1")
	plain.DefaultClientID("not a valid id\n") // ignored
	for _, tc := range []struct {
		src  Source
		want string
	}{{own, "own-1"}, {f, "default-1"}} {
		if _, err := tc.src.Snapshot(context.Background(), SnapshotRequest{Namespace: testNS}); err != nil {
			t.Fatal(err)
		}
		if got := <-ids; got != tc.want {
			t.Errorf("%s = %q, want %q", HeaderClientID, got, tc.want)
		}
	}
}
