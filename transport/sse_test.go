package transport

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"testing/iotest"
	"time"
)

// sseConn writes SSE frames by hand, as the reference server does.
type sseConn struct {
	t *testing.T
	w http.ResponseWriter
}

func openSSE(t *testing.T, w http.ResponseWriter) *sseConn {
	t.Helper()
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	w.WriteHeader(http.StatusOK)
	w.(http.Flusher).Flush()
	return &sseConn{t: t, w: w}
}

// send writes one event; v is marshalled unless it is a string.
func (c *sseConn) send(typ string, id int64, v any) {
	data, ok := v.(string)
	if !ok {
		b, err := json.Marshal(v)
		if err != nil {
			c.t.Errorf("marshal: %v", err)
			return
		}
		data = string(b)
	}
	var sb strings.Builder
	fmt.Fprintf(&sb, "event: %s\nid: %d\n", typ, id)
	for _, line := range strings.Split(data, "\n") {
		fmt.Fprintf(&sb, "data: %s\n", line)
	}
	sb.WriteString("\n")
	c.raw(sb.String())
}

func (c *sseConn) raw(s string) {
	_, _ = io.WriteString(c.w, s)
	c.w.(http.Flusher).Flush()
}

func change(rev, prev int64, puts map[string]string, deletes ...string) ChangeSet {
	cs := ChangeSet{Namespace: testNS, Revision: rev, PrevRevision: prev, StoreID: "store-1",
		CommittedAt: time.Date(2026, 11, 29, 8, 0, 0, 123e6, time.UTC), Deletes: deletes}
	if puts != nil {
		cs.Puts = map[string]json.RawMessage{}
		for k, v := range puts {
			cs.Puts[k] = json.RawMessage(v)
		}
	}
	return cs
}

func progress(rev, cursor int64) Progress {
	return Progress{Namespace: testNS, StoreID: "store-1", Revision: rev, Cursor: cursor}
}

var errEnough = errors.New("test: enough events")

// collect returns a handle that records events and stops after n of them.
func collect(n int, into *[]Event) func(Event) error {
	return func(e Event) error {
		*into = append(*into, e)
		if len(*into) >= n {
			return errEnough
		}
		return nil
	}
}

func TestWatchSSEDeliversInOrder(t *testing.T) {
	leakCheck(t)
	var gotReq *http.Request
	srv := newServer(t, func(w http.ResponseWriter, r *http.Request) {
		gotReq = r.Clone(context.Background())
		c := openSSE(t, w)
		c.raw(": heartbeat before any id\n\n")
		c.send(EventChange, 11, change(11, 10, map[string]string{"a": "1"}))
		c.raw(": a comment frame\n\n")
		c.raw("retry: 3000\n\n")
		c.send(EventProgress, 15, progress(11, 15))
		c.raw("id: 16\n\n") // an id-only frame: no data
		c.send(EventChange, 17, change(17, 11, nil, "a"))
		// A pretty-printed change spans several data lines.
		b, _ := json.MarshalIndent(change(18, 17, map[string]string{"b": `{"x": [1, 2]}`}), "", "  ")
		c.send(EventChange, 18, string(b))
		<-r.Context().Done()
	})
	s := newSource(t, srv.URL, WithBearerToken("tok"))
	var got []Event
	err := s.Watch(context.Background(), WatchRequest{Namespace: testNS, Since: 10}, collect(4, &got))
	if err != errEnough {
		t.Fatalf("Watch = %v, want the handler's error as is", err)
	}
	if gotReq.URL.Path != PathWatch || gotReq.URL.Query().Get("ns") != testNS || gotReq.URL.Query().Get("since") != "10" {
		t.Errorf("request %s", gotReq.URL)
	}
	if gotReq.Header.Get("Authorization") != "Bearer tok" || gotReq.Header.Get("Accept") != "text/event-stream" {
		t.Errorf("headers %v", gotReq.Header)
	}
	if len(got) != 4 {
		t.Fatalf("got %d events, want 4", len(got))
	}
	if c := got[0].Change; c == nil || c.Revision != 11 || c.PrevRevision != 10 || string(c.Puts["a"]) != "1" ||
		!c.CommittedAt.Equal(time.Date(2026, 11, 29, 8, 0, 0, 123e6, time.UTC)) || got[0].Progress != nil {
		t.Errorf("event 0 = %+v", got[0])
	}
	if p := got[1].Progress; p == nil || p.Cursor != 15 || p.Revision != 11 || got[1].Change != nil {
		t.Errorf("event 1 = %+v", got[1])
	}
	if c := got[2].Change; c == nil || c.Revision != 17 || len(c.Deletes) != 1 || c.Deletes[0] != "a" {
		t.Errorf("event 2 = %+v", got[2])
	}
	if c := got[3].Change; c == nil || c.Revision != 18 {
		t.Errorf("event 3 = %+v", got[3])
	} else {
		var v struct{ X []int }
		if err := json.Unmarshal(c.Puts["b"], &v); err != nil || len(v.X) != 2 {
			t.Errorf("multi-line event value %s: %v", c.Puts["b"], err)
		}
	}
}

