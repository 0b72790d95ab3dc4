package watchcache

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/holdfast-dev/holdfast/internal/dataplane"
	"github.com/holdfast-dev/holdfast/internal/rollout"
	"github.com/holdfast-dev/holdfast/internal/testutil"
	"github.com/holdfast-dev/holdfast/internal/testutil/ssetest"
	"github.com/holdfast-dev/holdfast/internal/wire"
	"github.com/holdfast-dev/holdfast/transport"
)

// startFollower serves a follower on a loopback port, closed at the end of
// the test. want accepts every namespace.
func startFollower(t testing.TB, maxChanges int, maxBytes int64, opts ...dataplane.Option) (*follower, *dataplane.Server) {
	t.Helper()
	f := newFollower(maxChanges, maxBytes, func(string) error { return nil })
	s, err := dataplane.New(f, opts...)
	if err != nil {
		t.Fatal(err)
	}
	f.serve(s)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Listen(l); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := s.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return f, s
}

func raw(kv ...string) map[string]json.RawMessage {
	m := make(map[string]json.RawMessage)
	for i := 0; i+1 < len(kv); i += 2 {
		m[kv[i]] = json.RawMessage(kv[i+1])
	}
	return m
}

// chained is the change set of ns from prev to rev putting k=v.
func chained(ns, storeID string, prev, rev int64, k, v string) *transport.ChangeSet {
	return &transport.ChangeSet{Namespace: ns, StoreID: storeID, Revision: rev, PrevRevision: prev,
		Puts: map[string]json.RawMessage{k: json.RawMessage(v)}}
}

// A namespace whose cursor is below the others' (loaded from a last-good
// file saved earlier) must not be told complete up to the others' cursor:
// its changes in between are still to come from the upstream.
func TestFollowerWatchOfANamespaceBehindTheOthers(t *testing.T) {
	f, s := startFollower(t, 100, 0, dataplane.WithHeartbeat(20*time.Millisecond))
	f.Load("a", "st", 90, 100, raw("x", "1"), time.Now())
	f.Load("b", "st", 40, 50, raw("y", "1"), time.Now())
	c := newClient(t)
	st := ssetest.Open(t, c, urlOf(s)+"/sdk/watch?ns=b&since=50", "")
	// A few heartbeats: none may speak past b's cursor.
	for i := 0; i < 5; i++ {
		_, p := ssetest.Checked(t, st.MustNext(t))
		if p == nil || p.Cursor > 50 {
			t.Fatalf("event %d: progress %+v, b is complete up to 50 only", i, p)
		}
	}
	// b's syncer catches up: a change at 80, then its cursor.
	f.Apply("b", "st", 80, 100, raw("y", "2"), chained("b", "st", 40, 80, "y", "2"), 0, false)
	for {
		cs, p := ssetest.Checked(t, st.MustNext(t))
		if cs != nil {
			if cs.Revision != 80 {
				t.Fatalf("change %+v", cs)
			}
			return
		}
		if p.Cursor >= 80 {
			t.Fatalf("progress at %d before the change at 80", p.Cursor)
		}
	}
}

func TestFollowerLongPollOfANamespaceBehindTheOthers(t *testing.T) {
	f, s := startFollower(t, 100, 0, dataplane.WithHeartbeat(20*time.Millisecond))
	f.Load("a", "st", 90, 100, raw("x", "1"), time.Now())
	f.Load("b", "st", 40, 50, raw("y", "1"), time.Now())
	c := newClient(t)
	resp, data := do(t, c, "GET", urlOf(s)+"/sdk/events?ns=b&since=50&wait=100ms", "")
	if resp.StatusCode != 200 {
		t.Fatalf("%d %s", resp.StatusCode, data)
	}
	if ev := decode[transport.EventsResponse](t, data); ev.Cursor > 50 {
		t.Fatalf("long-poll cursor %d, b is complete up to 50 only", ev.Cursor)
	}
	resp, data = do(t, c, "GET", urlOf(s)+"/sdk/stream/events?ns=b:50&wait=100ms", "")
	if resp.StatusCode != 200 {
		t.Fatalf("%d %s", resp.StatusCode, data)
	}
	if ev := decode[wire.StreamEventsResponse](t, data); ev.Cursor > 50 {
		t.Fatalf("stream long-poll cursor %d, b is complete up to 50 only", ev.Cursor)
	}
}

