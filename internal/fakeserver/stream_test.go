package fakeserver

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/holdfast-dev/holdfast/internal/testutil"
	"github.com/holdfast-dev/holdfast/internal/testutil/ssetest"
	"github.com/holdfast-dev/holdfast/internal/wire"
	"github.com/holdfast-dev/holdfast/transport"
)

// streamURL builds a /sdk/stream (or /sdk/stream/events) URL from
// "name:since" pairs.
func streamURL(base, path string, pairs ...string) string {
	var b strings.Builder
	b.WriteString(base + path)
	for i, p := range pairs {
		if i == 0 {
			b.WriteByte('?')
		} else {
			b.WriteByte('&')
		}
		b.WriteString("ns=" + p)
	}
	return b.String()
}

func pair(ns string, since int64) string { return ns + ":" + strconv.FormatInt(since, 10) }

func TestStreamWholeRequestRefused(t *testing.T) {
	s := start(t)
	c := newClient(t)
	if _, err := s.Publish("app", map[string]any{"k": 1}); err != nil {
		t.Fatal(err)
	}
	many := make([]string, transport.MaxStreamNamespaces+1)
	for i := range many {
		many[i] = pair(fmt.Sprintf("n%d", i), 0)
	}
	cases := map[string][]string{
		"no ns":         nil,
		"no colon":      {"app"},
		"empty since":   {"app:"},
		"bad since":     {"app:x"},
		"negative":      {"app:-1"},
		"signed":        {"app:+1"},
		"spaced":        {"app:%201"},
		"overflow":      {"app:99999999999999999999"},
		"duplicate":     {"app:0", "app:1"},
		"dup invalid":   {"BAD:0", "BAD:0"},
		"too many":      many,
		"one bad among": {"app:0", "other:zz"},
	}
	for _, path := range []string{transport.PathStream, transport.PathStreamEvents} {
		for name, pairs := range cases {
			t.Run(path+"/"+name, func(t *testing.T) {
				u := streamURL(s.URL(), path, pairs...)
				if len(pairs) == 0 {
					u += "?wait=0"
				} else {
					u += "&wait=0"
				}
				resp, body := do(t, c, http.MethodGet, u, "")
				if resp.StatusCode != http.StatusBadRequest {
					t.Fatalf("status %d, want 400; body %s", resp.StatusCode, body)
				}
				if eb := decode[transport.ErrorBody](t, body); eb.Error != transport.CodeBadRequest {
					t.Fatalf("body %s", body)
				}
			})
		}
	}
	// Exactly MaxStreamNamespaces is fine.
	resp, body := do(t, c, http.MethodGet, streamURL(s.URL(), transport.PathStreamEvents, many[:transport.MaxStreamNamespaces]...)+"&wait=0", "")
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("%d namespaces: status %d %s", transport.MaxStreamNamespaces, resp.StatusCode, body)
	}
}

func TestCapabilitiesOnEveryReply(t *testing.T) {
	s := start(t)
	c := newClient(t)
	s.Publish("app", map[string]any{"k": 1})
	for _, u := range []string{"/sdk/snapshot?ns=app", "/sdk/events?ns=app&since=0", "/sdk/snapshot?ns=none", streamURL("", transport.PathStreamEvents, "app:0")} {
		resp, _ := do(t, c, http.MethodGet, s.URL()+u, "")
		info := parseCaps(resp.Header)
		if info != "ack-batch,ack-cohort,ack-relay,ack-stream,h2c,presence,reports-kept,rollout,stream" {
			t.Errorf("%s: capabilities %q", u, resp.Header.Get(transport.HeaderCapabilities))
		}
	}
}

func parseCaps(h http.Header) string {
	caps := strings.Split(h.Get(transport.HeaderCapabilities), ",")
	for i := range caps {
		caps[i] = strings.TrimSpace(caps[i])
	}
	slices.Sort(caps)
	return strings.Join(caps, ",")
}

