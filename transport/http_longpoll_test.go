package transport

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

func TestWatchLongPoll(t *testing.T) {
	leakCheck(t)
	var (
		mu     sync.Mutex
		sinces []string
		waits  []string
	)
	srv := newServer(t, func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != PathEvents || r.URL.Query().Get("ns") != testNS {
			t.Errorf("request %s", r.URL)
		}
		if r.Header.Get("Authorization") != "Bearer lp" {
			t.Errorf("Authorization = %q", r.Header.Get("Authorization"))
		}
		since := r.URL.Query().Get("since")
		mu.Lock()
		sinces = append(sinces, since)
		waits = append(waits, r.URL.Query().Get("wait"))
		mu.Unlock()
		switch since {
		case "10":
			writeJSON(t, w, http.StatusOK, EventsResponse{StoreID: "store-1", Cursor: 15, Revision: 13,
				Changes: []ChangeSet{change(11, 10, map[string]string{"a": "1"}), change(13, 11, nil, "a")}})
		case "15":
			// Nothing new before the wait passed: an empty reply that still
			// advances the cursor.
			writeJSON(t, w, http.StatusOK, EventsResponse{Namespace: testNS, StoreID: "store-1", Cursor: 20, Revision: 13, Changes: []ChangeSet{}})
		default:
			writeJSON(t, w, http.StatusGone, ErrorBody{Error: CodeCompacted, CompactRevision: 18})
		}
	})
	s := newSource(t, srv.URL, WithWatchMode(WatchLongPoll), WithLongPollWait(2*time.Second), WithBearerToken("lp"))
	if s.WatchMode() != WatchLongPoll {
		t.Fatalf("WatchMode = %v", s.WatchMode())
	}
	var got []Event
	err := s.Watch(context.Background(), WatchRequest{Namespace: testNS, Since: 10}, collect(100, &got))
	var ce *CompactedError
	if !errors.As(err, &ce) || ce.CompactRevision != 18 {
		t.Fatalf("Watch = %v, want *CompactedError{18}", err)
	}
	if len(got) != 4 ||
		got[0].Change == nil || got[0].Change.Revision != 11 ||
		got[1].Change == nil || got[1].Change.Revision != 13 ||
		got[2].Progress == nil || got[2].Progress.Cursor != 15 || got[2].Progress.Revision != 13 || got[2].Progress.StoreID != "store-1" ||
		got[3].Progress == nil || got[3].Progress.Cursor != 20 || got[3].Progress.Namespace != testNS {
		t.Errorf("events = %+v", got)
	}
	mu.Lock()
	defer mu.Unlock()
	if strings.Join(sinces, ",") != "10,15,20" {
		t.Errorf("since chain %v, want 10,15,20", sinces)
	}
	if waits[0] != "2s" {
		t.Errorf("wait = %q, want 2s", waits[0])
	}
}

func TestWatchLongPollHandlerErrorAndCancel(t *testing.T) {
	leakCheck(t)
	srv := newServer(t, func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Query().Get("since") == "10" {
			writeJSON(t, w, http.StatusOK, EventsResponse{StoreID: "s", Cursor: 11, Revision: 11, Changes: []ChangeSet{change(11, 10, nil)}})
			return
		}
		<-r.Context().Done() // held: nothing new
	})
	s := newSource(t, srv.URL, WithWatchMode(WatchLongPoll), WithLongPollWait(time.Minute))
	var got []Event
	if err := s.Watch(context.Background(), WatchRequest{Namespace: testNS, Since: 10}, collect(1, &got)); err != errEnough {
		t.Errorf("Watch = %v, want the handler's error", err)
	}

	ctx, cancel := context.WithCancel(context.Background())
	var at time.Time
	err := s.Watch(ctx, WatchRequest{Namespace: testNS, Since: 10}, func(e Event) error {
		if e.Progress != nil {
			at = time.Now()
			cancel() // the next poll is held by the server
		}
		return nil
	})
	if !errors.Is(err, context.Canceled) {
		t.Errorf("Watch = %v, want context.Canceled", err)
	}
	if d := time.Since(at); d > 2*time.Second {
		t.Errorf("returned %v after cancel", d)
	}
}

