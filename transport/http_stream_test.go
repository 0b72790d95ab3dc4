package transport

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/holdfast-dev/holdfast/internal/wire"
)

const allCaps = "stream,ack-batch,h2c"

func rawKV(k, v string) map[string]json.RawMessage {
	return map[string]json.RawMessage{k: json.RawMessage(v)}
}

// streamLog records a stream's events and stops once until holds.
type streamLog struct {
	mu      sync.Mutex
	changes map[string][]int64
	ended   map[string]error
	cursor  int64
	n       int
}

func newStreamLog() *streamLog {
	return &streamLog{changes: map[string][]int64{}, ended: map[string]error{}}
}

func (l *streamLog) handle(until func(*streamLog) bool) func(StreamEvent) error {
	return func(e StreamEvent) error {
		l.mu.Lock()
		defer l.mu.Unlock()
		l.n++
		switch {
		case e.Change != nil:
			l.changes[e.Change.Namespace] = append(l.changes[e.Change.Namespace], e.Change.Revision)
		case e.Progress != nil:
			l.cursor = e.Progress.Cursor
		case e.Ended != nil:
			l.ended[e.Ended.Namespace] = e.Ended.Err
		}
		if until(l) {
			return errEnough
		}
		return nil
	}
}

func streamCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// Over SSE and long-poll alike: each namespace gets exactly its changes,
// in order; the namespaces in trouble end (compacted, ahead, invalid, not
// found) with the errors their own watch would give, and the others go on;
// a publish to a namespace outside the stream advances its progress.
func TestWatchStreamDelivers(t *testing.T) {
	leakCheck(t)
	for _, mode := range []WatchMode{WatchSSE, WatchLongPoll} {
		t.Run(mode.String(), func(t *testing.T) {
			srv := StartStandIn(t, allCaps, 100*time.Millisecond)
			s := newSource(t, srv.URL, WithWatchMode(mode), WithLongPollWait(time.Second))
			old := srv.Publish("old", rawKV("v", "0"), nil)
			srv.Publish("old", rawKV("v", "1"), nil)
			srv.Compact(old + 1)
			var want = map[string][]int64{}
			for i := range 3 {
				for _, ns := range []string{"a", "b", "c"} {
					want[ns] = append(want[ns], srv.Publish(ns, rawKV("i", fmt.Sprint(i)), nil))
				}
			}
			head := want["c"][2]
			req := StreamRequest{Namespaces: []WatchRequest{
				{Namespace: "a", Since: old + 1}, {Namespace: "b", Since: want["b"][0]}, {Namespace: "c", Since: old + 1},
				{Namespace: "old", Since: old - 1}, {Namespace: "Bad Name", Since: 0},
				{Namespace: "ahead", Since: head + 100}, {Namespace: "never", Since: old + 1},
			}}
			want["b"] = want["b"][1:]
			log := newStreamLog()
			var other atomic.Int64
			err := s.WatchStream(streamCtx(t), req, log.handle(func(l *streamLog) bool {
				if l.cursor >= head && other.Load() == 0 {
					other.Store(srv.Publish("elsewhere", rawKV("x", "1"), nil))
				}
				return other.Load() > 0 && l.cursor >= other.Load()
			}))
			if !errors.Is(err, errEnough) {
				t.Fatalf("WatchStream = %v; want the handler's stop", err)
			}
			for _, ns := range []string{"a", "b", "c"} {
				if !slices.Equal(log.changes[ns], want[ns]) {
					t.Errorf("%s: changes %v; want %v", ns, log.changes[ns], want[ns])
				}
			}
			var ce *CompactedError
			if e := log.ended["old"]; !errors.As(e, &ce) || ce.CompactRevision != old+1 || Retryable(e) {
				t.Errorf("old ended with %v; want a *CompactedError at %d", e, old+1)
			}
			if e := log.ended["ahead"]; !errors.Is(e, ErrCursorAhead) || Retryable(e) {
				t.Errorf("ahead ended with %v; want ErrCursorAhead", e)
			}
			if e := log.ended["Bad Name"]; !errors.Is(e, ErrInvalidNamespace) {
				t.Errorf("Bad Name ended with %v; want ErrInvalidNamespace", e)
			}
			var se *StatusError
			if e := log.ended["never"]; !errors.Is(e, ErrNotFound) || !errors.As(e, &se) || se.StoreID != "standin-1" {
				t.Errorf("never ended with %v; want ErrNotFound, a *StatusError naming the store", e)
			}
			if len(log.ended) != 4 || len(log.changes) != 3 {
				t.Errorf("ended %v, changes %v; want exactly those", log.ended, log.changes)
			}
		})
	}
}