func TestFollowerStreamOfANamespaceBehindTheOthers(t *testing.T) {
	f, s := startFollower(t, 100, 0, dataplane.WithHeartbeat(20*time.Millisecond))
	f.Load("a", "st", 90, 100, raw("x", "1"), time.Now())
	f.Load("b", "st", 40, 50, raw("y", "1"), time.Now())
	c := newClient(t)
	st := ssetest.Open(t, c, urlOf(s)+"/sdk/stream?ns=b:50", "")
	for i := 0; i < 5; i++ {
		ev := st.MustNext(t)
		if id, _ := strconv.ParseInt(ev.ID, 10, 64); ev.Event != transport.EventProgress || id > 50 {
			t.Fatalf("event %d: %+v, b is complete up to 50 only", i, ev)
		}
	}
}

// pollResult is one long-poll's outcome.
type pollResult struct {
	status int
	body   []byte
	err    error
}

func pollAsync(c *http.Client, url string) <-chan pollResult {
	ch := make(chan pollResult, 1)
	go func() {
		resp, err := c.Get(url)
		if err != nil {
			ch <- pollResult{err: err}
			return
		}
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		ch <- pollResult{status: resp.StatusCode, body: body, err: err}
	}()
	return ch
}

// A relay's multi-namespace long-poll that waits gets a change of one
// namespace above the cursor of another (its syncer applied it first, the
// other's progress is still to come): the reply must still come, whole,
// once the wait ends or the cursor reaches it.
func TestFollowerStreamPollGetsAChangeAboveTheCursor(t *testing.T) {
	f, s := startFollower(t, 100, 0, dataplane.WithHeartbeat(time.Hour))
	f.Apply("a", "st", 100, 100, raw("x", "1"), nil, 0, false)
	f.Apply("b", "st", 90, 100, raw("y", "1"), nil, 0, false)
	c := newClient(t)
	reply := pollAsync(c, urlOf(s)+"/sdk/stream/events?ns=a:100&ns=b:100&wait=400ms")
	testutil.Eventually(t, waitLimit, func() bool { return s.Watchers("a") == 1 }, "the poll to wait")
	f.Apply("a", "st", 101, 101, raw("x", "2"), chained("a", "st", 100, 101, "x", "2"), 0, false) // b still at 100
	r := <-reply
	if r.err != nil || r.status != 200 {
		t.Fatalf("poll: %v %d %s", r.err, r.status, r.body)
	}
	if ev := decode[wire.StreamEventsResponse](t, r.body); ev.Cursor != 100 || len(ev.Changes) != 0 {
		t.Fatalf("reply %+v, want cursor 100 and no change yet", ev)
	}
	// b catches up: the change comes with the cursor that covers it.
	reply = pollAsync(c, urlOf(s)+"/sdk/stream/events?ns=a:100&ns=b:100&wait=5s")
	testutil.Eventually(t, waitLimit, func() bool { return s.Watchers("a") == 1 }, "the poll to wait")
	f.Confirm("b", 101, 0, false)
	r = <-reply
	if r.err != nil || r.status != 200 {
		t.Fatalf("poll: %v %d %s", r.err, r.status, r.body)
	}
	if ev := decode[wire.StreamEventsResponse](t, r.body); ev.Cursor != 101 || len(ev.Changes) != 1 || ev.Changes[0].Revision != 101 {
		t.Fatalf("reply %+v, want the change at 101 with cursor 101", ev)
	}
}

// A relay's stream that opens while its namespace's changes flow gets each
// change once: one committed before the subscription is in the backlog,
// and the hub, which hands it out later, must not hand it to the new
// stream too.
func TestFollowerStreamSendsEachChangeOnce(t *testing.T) {
	f, s := startFollower(t, 1000, 0, dataplane.WithHeartbeat(time.Hour))
	f.Apply("a", "st", 1, 1, raw("x", "1"), nil, 0, false)
	c := newClient(t)
	rev := int64(1)
	deadline := time.Now().Add(2 * time.Second)
	for i := 0; i < 500 && time.Now().Before(deadline); i++ {
		// A burst of changes while the stream opens.
		from, to := rev, rev+10
		done := make(chan struct{})
		go func() {
			defer close(done)
			for r := from + 1; r <= to; r++ {
				v := strconv.FormatInt(r, 10)
				f.Apply("a", "st", r, r, raw("x", v), chained("a", "st", r-1, r, "x", v), 0, false)
			}
		}()
		since := max(from-2, 1)
		st := ssetest.Open(t, c, urlOf(s)+"/sdk/stream?ns=a:"+strconv.FormatInt(since, 10), "")
		for last := since; last < to; {
			ev := st.MustNext(t)
			if ev.Event != transport.EventChange {
				continue
			}
			id, _ := strconv.ParseInt(ev.ID, 10, 64)
			if id != last+1 {
				t.Fatalf("stream %d (since %d): change %d after %d", i, since, id, last)
			}
			last = id
		}
		st.Close()
		<-done
		rev = to
	}
}