func TestWatchLongPollIdle(t *testing.T) {
	leakCheck(t)
	srv := newServer(t, func(w http.ResponseWriter, r *http.Request) { <-r.Context().Done() })
	const wait, idle = 100 * time.Millisecond, 200 * time.Millisecond
	s := newSource(t, srv.URL, WithWatchMode(WatchLongPoll), WithLongPollWait(wait), WithIdleTimeout(idle))
	start := time.Now()
	err := s.Watch(context.Background(), WatchRequest{Namespace: testNS}, func(Event) error { return nil })
	if !errors.Is(err, ErrStreamIdle) {
		t.Fatalf("Watch = %v, want ErrStreamIdle", err)
	}
	if d := time.Since(start); d < wait+idle || d > 10*(wait+idle) {
		t.Errorf("gave up after %v, want about %v", d, wait+idle)
	}
}

func TestWatchLongPollBadReplies(t *testing.T) {
	leakCheck(t)
	const maxEvent = 1 << 10
	big := `"` + strings.Repeat("x", 2*maxEvent) + `"`
	cases := []struct {
		name string
		body string
		want error
	}{
		{"not json", `{"store_id":`, ErrMalformed},
		{"no cursor", `{"store_id":"s","changes":[]}`, ErrMalformed},
		{"no store id", `{"cursor":3,"changes":[]}`, ErrMalformed},
		{"wrong ns", `{"ns":"other","store_id":"s","cursor":3}`, ErrMalformed},
		{"change of wrong ns", `{"store_id":"s","cursor":3,"revision":3,"changes":[{"ns":"other","store_id":"s","revision":3,"prev_revision":1}]}`, ErrMalformed},
		{"change after cursor", `{"store_id":"s","cursor":3,"revision":3,"changes":[{"ns":"payments.prod","store_id":"s","revision":4,"prev_revision":1}]}`, ErrMalformed},
		{"changes out of order", `{"store_id":"s","cursor":9,"revision":5,"changes":[{"ns":"payments.prod","store_id":"s","revision":5,"prev_revision":1},{"ns":"payments.prod","store_id":"s","revision":4,"prev_revision":1}]}`, ErrMalformed},
		{"change too large", `{"store_id":"s","cursor":3,"revision":3,"changes":[{"ns":"payments.prod","store_id":"s","revision":3,"prev_revision":1,"puts":{"k":` + big + `}}]}`, ErrTooLarge},
		{"body too large", `{"store_id":"s","cursor":3,"pad":"` + strings.Repeat("p", 64<<10) + `"}`, ErrTooLarge},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			srv := newServer(t, func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set(HeaderStoreID, "s") // from a holdfast server
				_, _ = io.WriteString(w, tc.body)
			})
			s := newSource(t, srv.URL, WithWatchMode(WatchLongPoll), WithMaxEventBytes(maxEvent), WithMaxSnapshotBytes(32<<10))
			n := 0
			err := s.Watch(context.Background(), WatchRequest{Namespace: testNS}, func(Event) error { n++; return nil })
			if !errors.Is(err, tc.want) {
				t.Errorf("Watch = %v, want %v", err, tc.want)
			}
			if n != 0 {
				t.Errorf("handle called %d times for a bad reply", n)
			}
		})
	}
}

// autoServer serves /sdk/events properly and /sdk/watch as a buffering proxy
// would break it: sseMode "close" answers headers and ends the stream before
// any event, "blackhole" never answers, "ok" sends one progress event first.
type autoServer struct {
	t       *testing.T
	sseMode atomic.Value // string
	watches atomic.Int32
	polls   atomic.Int32
}

func (a *autoServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	switch r.URL.Path {
	case PathWatch:
		a.watches.Add(1)
		switch a.sseMode.Load().(string) {
		case "blackhole":
			<-r.Context().Done()
		case "ok":
			c := openSSE(a.t, w)
			c.send(EventProgress, 11, progress(11, 11))
		default:
			openSSE(a.t, w)
		}
	case PathEvents:
		a.polls.Add(1)
		writeJSON(a.t, w, http.StatusOK, EventsResponse{StoreID: "store-1", Cursor: 12, Revision: 11})
	default:
		http.NotFound(w, r)
	}
}