// A request the client can judge alone fails whole, before any request.
func TestWatchStreamBadRequest(t *testing.T) {
	leakCheck(t)
	srv := StartStandIn(t, allCaps, time.Second)
	s := newSource(t, srv.URL)
	many := make([]WatchRequest, MaxStreamNamespaces+1)
	for i := range many {
		many[i] = WatchRequest{Namespace: fmt.Sprintf("ns-%d", i)}
	}
	for name, req := range map[string]StreamRequest{
		"empty":    {},
		"twice":    {Namespaces: []WatchRequest{{Namespace: "a"}, {Namespace: "b"}, {Namespace: "a", Since: 3}}},
		"negative": {Namespaces: []WatchRequest{{Namespace: "a", Since: -1}}},
		"too many": {Namespaces: many},
	} {
		err := s.WatchStream(streamCtx(t), req, func(StreamEvent) error { return nil })
		if !errors.Is(err, ErrBadRequest) || Retryable(err) != true {
			t.Errorf("%s: WatchStream = %v; want ErrBadRequest", name, err)
		}
	}
	if n := srv.streams.Load(); n != 0 {
		t.Errorf("%d stream requests; want none", n)
	}
}

// An older server: one whose replies lack the capability gets no stream
// request at all; one that answers 404 to the path is unsupported too.
func TestWatchStreamUnsupported(t *testing.T) {
	leakCheck(t)
	srv := StartStandIn(t, "ack-batch", time.Second)
	srv.Publish("a", rawKV("v", "1"), nil)
	s := newSource(t, srv.URL)
	req := StreamRequest{Namespaces: []WatchRequest{{Namespace: "a"}}}
	if _, err := s.Snapshot(streamCtx(t), SnapshotRequest{Namespace: "a"}); err != nil {
		t.Fatal(err)
	}
	if err := s.WatchStream(streamCtx(t), req, func(StreamEvent) error { return nil }); err != ErrStreamUnsupported {
		t.Errorf("WatchStream after a reply without %q = %v; want ErrStreamUnsupported", CapabilityStream, err)
	}
	if n := srv.streams.Load(); n != 0 {
		t.Errorf("%d stream requests; want none", n)
	}
	for _, mode := range []WatchMode{WatchSSE, WatchLongPoll} {
		old := newServer(t, func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set(HeaderStoreID, "old") // as the reference server's mux would not, but a holdfast 404
			http.NotFound(w, r)
		})
		s := newSource(t, old.URL, WithWatchMode(mode))
		err := s.WatchStream(streamCtx(t), req, func(StreamEvent) error { return nil })
		if !errors.Is(err, ErrStreamUnsupported) || errors.Is(err, ErrNotFound) {
			t.Errorf("%v: WatchStream against a server without the path = %v; want ErrStreamUnsupported (not ErrNotFound)", mode, err)
		}
	}
}