func TestWithoutCapability(t *testing.T) {
	s := start(t, WithoutCapability(transport.CapabilityStream), WithoutCapability(transport.CapabilityAckBatch))
	c := newClient(t)
	s.Publish("app", map[string]any{"k": 1})
	resp, _ := do(t, c, http.MethodGet, streamURL(s.URL(), transport.PathStream, "app:0"), "")
	if resp.StatusCode != http.StatusNotFound {
		t.Fatalf("stream: status %d, want 404", resp.StatusCode)
	}
	resp, _ = do(t, c, http.MethodGet, s.URL()+"/sdk/snapshot?ns=app", "")
	if got := resp.Header.Get(transport.HeaderCapabilities); got != "h2c,rollout,presence,reports-kept" {
		t.Fatalf("capabilities %q, want h2c,rollout,presence,reports-kept", got)
	}
	resp, body := do(t, c, http.MethodPost, s.URL()+"/sdk/ack", `{"client_id":"c","acks":[{"ns":"app","revision":1,"status":"ack"}]}`)
	if resp.StatusCode != http.StatusBadRequest {
		t.Fatalf("batch ack: %d %s, want 400", resp.StatusCode, body)
	}
	if _, err := Start(WithoutCapability("nope")); err == nil {
		t.Fatal("Start accepted an unknown capability")
	}
}

// streamEvent decodes one stream event.
type streamEv struct {
	change   *transport.ChangeSet
	progress *transport.StreamProgress
	ended    *wire.NamespaceEndedBody
}

func nextStream(t *testing.T, st *ssetest.Stream) streamEv {
	t.Helper()
	ev, ok := st.Next(t)
	if !ok {
		t.Fatal("stream ended")
	}
	var out streamEv
	switch ev.Event {
	case transport.EventChange:
		cs := decode[transport.ChangeSet](t, []byte(ev.Data))
		if ev.ID != strconv.FormatInt(cs.Revision, 10) {
			t.Fatalf("change id %q, revision %d", ev.ID, cs.Revision)
		}
		out.change = &cs
	case transport.EventProgress:
		p := decode[transport.StreamProgress](t, []byte(ev.Data))
		if ev.ID != strconv.FormatInt(p.Cursor, 10) || strings.Contains(ev.Data, `"ns"`) {
			t.Fatalf("progress %+v", ev)
		}
		out.progress = &p
	case transport.EventEnded:
		e := decode[wire.NamespaceEndedBody](t, []byte(ev.Data))
		if ev.ID != "" {
			t.Fatalf("ended with id %q", ev.ID)
		}
		out.ended = &e
	default:
		t.Fatalf("event %+v", ev)
	}
	return out
}

func TestStreamEndsOneNamespaceOnly(t *testing.T) {
	s := start(t, WithHeartbeat(time.Hour))
	c := newClient(t)
	r1, _ := s.Publish("old", map[string]any{"k": 1})
	r2, _ := s.Publish("live", map[string]any{"k": 2})
	if _, err := s.Compact(r2); err != nil {
		t.Fatal(err)
	}
	st := ssetest.Open(t, c, streamURL(s.URL(), transport.PathStream,
		pair("old", r1-1), pair("Bad!Name", 0), pair("live", r2), pair("ahead", 0), pair("none", 0), pair("ahead2", r2+5)), "") // not found wins over a cursor ahead, as on /sdk/watch
	if st.Resp.Header.Get(transport.HeaderCursor) != strconv.FormatInt(r2, 10) {
		t.Fatalf("cursor header %q", st.Resp.Header.Get(transport.HeaderCursor))
	}
	want := map[string]string{"Bad!Name": transport.CodeInvalidNamespace, "old": transport.CodeCompacted,
		"ahead": transport.CodeNotFound, "none": transport.CodeNotFound, "ahead2": transport.CodeNotFound}
	got := map[string]string{}
	for len(got) < len(want) {
		ev := nextStream(t, st)
		if ev.ended == nil {
			t.Fatalf("before every ended event: %+v", ev)
		}
		got[ev.ended.Namespace] = ev.ended.Code
		if ev.ended.Code == transport.CodeCompacted && ev.ended.CompactRevision != r2 {
			t.Fatalf("compacted: %+v", ev.ended)
		}
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("ended %v, want %v", got, want)
	}
	if ev := nextStream(t, st); ev.progress == nil || ev.progress.Cursor != r2 || ev.progress.StoreID != s.StoreID() {
		t.Fatalf("first progress %+v", ev)
	}
	// The stream goes on for "live", and says nothing of the ended ones.
	s.Publish("old", map[string]any{"k": 3})
	r4, _ := s.Publish("live", map[string]any{"k": 4})
	for {
		ev := nextStream(t, st)
		if ev.ended != nil || ev.change != nil && ev.change.Namespace != "live" {
			t.Fatalf("after the ended: %+v", ev)
		}
		if ev.change != nil {
			if ev.change.Revision != r4 {
				t.Fatalf("change %d, want %d", ev.change.Revision, r4)
			}
			break
		}
	}
}