func TestWatchSSEBadEvents(t *testing.T) {
	leakCheck(t)
	const maxEvent = 1 << 10
	cases := []struct {
		name  string
		write func(c *sseConn)
		want  error
	}{
		{"undecodable change", func(c *sseConn) { c.send(EventChange, 12, `{"ns":"payments.prod","revision":`) }, ErrMalformed},
		{"undecodable progress", func(c *sseConn) { c.send(EventProgress, 12, `[1,2]`) }, ErrMalformed},
		{"wrong namespace", func(c *sseConn) {
			cs := change(12, 11, nil)
			cs.Namespace = "other"
			c.send(EventChange, 12, cs)
		}, ErrMalformed},
		{"progress of wrong namespace", func(c *sseConn) {
			p := progress(11, 12)
			p.Namespace = "other"
			c.send(EventProgress, 12, p)
		}, ErrMalformed},
		{"broken chain fields", func(c *sseConn) { c.send(EventChange, 12, change(12, 12, nil)) }, ErrMalformed},
		{"unknown type", func(c *sseConn) { c.send("surprise", 12, progress(11, 12)) }, ErrMalformed},
		{"no type", func(c *sseConn) { c.raw("data: {}\n\n") }, ErrMalformed},
		{"event just over the limit", func(c *sseConn) {
			c.send(EventChange, 12, change(12, 11, map[string]string{"k": `"` + strings.Repeat("x", maxEvent) + `"`}))
		}, ErrTooLarge},
		{"event far over the buffer", func(c *sseConn) {
			c.send(EventChange, 12, change(12, 11, map[string]string{"k": `"` + strings.Repeat("x", 64*maxEvent) + `"`}))
		}, ErrTooLarge},
		{"endless line", func(c *sseConn) {
			c.raw("data: ")
			for i := 0; i < 64; i++ {
				c.raw(strings.Repeat("y", maxEvent))
			}
		}, ErrTooLarge},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			srv := newServer(t, func(w http.ResponseWriter, r *http.Request) {
				c := openSSE(t, w)
				c.send(EventProgress, 11, progress(11, 11))
				tc.write(c)
				c.send(EventProgress, 13, progress(11, 13))
				<-r.Context().Done()
			})
			s := newSource(t, srv.URL, WithMaxEventBytes(maxEvent))
			var got []Event
			err := s.Watch(context.Background(), WatchRequest{Namespace: testNS, Since: 10}, collect(10, &got))
			if !errors.Is(err, tc.want) {
				t.Fatalf("Watch = %v, want %v", err, tc.want)
			}
			if len(got) != 1 || got[0].Progress == nil || got[0].Progress.Cursor != 11 {
				t.Errorf("delivered %+v, want only the first progress event", got)
			}
		})
	}
}