// Whatever the server sends that the request does not allow ends the
// stream with ErrMalformed or ErrTooLarge, and nothing of it is delivered.
func TestWatchStreamRefusesBadEvents(t *testing.T) {
	leakCheck(t)
	cs := func(ns string, rev int64) ChangeSet {
		c := change(rev, rev-1, map[string]string{"k": "1"})
		c.Namespace = ns
		return c
	}
	big := strings.Repeat("x", 2000)
	for _, tc := range []struct {
		name string
		send func(c *sseConn)
		want error
	}{
		{"change of another namespace", func(c *sseConn) { c.send(EventChange, 12, cs("z", 12)) }, ErrMalformed},
		{"change at its cursor", func(c *sseConn) { c.send(EventChange, 10, cs("a", 10)) }, ErrMalformed},
		{"change after an end", func(c *sseConn) {
			c.send(EventEnded, 0, wire.NamespaceEndedBody{Namespace: "b", Code: CodeNotFound})
			c.send(EventChange, 12, cs("b", 12))
		}, ErrMalformed},
		{"ended twice", func(c *sseConn) {
			c.send(EventEnded, 0, wire.NamespaceEndedBody{Namespace: "b", Code: CodeNotFound})
			c.send(EventEnded, 0, wire.NamespaceEndedBody{Namespace: "b", Code: CodeNotFound})
		}, ErrMalformed},
		{"ended of another", func(c *sseConn) { c.send(EventEnded, 0, wire.NamespaceEndedBody{Namespace: "z", Code: CodeNotFound}) }, ErrMalformed},
		{"ended without code", func(c *sseConn) { c.send(EventEnded, 0, `{"ns":"a"}`) }, ErrMalformed},
		{"not JSON", func(c *sseConn) { c.send(EventChange, 12, `{"ns":"a",`) }, ErrMalformed},
		{"progress back", func(c *sseConn) {
			c.send(EventProgress, 20, StreamProgress{StoreID: "s", Cursor: 20})
			c.send(EventProgress, 19, StreamProgress{StoreID: "s", Cursor: 19})
		}, ErrMalformed},
		{"change below progress", func(c *sseConn) {
			c.send(EventProgress, 20, StreamProgress{StoreID: "s", Cursor: 20})
			c.send(EventChange, 15, cs("a", 15))
		}, ErrMalformed},
		{"unknown type", func(c *sseConn) { c.send("reset", 12, StreamProgress{StoreID: "s", Cursor: 20}) }, ErrMalformed},
		{"oversized", func(c *sseConn) {
			x := cs("a", 12)
			x.Puts["big"] = json.RawMessage(`"` + big + `"`)
			c.send(EventChange, 12, x)
		}, ErrTooLarge},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := newServer(t, func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set(HeaderStoreID, "s")
				w.Header().Set(HeaderCapabilities, allCaps)
				c := openSSE(t, w)
				c.send(EventChange, 11, cs("a", 11))
				tc.send(c)
				<-r.Context().Done()
			})
			s := newSource(t, srv.URL, WithMaxEventBytes(1024))
			var got []StreamEvent
			err := s.WatchStream(streamCtx(t), StreamRequest{Namespaces: []WatchRequest{{Namespace: "a", Since: 10}, {Namespace: "b", Since: 10}}},
				func(e StreamEvent) error { got = append(got, e); return nil })
			if !errors.Is(err, tc.want) {
				t.Fatalf("WatchStream = %v; want %v", err, tc.want)
			}
			for _, e := range got {
				if e.Change != nil && e.Change.Revision != 11 {
					t.Errorf("delivered %+v of the bad event", e.Change)
				}
			}
		})
	}
}

// The long-poll reply is checked whole before any of it is delivered.
func TestWatchStreamLongPollRefusesBadReply(t *testing.T) {
	leakCheck(t)
	srv := newServer(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set(HeaderStoreID, "s")
		writeJSON(t, w, http.StatusOK, wire.StreamEventsResponse{StoreID: "s", Cursor: 20, Changes: []ChangeSet{
			{Namespace: "a", Revision: 11, PrevRevision: 1, StoreID: "s"},
			{Namespace: "z", Revision: 12, PrevRevision: 1, StoreID: "s"},
		}})
	})
	s := newSource(t, srv.URL, WithWatchMode(WatchLongPoll))
	n := 0
	err := s.WatchStream(streamCtx(t), StreamRequest{Namespaces: []WatchRequest{{Namespace: "a", Since: 10}}},
		func(StreamEvent) error { n++; return nil })
	if !errors.Is(err, ErrMalformed) || n != 0 {
		t.Errorf("WatchStream = %v after %d events; want ErrMalformed after none", err, n)
	}
}