// flushes is a ResponseWriter that keeps what each Flush sent.
type flushes struct {
	mu     sync.Mutex
	header http.Header
	buf    bytes.Buffer
	sent   []string
}

func (w *flushes) Header() http.Header { return w.header }
func (w *flushes) WriteHeader(int)     {}
func (w *flushes) Write(b []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.buf.Write(b)
}
func (w *flushes) Flush() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.sent = append(w.sent, w.buf.String())
	w.buf.Reset()
}

func (w *flushes) all() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return slices.Clone(w.sent)
}

// waitFor waits until ok holds of what was sent, and returns it.
func (w *flushes) waitFor(t *testing.T, what string, ok func([]string) bool) []string {
	t.Helper()
	if !testutil.Wait(5*time.Second, func() bool { return ok(w.all()) }) {
		t.Fatalf("no %s; writes %q", what, w.all())
	}
	return w.all()
}

// serveFlushed serves GET path from s into a flushes until the test ends,
// and returns it once the stream's opening progress (after headers that
// may go in a write of their own) was sent.
func serveFlushed(t *testing.T, s *dataplane.Server, path string) *flushes {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	w := &flushes{header: http.Header{}}
	done := make(chan struct{})
	go func() {
		defer close(done)
		s.Handler().ServeHTTP(w, httptest.NewRequestWithContext(ctx, http.MethodGet, path, nil))
	}()
	t.Cleanup(func() { cancel(); <-done })
	w.waitFor(t, "opening progress", func(s []string) bool {
		return len(s) > 0 && strings.Contains(s[len(s)-1], "event: progress")
	})
	return w
}

// A relay's stream sends one write per publish: at 10,000 clients a
// second write was a third of the relay's fan-out. A stream of several
// namespaces gets the change and the progress that covers it (its id
// speaks only for its namespace there); a stream of one namespace gets the
// change alone, which says all that progress would, unless the flag it
// carries is not what the stream was told. The beat the upstream's
// confirmation asked for is not sent again.
func TestFollowerStreamSendsOneWritePerPublish(t *testing.T) {
	for _, tc := range []struct {
		name        string
		path        string
		unconfirmed bool // the upstream said so, and says so still
		// age: a's data comes as a resnapshot's, which its upstream
		// confirmed age ago (the relay dates it then, not at receipt).
		age          time.Duration
		wantProgress bool
	}{
		{"one namespace", "/sdk/stream?ns=a:1", false, 0, false},
		{"two namespaces", "/sdk/stream?ns=a:1&ns=b:1", false, 0, true},
		{"one namespace unconfirmed", "/sdk/stream?ns=a:1", true, 0, true},
		{"one namespace resnapshotted, its data aged", "/sdk/stream?ns=a:1", false, 30 * time.Second, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f, s := startFollower(t, 100, 0, dataplane.WithHeartbeat(time.Hour))
			f.Apply("a", "st", 1, 1, raw("x", "1"), nil, 0, tc.unconfirmed)
			f.Apply("b", "st", 1, 1, raw("y", "1"), nil, 0, tc.unconfirmed)
			w := serveFlushed(t, s, tc.path)
			opened := len(w.all())
			for rev := int64(2); rev <= 4; rev++ {
				v := strconv.FormatInt(rev, 10)
				f.Confirm("b", rev, 0, tc.unconfirmed) // b is as current as a: the head moves with a
				cs := chained("a", "st", rev-1, rev, "x", v)
				if tc.age > 0 {
					cs = nil // a resnapshot: the relay serves the difference
				}
				f.Apply("a", "st", rev, rev, raw("x", v), cs, tc.age, tc.unconfirmed)
				sent := w.waitFor(t, "change "+v, func(s []string) bool { return len(s) > opened })
				got := sent[opened]
				change, progress := strings.Index(got, "event: change\nid: "+v+"\n"), strings.Index(got, "event: progress\nid: "+v+"\n")
				switch {
				case change < 0:
					t.Fatalf("revision %s: write %q, want its change", v, got)
				case tc.wantProgress && progress < change:
					t.Fatalf("revision %s: write %q, want its change then the progress at it", v, got)
				case !tc.wantProgress && strings.Contains(got, "event: progress"):
					t.Fatalf("revision %s: write %q, want its change alone", v, got)
				}
				if age := progressAge(t, got[max(progress, 0):]); tc.wantProgress && age < tc.age {
					t.Fatalf("revision %s: progress %q tells age %v, want at least %v", v, got[progress:], age, tc.age)
				}
				// The confirmation's beat (due within progressEvery) and
				// the head's tick add nothing.
				time.Sleep(2 * progressEvery)
				if sent := w.all(); len(sent) != opened+1 {
					t.Fatalf("revision %s: writes after the change %q, want none", v, sent[opened+1:])
				}
				opened++
			}
		})
	}
}

