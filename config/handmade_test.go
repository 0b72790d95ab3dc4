package config_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/holdfast-dev/holdfast/config"
	"github.com/holdfast-dev/holdfast/internal/sdksuite"
	"github.com/holdfast-dev/holdfast/internal/testutil"
	"github.com/holdfast-dev/holdfast/internal/testutil/nstest"
	"github.com/holdfast-dev/holdfast/transport"
)

// scriptedServer is a hand-made data-plane server: each snapshot request
// gets the next scripted snapshot, and each watch the next scripted list of
// SSE frames, after which the stream stays open with progress frames.
type scriptedServer struct {
	t         *testing.T
	mu        sync.Mutex
	snapshots []transport.Snapshot
	streams   [][]string
	snapCount atomic.Int64
}

func frame(event string, id int64, v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return fmt.Sprintf("event: %s\nid: %d\ndata: %s\n\n", event, id, b)
}

func (s *scriptedServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	switch r.URL.Path {
	case transport.PathSnapshot:
		s.mu.Lock()
		i := min(int(s.snapCount.Add(1))-1, len(s.snapshots)-1)
		snap := s.snapshots[i]
		s.mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(snap)
	case transport.PathWatch:
		s.mu.Lock()
		var frames []string
		if len(s.streams) > 0 {
			frames, s.streams = s.streams[0], s.streams[1:]
		}
		s.mu.Unlock()
		w.Header().Set("Content-Type", "text/event-stream")
		w.WriteHeader(http.StatusOK)
		f := w.(http.Flusher)
		for _, fr := range frames {
			_, _ = fmt.Fprint(w, fr)
		}
		f.Flush()
		tick := time.NewTicker(testHeartbeat)
		defer tick.Stop()
		for {
			select {
			case <-r.Context().Done():
				return
			case <-tick.C:
				_, _ = fmt.Fprint(w, ": keepalive\n\n")
				f.Flush()
			}
		}
	default:
		http.NotFound(w, r)
	}
}

func change(rev, prev int64, puts map[string]any) transport.ChangeSet {
	raw := map[string]json.RawMessage{}
	for k, v := range puts {
		b, _ := json.Marshal(v)
		raw[k] = b
	}
	return transport.ChangeSet{Namespace: "hm", StoreID: "s1", Revision: rev, PrevRevision: prev, CommittedAt: time.Now(), Puts: raw}
}

// TestDuplicatedAndReorderedEvents feeds duplicates, an old revision and a
// revision out of order: the client never goes back, skips what it has,
// and resnapshots on the gap.
func TestDuplicatedAndReorderedEvents(t *testing.T) {
	srv := &scriptedServer{t: t,
		snapshots: []transport.Snapshot{
			{Namespace: "hm", StoreID: "s1", Revision: 5, Cursor: 5, Values: json.RawMessage(`{"v":5}`)},
			{Namespace: "hm", StoreID: "s1", Revision: 9, Cursor: 9, Values: json.RawMessage(`{"v":9}`)},
		},
		streams: [][]string{{
			frame("change", 6, change(6, 5, map[string]any{"v": 6})),
			frame("change", 6, change(6, 5, map[string]any{"v": 66})), // duplicate
			frame("change", 4, change(4, 3, map[string]any{"v": 4})),  // old
			frame("progress", 6, transport.Progress{Namespace: "hm", StoreID: "s1", Revision: 6, Cursor: 6}),
			frame("change", 8, change(8, 7, map[string]any{"v": 8})), // 7 missing: a gap
			frame("change", 7, change(7, 6, map[string]any{"v": 7})), // too late
		}},
	}
	hs := httptest.NewServer(srv)
	t.Cleanup(hs.Close) // after the client's Close, which ends the stream

	c := sdksuite.NewClient(t, sdksuite.Endpoint(hs.URL))
	ns := sdksuite.Open(t, c, "hm")
	var mu sync.Mutex
	var seen []int64
	var regressions []string
	ns.OnAnyChange(func(cs config.ChangeSet) {
		mu.Lock()
		defer mu.Unlock()
		if len(seen) > 0 && cs.Revision <= seen[len(seen)-1] {
			regressions = append(regressions, fmt.Sprintf("%d after %d", cs.Revision, seen[len(seen)-1]))
		}
		seen = append(seen, cs.Revision)
	})
	// Poll the served revision too: it must never go back.
	var lastServed int64
	testutil.Eventually(t, waitLimit, func() bool {
		rev := ns.Revision()
		if rev < lastServed {
			t.Fatalf("served revision went back from %d to %d", lastServed, rev)
		}
		lastServed = rev
		return rev == 9
	}, "revision 9 after the gap's resnapshot")
	if ns.Int("v", 0) != 9 {
		t.Errorf("v = %d", ns.Int("v", 0))
	}
	if got := srv.snapCount.Load(); got != 2 {
		t.Errorf("%d snapshot requests; want 2 (open, then the gap)", got)
	}
	mu.Lock()
	defer mu.Unlock()
	for _, r := range regressions {
		t.Error("callback order:", r)
	}
}

// TestMalformedEventResumesWithoutPartialApply: an event that does not
// decode ends the stream; nothing of it is applied; the client resumes from
// its cursor and gets the change whole.
func TestMalformedEventResumesWithoutPartialApply(t *testing.T) {
	good := change(6, 5, map[string]any{"a": 6, "b": 6})
	srv := &scriptedServer{t: t,
		snapshots: []transport.Snapshot{
			{Namespace: "hm", StoreID: "s1", Revision: 5, Cursor: 5, Values: json.RawMessage(`{"a":5,"b":5}`)},
		},
		streams: [][]string{
			{"event: change\nid: 6\ndata: {\"ns\":\"hm\",\"store_id\":\"s1\",\"revision\":6,\"prev_revision\":5,\"puts\":{\"a\":6,\"b\":\n\n"},
			{frame("change", 6, good)},
		},
	}
	hs := httptest.NewServer(srv)
	t.Cleanup(hs.Close)
	c := sdksuite.NewClient(t, sdksuite.Endpoint(hs.URL))
	ns := sdksuite.Open(t, c, "hm")
	var torn atomic.Bool
	ns.OnAnyChange(func(cs config.ChangeSet) {
		if len(cs.Changes) != 2 {
			torn.Store(true)
		}
	})
	nstest.WaitRevision(t, ns, 6, waitLimit)
	if ns.Int("a", 0) != 6 || ns.Int("b", 0) != 6 || torn.Load() {
		t.Errorf("after resume: a=%d b=%d torn=%v", ns.Int("a", 0), ns.Int("b", 0), torn.Load())
	}
	if got := srv.snapCount.Load(); got != 1 {
		t.Errorf("%d snapshot requests; a malformed event must resume, not resnapshot", got)
	}
	if st := ns.Status(); st.LastError.Kind != config.ErrorInvalidData {
		t.Errorf("last error = %+v; want the malformed event", st.LastError)
	}
}