// Every code of an ended event maps to the error the namespace's own watch
// would have returned.
func TestEndedErrors(t *testing.T) {
	for code, check := range map[string]func(error) bool{
		CodeCompacted: func(e error) bool {
			var ce *CompactedError
			return errors.As(e, &ce) && ce.CompactRevision == 7 && !Retryable(e)
		},
		CodeNotFound:         func(e error) bool { return errors.Is(e, ErrNotFound) && Retryable(e) },
		CodeUnauthorized:     func(e error) bool { return errors.Is(e, ErrUnauthorized) },
		CodeForbidden:        func(e error) bool { return errors.Is(e, ErrUnauthorized) },
		CodeCursorAhead:      func(e error) bool { return errors.Is(e, ErrCursorAhead) && !Retryable(e) },
		CodeInvalidNamespace: func(e error) bool { return errors.Is(e, ErrInvalidNamespace) && !Retryable(e) },
		"something_new": func(e error) bool {
			var se *StatusError
			return errors.As(e, &se) && se.Code == "something_new" && Retryable(e)
		},
	} {
		err := endedError(wire.NamespaceEndedBody{Namespace: "a", Code: code, CompactRevision: 7, Message: "m"}, "s")
		var se *StatusError
		if !check(err) || !errors.As(err, &se) || se.StoreID != "s" || !strings.Contains(err.Error(), `"a"`) {
			t.Errorf("%s: %v (%#v); wrong", code, err, se)
		}
	}
}

// With ack-batch, acks go in one request per client id; without, one per
// ack, as Ack sends them.
func TestAckBatch(t *testing.T) {
	leakCheck(t)
	acks := []Ack{
		{ClientID: "c1", Namespace: "a", Revision: 1, Status: AckApplied},
		{ClientID: "c1", Namespace: "b", Revision: 2, Status: AckRejected, Error: strings.Repeat("é", MaxAckErrorBytes)},
		{ClientID: "c1", Namespace: "c", Revision: 3, Status: AckApplied},
	}
	for _, tc := range []struct {
		caps  string
		posts int64
	}{{"stream,ack-batch", 1}, {"stream", 3}} {
		srv := StartStandIn(t, tc.caps, time.Second)
		srv.Publish("a", rawKV("v", "1"), nil)
		s := newSource(t, srv.URL)
		if _, err := s.Snapshot(streamCtx(t), SnapshotRequest{Namespace: "a"}); err != nil {
			t.Fatal(err)
		}
		if err := s.AckBatch(streamCtx(t), acks); err != nil {
			t.Fatalf("%s: AckBatch = %v", tc.caps, err)
		}
		if p, n := srv.ackPosts.Load(), srv.acks.Load(); p != tc.posts || n != 3 {
			t.Errorf("%s: %d posts of %d acks; want %d of 3", tc.caps, p, n, tc.posts)
		}
		if err := s.AckBatch(streamCtx(t), []Ack{acks[0], {Namespace: "a", Status: "maybe"}}); err == nil || srv.acks.Load() != 3 {
			t.Errorf("%s: AckBatch with a bad ack = %v; want an error, nothing sent", tc.caps, err)
		}
	}
	bs := batches(append(slices.Repeat(acks[:1], maxAckBatch+1), Ack{ClientID: "c2", Namespace: "z", Status: AckApplied}))
	if len(bs) != 3 || len(bs[0].Acks) != maxAckBatch || bs[1].ClientID != "c1" || bs[2].ClientID != "c2" || bs[0].Acks[0].ClientID != "" {
		t.Errorf("batches: %d of %+v", len(bs), bs)
	}
	// Many clients, interleaved (a relay to a server without ack-relay):
	// each client's acks in order, in full batches then the rest.
	var many []Ack
	for rev := range maxAckBatch + 6 {
		for c := range 20 {
			many = append(many, Ack{ClientID: "c" + strconv.Itoa(c), Namespace: "a", Revision: int64(rev), Status: AckApplied})
		}
	}
	next := map[string]int64{}
	sizes := map[string][]int{}
	for _, b := range batches(many) {
		sizes[b.ClientID] = append(sizes[b.ClientID], len(b.Acks))
		for _, a := range b.Acks {
			if a.Revision != next[b.ClientID] {
				t.Fatalf("client %s: revision %d, want %d", b.ClientID, a.Revision, next[b.ClientID])
			}
			next[b.ClientID]++
		}
	}
	for c := range 20 {
		if got := sizes["c"+strconv.Itoa(c)]; !slices.Equal(got, []int{maxAckBatch, 6}) {
			t.Errorf("client c%d: batches of %v, want [%d 6]", c, got, maxAckBatch)
		}
	}
}