func TestStreamCursorAhead(t *testing.T) {
	s := start(t, WithHeartbeat(time.Hour))
	c := newClient(t)
	r1, _ := s.Publish("a", map[string]any{"k": 1})
	s.Publish("b", map[string]any{"k": 1})
	st := ssetest.Open(t, c, streamURL(s.URL(), transport.PathStream, pair("a", r1+10), pair("b", 0)), "")
	if ev := nextStream(t, st); ev.ended == nil || ev.ended.Namespace != "a" || ev.ended.Code != transport.CodeCursorAhead {
		t.Fatalf("first %+v", ev)
	}
	if ev := nextStream(t, st); ev.change == nil || ev.change.Namespace != "b" {
		t.Fatalf("backlog of b: %+v", ev)
	}
}

// Twenty namespaces on one stream get exactly their changes, in store
// order, and nothing of the others; on one connection.
func TestStreamTwentyNamespaces(t *testing.T) {
	s := start(t, WithHeartbeat(time.Hour))
	c := newClient(t)
	var names, pairs []string
	for i := range 30 {
		ns := fmt.Sprintf("ns-%02d", i)
		r, _ := s.Publish(ns, map[string]any{"i": i})
		if i < 20 {
			names = append(names, ns)
			pairs = append(pairs, pair(ns, r))
		}
	}
	before := s.Stats().Conns
	st := ssetest.Open(t, c, streamURL(s.URL(), transport.PathStream, pairs...), "")
	member := map[string]bool{}
	for _, n := range names {
		member[n] = true
	}
	var want []int64
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range 300 {
		ns := fmt.Sprintf("ns-%02d", rng.IntN(30))
		r, err := s.Publish(ns, map[string]any{"n": i})
		if err != nil {
			t.Fatal(err)
		}
		if member[ns] {
			want = append(want, r)
		}
	}
	var got []int64
	last := map[string]int64{}
	for len(got) < len(want) {
		ev := nextStream(t, st)
		if ev.ended != nil {
			t.Fatalf("ended %+v", ev.ended)
		}
		if ev.change == nil {
			continue
		}
		cs := ev.change
		if !member[cs.Namespace] {
			t.Fatalf("change of %s, not on the stream", cs.Namespace)
		}
		if p, ok := last[cs.Namespace]; ok && cs.PrevRevision != p {
			t.Fatalf("%s: prev %d after %d", cs.Namespace, cs.PrevRevision, p)
		}
		last[cs.Namespace] = cs.Revision
		got = append(got, cs.Revision)
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("changes %v\nwant %v", got, want)
	}
	if n := s.Stats().Conns - before; n != 1 {
		t.Fatalf("%d connections for one stream", n)
	}
	if s.OpenStreams() != 1 {
		t.Fatalf("%d streams open", s.OpenStreams())
	}
}