func TestWatchSSECompacted(t *testing.T) {
	leakCheck(t)
	var calls atomic.Int32
	srv := newServer(t, func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		writeJSON(t, w, http.StatusGone, ErrorBody{Error: CodeCompacted, CompactRevision: 4000, StoreID: "store-1"})
	})
	s := newSource(t, srv.URL)
	err := s.Watch(context.Background(), WatchRequest{Namespace: testNS, Since: 10}, func(Event) error {
		t.Error("handle called")
		return nil
	})
	var ce *CompactedError
	if !errors.As(err, &ce) || ce.CompactRevision != 4000 || !errors.Is(err, ErrCompacted) {
		t.Fatalf("Watch = %v, want *CompactedError{4000}", err)
	}
	if Retryable(err) {
		t.Error("compacted is retryable")
	}
	if n := calls.Load(); n != 1 {
		t.Errorf("server saw %d requests, want exactly 1 (no reconnects inside the library)", n)
	}
}

func TestWatchSSEStatusErrors(t *testing.T) {
	leakCheck(t)
	cases := []struct {
		status int
		header string
		want   error
	}{
		{401, "", ErrUnauthorized},
		{403, "", ErrUnauthorized},
		{404, "", ErrNotFound},
		{503, "2", nil},
	}
	for _, tc := range cases {
		t.Run(fmt.Sprint(tc.status), func(t *testing.T) {
			var calls atomic.Int32
			srv := newServer(t, func(w http.ResponseWriter, r *http.Request) {
				calls.Add(1)
				w.Header().Set(HeaderStoreID, "store-1")
				if tc.header != "" {
					w.Header().Set("Retry-After", tc.header)
				}
				writeJSON(t, w, tc.status, ErrorBody{Error: "x", Message: "m"})
			})
			s := newSource(t, srv.URL)
			err := s.Watch(context.Background(), WatchRequest{Namespace: testNS}, func(Event) error { return nil })
			var se *StatusError
			if !errors.As(err, &se) || se.StatusCode != tc.status || se.Message != "m" {
				t.Fatalf("Watch = %#v, want a *StatusError %d", err, tc.status)
			}
			if tc.want != nil && !errors.Is(err, tc.want) {
				t.Errorf("Watch = %v, want %v", err, tc.want)
			}
			if tc.header == "2" && se.RetryAfter != 2*time.Second {
				t.Errorf("RetryAfter = %v", se.RetryAfter)
			}
			if n := calls.Load(); n != 1 {
				t.Errorf("server saw %d requests, want 1", n)
			}
		})
	}
}

func TestWatchSSENotAnEventStream(t *testing.T) {
	leakCheck(t)
	srv := newServer(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set(HeaderStoreID, "store-1")
		writeJSON(t, w, http.StatusOK, progress(1, 1))
	})
	s := newSource(t, srv.URL)
	err := s.Watch(context.Background(), WatchRequest{Namespace: testNS}, func(Event) error { return nil })
	if !errors.Is(err, ErrMalformed) {
		t.Fatalf("Watch = %v, want ErrMalformed", err)
	}
}

func TestWatchSSECleanClose(t *testing.T) {
	leakCheck(t)
	srv := newServer(t, func(w http.ResponseWriter, r *http.Request) {
		c := openSSE(t, w)
		c.send(EventProgress, 11, progress(11, 11))
	})
	s := newSource(t, srv.URL)
	var got []Event
	err := s.Watch(context.Background(), WatchRequest{Namespace: testNS, Since: 10}, collect(10, &got))
	if err == nil || !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Fatalf("Watch = %v, want a stream-ended error wrapping io.ErrUnexpectedEOF", err)
	}
	if len(got) != 1 {
		t.Errorf("got %d events, want 1", len(got))
	}
}

func TestWatchSSEContextCancel(t *testing.T) {
	leakCheck(t)
	srv := newServer(t, func(w http.ResponseWriter, r *http.Request) {
		c := openSSE(t, w)
		c.send(EventProgress, 11, progress(11, 11))
		<-r.Context().Done()
	})
	s := newSource(t, srv.URL, WithIdleTimeout(time.Minute))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var canceledAt time.Time
	err := s.Watch(ctx, WatchRequest{Namespace: testNS, Since: 10}, func(Event) error {
		canceledAt = time.Now()
		cancel() // the stream then stays silent: only the cancel can end Watch
		return nil
	})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("Watch = %v, want context.Canceled", err)
	}
	if d := time.Since(canceledAt); d > 2*time.Second {
		t.Errorf("Watch returned %v after cancel", d)
	}

	// A context that is already done: no request at all.
	if err := s.Watch(ctx, WatchRequest{Namespace: testNS}, func(Event) error { return nil }); !errors.Is(err, context.Canceled) {
		t.Errorf("Watch with a done ctx = %v", err)
	}
}