func TestWatchAutoSwitchesToLongPoll(t *testing.T) {
	for _, mode := range []string{"close", "blackhole"} {
		t.Run(mode, func(t *testing.T) {
			leakCheck(t)
			a := &autoServer{t: t}
			a.sseMode.Store(mode)
			srv := newServer(t, a.ServeHTTP)
			var logs bytes.Buffer
			var logMu sync.Mutex
			logger := slog.New(slog.NewTextHandler(&lockedWriter{w: &logs, mu: &logMu}, &slog.HandlerOptions{Level: slog.LevelInfo}))
			s := newSource(t, srv.URL, WithWatchMode(WatchAuto), WithIdleTimeout(200*time.Millisecond), WithLogger(logger))
			if s.WatchMode() != WatchSSE {
				t.Fatalf("initial WatchMode = %v, want sse", s.WatchMode())
			}
			for i := 1; i <= autoSwitchFailures; i++ {
				err := s.Watch(context.Background(), WatchRequest{Namespace: testNS, Since: 10}, func(Event) error { return nil })
				if !errors.Is(err, io.ErrUnexpectedEOF) && !errors.Is(err, ErrStreamIdle) {
					t.Fatalf("SSE watch %d = %v, want stream ended or idle", i, err)
				}
				want := WatchSSE
				if i == autoSwitchFailures {
					want = WatchLongPoll
				}
				if got := s.WatchMode(); got != want {
					t.Fatalf("after %d failed streams WatchMode = %v, want %v", i, got, want)
				}
			}
			watches := a.watches.Load()
			var got []Event
			if err := s.Watch(context.Background(), WatchRequest{Namespace: testNS, Since: 10}, collect(1, &got)); err != errEnough {
				t.Fatalf("long-poll watch = %v", err)
			}
			if len(got) != 1 || got[0].Progress == nil || got[0].Progress.Cursor != 12 {
				t.Errorf("long-poll events = %+v", got)
			}
			if a.watches.Load() != watches {
				t.Error("SSE used after the switch")
			}
			logMu.Lock()
			defer logMu.Unlock()
			if n := strings.Count(logs.String(), "switching to long-poll"); n != 1 {
				t.Errorf("switch logged %d times, want once:\n%s", n, logs.String())
			}
		})
	}
}

func TestWatchAutoStaysOnSSEWhenStreamsWork(t *testing.T) {
	leakCheck(t)
	a := &autoServer{t: t}
	srv := newServer(t, a.ServeHTTP)
	s := newSource(t, srv.URL, WithWatchMode(WatchAuto))
	for i, mode := range []string{"close", "close", "ok", "close", "close"} {
		a.sseMode.Store(mode)
		err := s.Watch(context.Background(), WatchRequest{Namespace: testNS, Since: 10}, func(Event) error { return nil })
		if !errors.Is(err, io.ErrUnexpectedEOF) {
			t.Fatalf("watch %d = %v", i, err)
		}
	}
	if s.WatchMode() != WatchSSE {
		t.Errorf("WatchMode = %v, want sse: a stream that delivered resets the count", s.WatchMode())
	}
	if a.polls.Load() != 0 {
		t.Errorf("%d long-polls, want none", a.polls.Load())
	}

	// Plain SSE mode never switches.
	s2 := newSource(t, srv.URL)
	a.sseMode.Store("close")
	for i := 0; i < 2*autoSwitchFailures; i++ {
		_ = s2.Watch(context.Background(), WatchRequest{Namespace: testNS}, func(Event) error { return nil })
	}
	if s2.WatchMode() != WatchSSE {
		t.Errorf("WatchSSE source switched to %v", s2.WatchMode())
	}
}

type lockedWriter struct {
	w  io.Writer
	mu *sync.Mutex
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}
