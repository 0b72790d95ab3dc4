package transport

import (
	"context"
	"errors"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// drip calls send every interval until the client goes away.
func drip(r *http.Request, interval time.Duration, send func()) {
	tick := time.NewTicker(interval)
	defer tick.Stop()
	for {
		select {
		case <-r.Context().Done():
			return
		case <-tick.C:
			send()
		}
	}
}

// A stream that carries bytes but no events is dead: an intermediary's
// keepalive comments with the upstream gone, or an event that never ends.
// Only a whole, decoded event resets the idle clock, so the watch ends
// with ErrStreamIdle about one idle timeout after its last event.
func TestWatchSSEBytesWithoutEventsAreIdle(t *testing.T) {
	leakCheck(t)
	const idle, every = 400 * time.Millisecond, 50 * time.Millisecond
	cases := map[string]func(c *sseConn, r *http.Request){
		"keepalive comments": func(c *sseConn, r *http.Request) {
			c.send(EventProgress, 11, progress(11, 11))
			drip(r, every, func() { c.raw(": keepalive\n\n") })
		},
		"comments before any event": func(c *sseConn, r *http.Request) {
			drip(r, every, func() { c.raw(": keepalive\n\n") })
		},
		"blank lines, retry and id frames": func(c *sseConn, r *http.Request) {
			c.send(EventProgress, 11, progress(11, 11))
			var i int
			drip(r, every, func() {
				i++
				c.raw([]string{"\n", "retry: 1000\n\n", "id: 11\n\n", "event: progress\n\n"}[i%4])
			})
		},
		"an event one byte at a time": func(c *sseConn, r *http.Request) {
			c.send(EventProgress, 11, progress(11, 11))
			c.raw(`event: change` + "\n" + `data: {"ns":"payments.prod","puts":{"k":"`)
			drip(r, every, func() { c.raw("x") })
		},
	}
	for name, serve := range cases {
		t.Run(name, func(t *testing.T) {
			var sent atomic.Int64
			srv := newServer(t, func(w http.ResponseWriter, r *http.Request) {
				openSSE(t, w)
				serve(&sseConn{t: t, w: countingWriter{w, &sent}}, r)
			})
			s := newSource(t, srv.URL, WithIdleTimeout(idle))
			// Today's failure mode is a watch that never ends: bound it.
			ctx, cancel := context.WithTimeout(context.Background(), 10*idle)
			defer cancel()
			last := time.Now()
			err := s.Watch(ctx, WatchRequest{Namespace: testNS, Since: 10}, func(Event) error {
				last = time.Now()
				return nil
			})
			if !errors.Is(err, ErrStreamIdle) {
				t.Fatalf("Watch = %v, want ErrStreamIdle", err)
			}
			if d := time.Since(last); d < idle || d > 5*idle {
				t.Errorf("idle detected %v after the last event, want about %v", d, idle)
			}
			if sent.Load() == 0 {
				t.Error("the server sent nothing after its headers: not the case under test")
			}
		})
	}
}

// countingWriter counts what the test server writes after its headers.
type countingWriter struct {
	http.ResponseWriter
	n *atomic.Int64
}

func (c countingWriter) Write(p []byte) (int, error) {
	n, err := c.ResponseWriter.Write(p)
	c.n.Add(int64(n))
	return n, err
}

func (c countingWriter) Flush() { c.ResponseWriter.(http.Flusher).Flush() }

// A long-poll reply that trickles bytes forever is cut by the request's own
// bound, its wait plus the idle timeout, and reported as idle.
func TestWatchLongPollTrickleIsIdle(t *testing.T) {
	leakCheck(t)
	const wait, idle = 200 * time.Millisecond, 200 * time.Millisecond
	srv := newServer(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusOK)
		_, _ = io.WriteString(w, `{"ns":"payments.prod","store_id":"s","cursor":3,"changes":[`)
		w.(http.Flusher).Flush()
		drip(r, 20*time.Millisecond, func() {
			_, _ = io.WriteString(w, " ")
			w.(http.Flusher).Flush()
		})
	})
	s := newSource(t, srv.URL, WithWatchMode(WatchLongPoll), WithLongPollWait(wait), WithIdleTimeout(idle))
	ctx, cancel := context.WithTimeout(context.Background(), 20*(wait+idle))
	defer cancel()
	start := time.Now()
	err := s.Watch(ctx, WatchRequest{Namespace: testNS, Since: 3}, func(Event) error { return nil })
	if !errors.Is(err, ErrStreamIdle) {
		t.Fatalf("Watch = %v, want ErrStreamIdle", err)
	}
	if d := time.Since(start); d < wait+idle || d > 5*(wait+idle) {
		t.Errorf("gave up after %v, want about %v", d, wait+idle)
	}
}