func TestWatchSSEIdle(t *testing.T) {
	leakCheck(t)
	const idle = 200 * time.Millisecond
	cases := map[string]http.HandlerFunc{
		"black hole": func(w http.ResponseWriter, r *http.Request) {
			<-r.Context().Done() // accepts, never sends headers
		},
		"stalled after headers": func(w http.ResponseWriter, r *http.Request) {
			openSSE(t, w)
			<-r.Context().Done()
		},
		"stalled mid-event": func(w http.ResponseWriter, r *http.Request) {
			c := openSSE(t, w)
			c.send(EventProgress, 11, progress(11, 11))
			c.raw("event: change\ndata: {\"ns\":")
			<-r.Context().Done()
		},
	}
	for name, h := range cases {
		t.Run(name, func(t *testing.T) {
			srv := newServer(t, h)
			s := newSource(t, srv.URL, WithIdleTimeout(idle))
			start := time.Now()
			err := s.Watch(context.Background(), WatchRequest{Namespace: testNS, Since: 10}, func(Event) error { return nil })
			if !errors.Is(err, ErrStreamIdle) {
				t.Fatalf("Watch = %v, want ErrStreamIdle", err)
			}
			if d := time.Since(start); d < idle || d > 10*idle {
				t.Errorf("idle detected after %v, want about %v", d, idle)
			}
		})
	}
}

// A stream that keeps sending events is alive however long it runs (the
// comments between them neither help nor hurt), and a handler slower than
// the idle timeout is not taken for a dead server.
func TestWatchSSEIdleTimerOnlyCountsServerSilence(t *testing.T) {
	leakCheck(t)
	// Generous against a loaded machine: bytes every 25 ms, idle after 1 s.
	const idle = time.Second
	srv := newServer(t, func(w http.ResponseWriter, r *http.Request) {
		c := openSSE(t, w)
		tick := time.NewTicker(idle / 40)
		defer tick.Stop()
		for i := int64(1); ; i++ {
			select {
			case <-r.Context().Done():
				return
			case <-tick.C:
			}
			if i%8 == 0 {
				c.send(EventProgress, i, progress(0, i))
			} else {
				c.raw(": keepalive\n\n")
			}
		}
	})
	s := newSource(t, srv.URL, WithIdleTimeout(idle))
	n := 0
	err := s.Watch(context.Background(), WatchRequest{Namespace: testNS}, func(e Event) error {
		n++
		if n == 1 {
			time.Sleep(idle * 3 / 2) // a slow consumer, not a silent server
		}
		if n == 4 {
			return errEnough
		}
		return nil
	})
	if err != errEnough {
		t.Fatalf("Watch = %v, want to outlive several idle timeouts", err)
	}
}

func TestWatchInvalidRequest(t *testing.T) {
	leakCheck(t)
	s := newSource(t, "http://127.0.0.1:1")
	if err := s.Watch(context.Background(), WatchRequest{Namespace: "Bad NS"}, func(Event) error { return nil }); !errors.Is(err, ErrInvalidNamespace) {
		t.Errorf("Watch = %v, want ErrInvalidNamespace", err)
	}
	if err := s.Watch(context.Background(), WatchRequest{Namespace: testNS}, nil); err == nil {
		t.Error("Watch with nil handle succeeded")
	}
}

func TestWatchConnectionRefused(t *testing.T) {
	leakCheck(t)
	srv := newServer(t, func(http.ResponseWriter, *http.Request) {})
	url := srv.URL
	srv.Close()
	s := newSource(t, url)
	err := s.Watch(context.Background(), WatchRequest{Namespace: testNS}, func(Event) error { return nil })
	if err == nil || !strings.HasPrefix(err.Error(), "transport: watch") {
		t.Fatalf("Watch = %v, want a prefixed transport error", err)
	}
}