// A confirmation that dates the data earlier than a stream was told (a
// relay above that resnapshotted, an aged progress) goes at once, though
// the stream told progress, or a change alone, just before.
func TestFollowerStreamTellsAnOlderDateAtOnce(t *testing.T) {
	f, s := startFollower(t, 100, 0, dataplane.WithHeartbeat(time.Hour))
	f.Apply("a", "st", 1, 1, raw("x", "1"), nil, 0, false)
	w := serveFlushed(t, s, "/sdk/stream?ns=a:1")
	opened := len(w.all())
	f.Apply("a", "st", 2, 2, raw("x", "2"), chained("a", "st", 1, 2, "x", "2"), 0, false)
	w.waitFor(t, "the change alone", func(s []string) bool { return len(s) > opened })
	f.Confirm("a", 2, 30*time.Second, false)
	w.waitFor(t, "progress aged 30 s", func(s []string) bool {
		return slices.ContainsFunc(s[opened+1:], func(b string) bool { return progressAge(t, b) >= 30*time.Second })
	})
}

// progressAge returns the age a write's first progress event tells.
func progressAge(t *testing.T, write string) time.Duration {
	t.Helper()
	_, data, ok := strings.Cut(write, "event: progress\n")
	if !ok {
		return 0
	}
	_, data, _ = strings.Cut(data, "data: ")
	data, _, _ = strings.Cut(data, "\n")
	var p transport.StreamProgress
	if err := json.Unmarshal([]byte(data), &p); err != nil {
		t.Fatalf("progress data %q: %v", data, err)
	}
	return time.Duration(p.AgeMillis) * time.Millisecond
}

// A beat already asked for when the upstream stops confirming (Fail) is
// news, though the stream told progress since the confirmation that asked
// for it: it carries the unconfirmed flag, which the client must see now,
// not at the next heartbeat.
func TestFollowerStreamBeatAfterFailIsNotSkipped(t *testing.T) {
	f, s := startFollower(t, 100, 0, dataplane.WithHeartbeat(time.Hour))
	f.Apply("a", "st", 1, 1, raw("x", "1"), nil, 0, false)
	w := serveFlushed(t, s, "/sdk/stream?ns=a:1")
	base := len(w.all())
	waitWrites := func(n int) {
		t.Helper()
		w.waitFor(t, strconv.Itoa(n)+" writes", func(s []string) bool { return len(s) >= n })
	}
	f.Confirm("a", 1, 0, false) // a beat (which the opening progress makes redundant); the next one is paced
	f.Apply("a", "st", 2, 2, raw("x", "2"), chained("a", "st", 1, 2, "x", "2"), 0, false)
	waitWrites(base + 1) // the change and its progress
	f.Fail("a")
	w.waitFor(t, "unconfirmed progress after Fail", func(s []string) bool {
		return slices.ContainsFunc(s[base+1:], func(b string) bool { return strings.Contains(b, `"unconfirmed":true`) })
	})
}