// A publish to a namespace the stream does not carry is told within a
// second (not at the 5 s heartbeat), and a burst is coalesced.
func TestStreamPromptProgress(t *testing.T) {
	s := start(t, WithHeartbeat(5*time.Second))
	c := newClient(t)
	r0, _ := s.Publish("mine", map[string]any{"k": 1})
	st := ssetest.Open(t, c, streamURL(s.URL(), transport.PathStream, pair("mine", r0)), "")
	if ev := nextStream(t, st); ev.progress == nil || ev.progress.Cursor != r0 {
		t.Fatalf("first %+v", ev)
	}
	t0 := time.Now()
	r1, _ := s.Publish("other", map[string]any{"k": 1})
	for {
		ev := nextStream(t, st)
		if ev.progress != nil && ev.progress.Cursor >= r1 {
			break
		}
	}
	if d := time.Since(t0); d > time.Second {
		t.Fatalf("progress after %v, want <= 1s", d)
	}
	// A burst of 40 publishes over ~1 s: at most one prompt progress per
	// 250 ms (5 in a second, one more for the edges), and the last one
	// reaches the head.
	var last int64
	for i := range 40 {
		last, _ = s.Publish("other", map[string]any{"k": i})
		time.Sleep(25 * time.Millisecond) // pacing the publisher, not synchronisation
	}
	t1 := time.Now()
	n := 0
	for {
		ev := nextStream(t, st)
		if ev.progress == nil {
			t.Fatalf("%+v", ev)
		}
		n++
		if ev.progress.Cursor == last {
			break
		}
	}
	if n > 7 {
		t.Fatalf("%d progress events for a 1 s burst", n)
	}
	if d := time.Since(t1); d > time.Second {
		t.Fatalf("last progress %v after the burst", d)
	}
}