// Every ErrTooLarge names the limit that was configured, not an internal
// buffer size: an operator raises the option the message points at.
func TestTooLargeNamesTheConfiguredLimit(t *testing.T) {
	leakCheck(t)
	const maxEvent, maxSnap = 1000, 50000
	big := strings.Repeat("x", 20*maxEvent)
	cases := map[string]struct {
		h    http.HandlerFunc
		mode WatchMode
		snap bool
		want int
	}{
		"event over the limit": {h: func(w http.ResponseWriter, r *http.Request) {
			c := openSSE(t, w)
			c.send(EventChange, 12, change(12, 11, map[string]string{"k": `"` + strings.Repeat("x", maxEvent) + `"`}))
			<-r.Context().Done()
		}, want: maxEvent},
		"event over the frame buffer": {h: func(w http.ResponseWriter, r *http.Request) {
			c := openSSE(t, w)
			c.raw("event: change\ndata: " + big + big)
			<-r.Context().Done()
		}, want: maxEvent},
		"long-poll change over the limit": {h: func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set(HeaderStoreID, "s")
			writeJSON(t, w, http.StatusOK, EventsResponse{StoreID: "s", Cursor: 12, Revision: 12,
				Changes: []ChangeSet{change(12, 11, map[string]string{"k": `"` + big[:2*maxEvent] + `"`})}})
		}, mode: WatchLongPoll, want: maxEvent},
		"long-poll reply over the limit": {h: func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set(HeaderStoreID, "s")
			_, _ = io.WriteString(w, `{"store_id":"s","cursor":3,"pad":"`+strings.Repeat(big, 5)+`"}`)
		}, mode: WatchLongPoll, want: maxSnap},
		"snapshot over the limit": {h: func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set(HeaderStoreID, "s")
			_, _ = io.WriteString(w, `{"ns":"payments.prod","store_id":"s","revision":1,"cursor":1,"values":{"k":"`+strings.Repeat(big, 5)+`"}}`)
		}, snap: true, want: maxSnap},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			srv := newServer(t, tc.h)
			s := newSource(t, srv.URL, WithMaxEventBytes(maxEvent), WithMaxSnapshotBytes(maxSnap), WithWatchMode(tc.mode))
			var err error
			if tc.snap {
				_, err = s.Snapshot(context.Background(), SnapshotRequest{Namespace: testNS})
			} else {
				err = s.Watch(context.Background(), WatchRequest{Namespace: testNS, Since: 11}, func(Event) error { return nil })
			}
			if !errors.Is(err, ErrTooLarge) {
				t.Fatalf("err = %v, want ErrTooLarge", err)
			}
			if msg := err.Error(); !strings.Contains(msg, "limit of "+strconv.Itoa(tc.want)+" bytes") {
				t.Errorf("err = %q, want it to name the limit of %d bytes", msg, tc.want)
			}
		})
	}
}

// An error reply whose body stalls is still the server's answer: the watch
// ends after about the idle timeout with its status and Retry-After, not
// as a silent stream.
func TestWatchSSEStalledErrorBodyKeepsTheStatus(t *testing.T) {
	leakCheck(t)
	const idle = 300 * time.Millisecond
	srv := newServer(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Retry-After", "4")
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusServiceUnavailable)
		_, _ = io.WriteString(w, `{"error":"unavailable","mess`)
		w.(http.Flusher).Flush()
		<-r.Context().Done()
	})
	s := newSource(t, srv.URL, WithIdleTimeout(idle))
	start := time.Now()
	err := s.Watch(context.Background(), WatchRequest{Namespace: testNS}, func(Event) error { return nil })
	var se *StatusError
	if !errors.As(err, &se) || se.StatusCode != http.StatusServiceUnavailable || se.RetryAfter != 4*time.Second {
		t.Fatalf("Watch = %v, want the 503 with Retry-After 4s", err)
	}
	if d := time.Since(start); d < idle || d > 10*idle {
		t.Errorf("returned after %v, want about %v", d, idle)
	}
}