// A confirmation that changes no namespace's flag is not written to a
// stream that told progress just before (the publish's own progress,
// here): ten thousand streams that just had a publish do not all write
// again for the upstream's next heartbeat. One later is written, as a
// flag's change always is.
func TestFollowerStreamSkipsARoutineBeatRightAfterProgress(t *testing.T) {
	f, s := startFollower(t, 100, 0, dataplane.WithHeartbeat(time.Hour)) // spread 1 s, no heartbeat
	spread := beatSpread(time.Hour)
	f.Apply("a", "st", 1, 1, raw("x", "1"), nil, 0, false)
	w := serveFlushed(t, s, "/sdk/stream?ns=a:1")
	opened := len(w.all())
	f.Apply("a", "st", 2, 2, raw("x", "2"), chained("a", "st", 1, 2, "x", "2"), 0, false)
	w.waitFor(t, "the change", func(s []string) bool { return len(s) > opened })
	told := time.Now()
	f.Confirm("a", 2, 0, false) // routine, right after the change's progress
	// Its beat reaches every shard within two rounds: nothing may come.
	time.Sleep(2*spread + 2*progressEvery)
	if sent := w.all(); len(sent) != opened+1 {
		t.Fatalf("writes after a routine confirmation within %v of the last progress: %q, want none", time.Since(told), sent[opened+1:])
	}
	if wait := recentProgress(time.Hour) - time.Since(told); wait > 0 {
		time.Sleep(wait)
	}
	f.Confirm("a", 2, 0, false) // routine, but the last progress is not recent any more: written
	w.waitFor(t, "progress for a confirmation past the spread", func(s []string) bool {
		return len(s) > opened+1 && strings.Contains(s[opened+1], "event: progress")
	})
}

// The Holdfast-Capabilities of a client that evaluates rollouts.
const newCaps = "stream,ack-batch,ack-stream,rollout"

// asClient returns the request headers of a client with caps ("" : none).
func asClient(caps string) []string {
	if caps == "" {
		return nil
	}
	return []string{transport.HeaderCapabilities, caps}
}

// A relay's change carries its upstream's bytes: the base view keeps
// every field but the reserved keys, unknown ones too.
func TestFollowerServesTheBaseOfRawChanges(t *testing.T) {
	f, s := startFollower(t, 100, 0, dataplane.WithHeartbeat(time.Hour))
	f.Apply("app", "st", 1, 1, raw("a", "1"), nil, 0, false)
	rawCS := `{"ns":"app","revision":2,"prev_revision":1,"store_id":"st","committed_at":"2026-01-01T00:00:00Z",` +
		`"puts":{"a":2,"` + rollout.Key + `":{"id":"r1"}},"deletes":["$holdfast/old","gone"],"future":{"x":[1,2]}}`
	var cs transport.ChangeSet
	if err := json.Unmarshal([]byte(rawCS), &cs); err != nil {
		t.Fatal(err)
	}
	cs.Raw = json.RawMessage(rawCS)
	f.Apply("app", "st", 2, 2, raw("a", "2", rollout.Key, `{"id":"r1"}`), &cs, 0, false)
	c := newClient(t)
	for _, caps := range []string{"", newCaps} {
		resp, data := do(t, c, "GET", urlOf(s)+"/sdk/events?ns=app&since=1", "", asClient(caps)...)
		if resp.StatusCode != 200 {
			t.Fatalf("%d %s", resp.StatusCode, data)
		}
		var body struct {
			Changes []json.RawMessage `json:"changes"`
		}
		if err := json.Unmarshal(data, &body); err != nil || len(body.Changes) != 1 {
			t.Fatalf("%s: %v", data, err)
		}
		got := string(body.Changes[0])
		if caps == newCaps {
			if got != rawCS {
				t.Fatalf("new client: %s, want the upstream's bytes %s", got, rawCS)
			}
			continue
		}
		want := `{"ns":"app","revision":2,"prev_revision":1,"store_id":"st","committed_at":"2026-01-01T00:00:00Z","future":{"x":[1,2]},"puts":{"a":2},"deletes":["gone"]}`
		if got != want {
			t.Fatalf("old client:\n got %s\nwant %s", got, want)
		}
		resp, data = do(t, c, "GET", urlOf(s)+"/sdk/snapshot?ns=app", "", asClient(caps)...)
		if resp.StatusCode != 200 {
			t.Fatalf("snapshot: %d %s", resp.StatusCode, data)
		}
		snap := decode[transport.Snapshot](t, data)
		values := decode[map[string]json.RawMessage](t, snap.Values)
		if _, ok := values[rollout.Key]; ok || snap.Revision != 2 {
			t.Fatalf("old client's snapshot from the relay: %s", snap.Values)
		}
	}
}