// A connection cut in the middle of an event must not deliver half of it —
// nor a whole-looking event whose terminating blank line never came.
func TestWatchSSEPartialEventAtClose(t *testing.T) {
	leakCheck(t)
	b, _ := json.Marshal(change(12, 11, map[string]string{"a": "2"}))
	tails := map[string]string{
		"cut inside data":       "event: change\nid: 12\ndata: " + string(b[:len(b)/2]),
		"cut before blank line": "event: change\nid: 12\ndata: " + string(b) + "\n",
	}
	for name, tail := range tails {
		t.Run(name, func(t *testing.T) {
			srv := newServer(t, func(w http.ResponseWriter, r *http.Request) {
				c := openSSE(t, w)
				c.send(EventProgress, 11, progress(11, 11))
				c.raw(tail)
			})
			s := newSource(t, srv.URL)
			var got []Event
			err := s.Watch(context.Background(), WatchRequest{Namespace: testNS, Since: 10}, collect(10, &got))
			if !errors.Is(err, io.ErrUnexpectedEOF) {
				t.Fatalf("Watch = %v, want stream ended (io.ErrUnexpectedEOF)", err)
			}
			if len(got) != 1 || got[0].Progress == nil {
				t.Errorf("delivered %+v, want only the whole progress event", got)
			}
		})
	}
}

func TestSSEFrameReader(t *testing.T) {
	cases := []struct {
		in, want string
	}{
		{"", ""},
		{"data: a\n\ndata: b", "data: a\n\n"},
		{"data: a\r\n\r\ndata: b\r\n\r\npartial", "data: a\r\n\r\ndata: b\r\n\r\n"},
		{"data: a\r\rdata: b\r", "data: a\r\r"},
		{"data: a\n\r\n", "data: a\n\r\n"},
		{": c\n\nid: 1\n\n", ": c\n\nid: 1\n\n"},
		{"no terminator at all", ""},
	}
	for _, c := range cases {
		for _, oneByte := range []bool{false, true} {
			var r io.Reader = strings.NewReader(c.in)
			if oneByte {
				r = iotest.OneByteReader(r)
			}
			f := &sseFrameReader{rc: io.NopCloser(r), limit: 64}
			got, err := io.ReadAll(f)
			if err != nil || string(got) != c.want {
				t.Errorf("frames of %q (one byte %v) = %q, %v; want %q", c.in, oneByte, got, err, c.want)
			}
		}
	}
	f := &sseFrameReader{rc: io.NopCloser(strings.NewReader("data: " + strings.Repeat("x", 100) + "\n\n")), limit: 64}
	if _, err := io.ReadAll(f); !errors.Is(err, ErrTooLarge) {
		t.Errorf("oversized event: err = %v, want ErrTooLarge", err)
	}
	f = &sseFrameReader{rc: io.NopCloser(iotest.TimeoutReader(strings.NewReader("data: a\n\ndata: b\n"))), limit: 64}
	got, err := io.ReadAll(f)
	if string(got) != "data: a\n\n" || !errors.Is(err, iotest.ErrTimeout) {
		t.Errorf("read error: got %q, %v; want the whole event then the error", got, err)
	}
}

// A panic in handle reaches Watch's caller, and leaves no goroutine or
// connection of the stream behind.
func TestWatchSSEHandlePanics(t *testing.T) {
	leakCheck(t)
	srv := newServer(t, func(w http.ResponseWriter, r *http.Request) {
		c := openSSE(t, w)
		c.send(EventProgress, 11, progress(11, 11))
		c.send(EventProgress, 12, progress(11, 12))
		<-r.Context().Done()
	})
	s := newSource(t, srv.URL)
	defer func() {
		if p := recover(); p != "boom" {
			t.Errorf("recovered %v, want boom", p)
		}
	}()
	_ = s.Watch(context.Background(), WatchRequest{Namespace: testNS}, func(Event) error { panic("boom") })
	t.Error("Watch returned instead of panicking")
}