func TestStreamOverflowDisconnects(t *testing.T) {
	s := start(t, WithWatcherBuffer(4), WithHeartbeat(time.Hour))
	c := newClient(t)
	r0, _ := s.Publish("a", map[string]any{"k": 0})
	s.Publish("b", map[string]any{"k": 0})
	path := streamURL("", transport.PathStream, pair("a", r0), pair("b", r0))
	fast := ssetest.Open(t, c, s.URL()+path, "")
	conn, err := net.Dial("tcp", s.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := io.WriteString(conn, "GET "+path+" HTTP/1.1\r\nHost: x\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(conn)
	if line, err := br.ReadString('\n'); err != nil || !strings.Contains(line, "200") {
		t.Fatalf("stalled reader: %q %v", line, err)
	}
	testutil.Eventually(t, waitLimit, func() bool { return s.OpenStreams() == 2 }, "2 streams")
	value := strings.Repeat("v", 128<<10)
	var r int64
	deadline := time.Now().Add(30 * time.Second)
	for i := 0; s.OpenStreams() == 2; i++ {
		if time.Now().After(deadline) {
			t.Fatal("stalled reader never disconnected")
		}
		ns := "a"
		if i%2 == 1 {
			ns = "b"
		}
		r, _ = s.Publish(ns, map[string]any{"big": value, "i": i})
		for { // pace by the fast reader
			ev := nextStream(t, fast)
			if ev.change != nil && ev.change.Revision == r {
				break
			}
		}
	}
	// The stalled stream ends (never skips): every id it got is in order
	// and below the head.
	conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	var lastID int64
	for {
		line, err := br.ReadString('\n')
		if err != nil {
			if errors.Is(err, os.ErrDeadlineExceeded) {
				t.Fatal("stalled stream did not end")
			}
			break
		}
		if id, ok := strings.CutPrefix(strings.TrimSpace(line), "id: "); ok {
			n, _ := strconv.ParseInt(id, 10, 64)
			if n < lastID {
				t.Fatalf("id %d after %d", n, lastID)
			}
			lastID = n
		}
	}
	if lastID >= r {
		t.Fatalf("stalled reader's last id %d, head %d", lastID, r)
	}
	r2, _ := s.Publish("b", map[string]any{"after": true})
	for {
		if ev := nextStream(t, fast); ev.change != nil && ev.change.Revision == r2 {
			break
		}
	}
}

func TestStreamEndsOnResetAndDrop(t *testing.T) {
	s := start(t, WithHeartbeat(time.Hour))
	c := newClient(t)
	r0, _ := s.Publish("a", map[string]any{"k": 0})
	st := ssetest.Open(t, c, streamURL(s.URL(), transport.PathStream, pair("a", r0), pair("nothere", 0)), "")
	testutil.Eventually(t, waitLimit, func() bool { return s.OpenStreams() == 1 }, "stream")
	s.DropStreams()
	st.Ended(t)
	// A stream whose every namespace ended still ends with the store.
	st = ssetest.Open(t, c, streamURL(s.URL(), transport.PathStream, pair("nothere", 0)), "")
	testutil.Eventually(t, waitLimit, func() bool { return s.OpenStreams() == 1 }, "stream")
	s.ResetStore()
	st.Ended(t)
	testutil.Eventually(t, waitLimit, func() bool { return s.OpenStreams() == 0 }, "no stream")
}

func pollStream(t *testing.T, c *http.Client, url string) (wire.StreamEventsResponse, time.Duration) {
	t.Helper()
	t0 := time.Now()
	resp, body := do(t, c, http.MethodGet, url, "")
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("poll: %d %s", resp.StatusCode, body)
	}
	return decode[wire.StreamEventsResponse](t, body), time.Since(t0)
}

func TestStreamEventsLongPoll(t *testing.T) {
	s := start(t, WithHeartbeat(5*time.Second))
	c := newClient(t)
	r1, _ := s.Publish("a", map[string]any{"k": 1})
	r2, _ := s.Publish("b", map[string]any{"k": 2})
	s.Compact(r1)
	r3, _ := s.Publish("c", map[string]any{"k": 3})

	// Backlog and ended at once.
	got, _ := pollStream(t, c, streamURL(s.URL(), transport.PathStreamEvents, pair("a", 0), pair("b", r1), pair("BAD", 0), pair("x", 0), pair("c", r3+1))+"&wait=10s")
	if got.Cursor != r3 || got.StoreID != s.StoreID() || len(got.Changes) != 1 || got.Changes[0].Revision != r2 || got.Changes[0].Namespace != "b" {
		t.Fatalf("first poll %+v", got)
	}
	codes := map[string]string{}
	for _, e := range got.Ended {
		codes[e.Namespace] = e.Code
	}
	if fmt.Sprint(codes) != fmt.Sprint(map[string]string{"a": transport.CodeCompacted, "BAD": transport.CodeInvalidNamespace, "x": transport.CodeNotFound, "c": transport.CodeCursorAhead}) {
		t.Fatalf("ended %+v", got.Ended)
	}

	// Behind the head with nothing of its own: answered at once with the head.
	got, d := pollStream(t, c, streamURL(s.URL(), transport.PathStreamEvents, pair("a", r1), pair("b", r2))+"&wait=10s")
	if got.Cursor != r3 || len(got.Changes) != 0 || d > 2*time.Second {
		t.Fatalf("behind: %+v after %v", got, d)
	}

	// held waits until the earlier polls' watchers are gone, then publishes
	// to ns from a goroutine once the next poll is held (it watches b).
	held := func(ns string, k int) {
		t.Helper()
		testutil.Eventually(t, waitLimit, func() bool { return s.Watchers("a")+s.Watchers("b") == 0 }, "the earlier polls done")
		go func() {
			testutil.Wait(waitLimit, func() bool { return s.Watchers("b") > 0 })
			s.Publish(ns, map[string]any{"k": k})
		}()
	}

	// Current: waits; a publish to an unwatched namespace answers within 1 s.
	held("c", 4)
	got, d = pollStream(t, c, streamURL(s.URL(), transport.PathStreamEvents, pair("a", r3), pair("b", r3))+"&wait=10s")
	if got.Cursor != r3+1 || len(got.Changes) != 0 || d > 1100*time.Millisecond {
		t.Fatalf("unwatched publish: %+v after %v", got, d)
	}

	// A change of its own.
	held("b", 5)
	got, _ = pollStream(t, c, streamURL(s.URL(), transport.PathStreamEvents, pair("a", r3+1), pair("b", r3+1))+"&wait=10s")
	if got.Cursor != r3+2 || len(got.Changes) != 1 || got.Changes[0].Namespace != "b" || got.Changes[0].Revision != r3+2 {
		t.Fatalf("own change: %+v", got)
	}

	// Nothing: the wait ends with the head.
	got, d = pollStream(t, c, streamURL(s.URL(), transport.PathStreamEvents, pair("a", r3+2))+"&wait=300ms")
	if got.Cursor != r3+2 || len(got.Changes) != 0 || d < 250*time.Millisecond {
		t.Fatalf("timeout: %+v after %v", got, d)
	}
}

// The long-poll's change JSON is the bytes the SSE stream carries.
func TestStreamEventsSharesEncoding(t *testing.T) {
	s := start(t)
	c := newClient(t)
	r1, _ := s.Publish("a", map[string]any{"k": "line\nbreak", "n": 1})
	resp, body := do(t, c, http.MethodGet, streamURL(s.URL(), transport.PathStreamEvents, pair("a", 0)), "")
	if resp.StatusCode != http.StatusOK {
		t.Fatal(resp.Status)
	}
	var raw struct {
		Changes []json.RawMessage `json:"changes"`
	}
	if err := json.Unmarshal(body, &raw); err != nil || len(raw.Changes) != 1 {
		t.Fatalf("%s %v", body, err)
	}
	st := ssetest.Open(t, c, s.URL()+"/sdk/watch?ns=a&since=0", "")
	ev, _ := st.Next(t)
	if ev.Data != string(raw.Changes[0]) || ev.ID != strconv.FormatInt(r1, 10) {
		t.Fatalf("long-poll %s\nwatch %s", raw.Changes[0], ev.Data)
	}
}

func TestAckBatch(t *testing.T) {
	s := start(t)
	c := newClient(t)
	s.Publish("a", map[string]any{"k": 1})
	s.Publish("b", map[string]any{"k": 1})
	post := func(body string) int {
		resp, data := do(t, c, http.MethodPost, s.URL()+"/sdk/ack", body)
		if resp.StatusCode != http.StatusNoContent && resp.StatusCode != http.StatusBadRequest && resp.StatusCode != http.StatusNotFound {
			t.Fatalf("ack: %d %s", resp.StatusCode, data)
		}
		return resp.StatusCode
	}
	if code := post(`{"client_id":"c1","acks":[{"ns":"a","revision":1,"status":"ack"},{"ns":"b","revision":2,"status":"nack","error":"bad"},{"ns":"gone","revision":2,"status":"ack"},{"client_id":"other","ns":"b","revision":2,"status":"nack","error":"bad"}]}`); code != http.StatusNoContent {
		t.Fatalf("batch: %d", code)
	}
	// With ack-relay an ack that names its own client is that client's
	// (a relay forwarding its clients' reports).
	got := s.Clients()
	if len(got) != 3 || got[0].ClientID != "c1" || got[0].Namespace != "a" || got[0].AckedRevision != 1 ||
		got[1].ClientID != "c1" || got[1].NackedRevision != 2 || got[1].NackError != "bad" ||
		got[2].ClientID != "other" || got[2].NackedRevision != 2 {
		t.Fatalf("clients %+v", got)
	}
	for _, bad := range []string{
		`{"client_id":"c2","acks":[{"ns":"a","revision":1,"status":"ack"},{"ns":"b","revision":1,"status":"maybe"}]}`,
		`{"client_id":"","acks":[{"ns":"a","revision":1,"status":"ack"}]}`,
		`{"client_id":"c2","acks":[{"ns":"a","revision":-1,"status":"ack"}]}`,
		`{"client_id":"c2","acks":[{"ns":"A!","revision":1,"status":"ack"}]}`,
		`{"client_id":"c2","acks":[1]}`,
	} {
		if code := post(bad); code != http.StatusBadRequest {
			t.Fatalf("%s: %d, want 400", bad, code)
		}
	}
	if len(s.Clients()) != 3 {
		t.Fatalf("a refused batch recorded something: %+v", s.Clients())
	}
	if code := post(`{"client_id":"c3","acks":[]}`); code != http.StatusNoContent {
		t.Fatalf("empty batch: %d", code)
	}
	// The single ack as before.
	if code := post(`{"client_id":"c4","ns":"a","revision":1,"status":"ack"}`); code != http.StatusNoContent {
		t.Fatalf("single: %d", code)
	}
	if code := post(`{"client_id":"c4","ns":"gone","revision":1,"status":"ack"}`); code != http.StatusNotFound {
		t.Fatalf("single unknown: %d", code)
	}
}

// h2c: a client that speaks only HTTP/2 with prior knowledge gets its
// stream flushed promptly, and its other requests share the connection.
func TestH2C(t *testing.T) {
	s := start(t, WithHeartbeat(time.Hour))
	var protos http.Protocols
	protos.SetUnencryptedHTTP2(true)
	// One connection at most from this client: net/http hands a new
	// HTTP/2 connection to its request before it puts it in the idle
	// pool, and a request in between dials its own (1 run in 500 under
	// load); the test is of the server, which must serve all on one.
	tr := &http.Transport{Protocols: &protos, MaxConnsPerHost: 1}
	t.Cleanup(tr.CloseIdleConnections)
	c := &http.Client{Transport: tr}
	r0, _ := s.Publish("a", map[string]any{"k": 0})
	before := s.Stats().Conns

	st := ssetest.Open(t, c, streamURL(s.URL(), transport.PathStream, pair("a", r0)), "")
	if st.Resp.ProtoMajor != 2 {
		t.Fatalf("stream over %s", st.Resp.Proto)
	}
	if ev := nextStream(t, st); ev.progress == nil {
		t.Fatalf("first %+v", ev)
	}
	for i := range 5 {
		t0 := time.Now()
		r, _ := s.Publish("a", map[string]any{"k": i + 1})
		ev := nextStream(t, st)
		if ev.change == nil || ev.change.Revision != r {
			t.Fatalf("%+v", ev)
		}
		if d := time.Since(t0); d > time.Second {
			t.Fatalf("change %d flushed after %v", i, d)
		}
		resp, body := do(t, c, http.MethodGet, s.URL()+"/sdk/snapshot?ns=a", "")
		if resp.StatusCode != http.StatusOK || resp.ProtoMajor != 2 {
			t.Fatalf("snapshot: %s %d %s", resp.Proto, resp.StatusCode, body)
		}
		resp, body = do(t, c, http.MethodPost, s.URL()+"/sdk/ack", fmt.Sprintf(`{"client_id":"h2","acks":[{"ns":"a","revision":%d,"status":"ack"}]}`, r))
		if resp.StatusCode != http.StatusNoContent {
			t.Fatalf("ack: %d %s", resp.StatusCode, body)
		}
	}
	if n := s.Stats().Conns - before; n != 1 {
		t.Fatalf("%d connections accepted, want 1", n)
	}
	// HTTP/1.1 still works on the same listener.
	resp, _ := do(t, newClient(t), http.MethodGet, s.URL()+"/sdk/snapshot?ns=a", "")
	if resp.StatusCode != http.StatusOK || resp.ProtoMajor != 1 {
		t.Fatalf("HTTP/1.1: %s %d", resp.Proto, resp.StatusCode)
	}
}

func TestWithoutH2C(t *testing.T) {
	s := start(t, WithoutCapability(transport.CapabilityH2C))
	var protos http.Protocols
	protos.SetUnencryptedHTTP2(true)
	tr := &http.Transport{Protocols: &protos}
	t.Cleanup(tr.CloseIdleConnections)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, s.URL()+"/sdk/snapshot?ns=a", nil)
	if resp, err := tr.RoundTrip(req); err == nil {
		resp.Body.Close()
		t.Fatalf("h2c answered: %s", resp.Proto)
	}
}

// TestAckBatchWithoutRelayKeepsTheBatchsClient: a server that does not
// offer ack-relay records every ack of a batch for the batch's client,
// whatever client an ack names.
func TestAckBatchWithoutRelayKeepsTheBatchsClient(t *testing.T) {
	s := start(t, WithoutCapability(transport.CapabilityAckRelay))
	c := newClient(t)
	s.Publish("a", map[string]any{"k": 1})
	resp, data := do(t, c, http.MethodPost, s.URL()+"/sdk/ack", `{"client_id":"c1","acks":[{"client_id":"other","ns":"a","revision":1,"status":"ack"}]}`)
	if resp.StatusCode != http.StatusNoContent {
		t.Fatalf("ack: %d %s", resp.StatusCode, data)
	}
	if got := s.Clients(); len(got) != 1 || got[0].ClientID != "c1" {
		t.Fatalf("clients %+v, want the batch's c1 only", got)
	}
	if caps := resp.Header.Get(transport.HeaderCapabilities); strings.Contains(caps, transport.CapabilityAckRelay) {
		t.Fatalf("capabilities %q list ack-relay", caps)
	}
}
