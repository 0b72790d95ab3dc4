package fakeserver

import (
	"bufio"
	"errors"
	"io"
	"net"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/holdfast-dev/holdfast/internal/testutil"
	"github.com/holdfast-dev/holdfast/internal/testutil/ssetest"
	"github.com/holdfast-dev/holdfast/transport"
)

func TestWatchIDsAreCursorsAndProgress(t *testing.T) {
	s := start(t, WithHeartbeat(20*time.Millisecond))
	c := newClient(t)
	r1, _ := s.Publish("app", map[string]any{"a": 1})
	st := ssetest.Open(t, c, s.URL()+"/sdk/watch?ns=app&since=0", "")
	if st.Resp.Header.Get("Content-Type") != "text/event-stream" || st.Resp.Header.Get(transport.HeaderStoreID) != s.StoreID() {
		t.Fatalf("headers %v", st.Resp.Header)
	}
	if cs, _ := ssetest.Checked(t, st.MustNext(t)); cs == nil || cs.Revision != r1 || cs.PrevRevision != 0 {
		t.Fatalf("first event %+v", cs)
	}
	if _, p := ssetest.Checked(t, st.MustNext(t)); p == nil || p.Cursor != r1 {
		t.Fatalf("initial progress %+v", p)
	}
	// Publishes to another namespace advance the cursor of quiet streams.
	other, _ := s.Publish("other", map[string]any{"x": 1})
	r3, _ := s.Publish("app", map[string]any{"a": 2})
	other2, _ := s.Publish("other", map[string]any{"x": 2})
	var cursor int64
	sawChange, progresses := false, 0
	for progresses < 3 || cursor < other2 {
		cs, p := ssetest.Checked(t, st.MustNext(t))
		if cs != nil {
			if cs.Revision != r3 || cs.PrevRevision != r1 || sawChange {
				t.Fatalf("change %+v", cs)
			}
			sawChange, cursor = true, cs.Revision
			continue
		}
		if p.Cursor < cursor {
			t.Fatalf("cursor went back from %d to %d", cursor, p.Cursor)
		}
		if p.Cursor >= r3 && !sawChange {
			t.Fatalf("progress to %d before change %d", p.Cursor, r3)
		}
		if p.Cursor >= other && p.Cursor < r3 && p.Revision != r1 || p.Cursor >= r3 && p.Revision != r3 {
			t.Fatalf("progress %+v: wrong namespace revision", p)
		}
		cursor = p.Cursor
		progresses++
	}
}

// readChanges reads events until it has seen change revision upto, checking
// the prev_revision chain from prev, and returns the last event id.
func readChanges(t *testing.T, st *ssetest.Stream, prev, upto int64) {
	t.Helper()
	for prev < upto {
		cs, _ := ssetest.Checked(t, st.MustNext(t))
		if cs == nil {
			continue
		}
		if cs.PrevRevision != prev {
			t.Fatalf("change %d has prev %d, want %d (a gap)", cs.Revision, cs.PrevRevision, prev)
		}
		prev = cs.Revision
	}
}

func TestWatchResumeWithLastEventID(t *testing.T) {
	s := start(t, WithHeartbeat(time.Hour)) // no progress: ids are change ids
	c := newClient(t)
	var revs []int64
	for i := range 5 {
		r, _ := s.Publish("app", map[string]any{"k": i})
		revs = append(revs, r)
	}
	st := ssetest.Open(t, c, s.URL()+"/sdk/watch?ns=app&since=0", "")
	readChanges(t, st, 0, revs[2])
	st.Close()
	for i := range 5 { // published while disconnected, interleaved with another namespace
		s.Publish("other", map[string]any{"x": i})
		r, _ := s.Publish("app", map[string]any{"k": 10 + i})
		revs = append(revs, r)
	}
	// since in the URL is stale; Last-Event-ID wins.
	st = ssetest.Open(t, c, s.URL()+"/sdk/watch?ns=app&since=0", strconv.FormatInt(revs[2], 10))
	cs, _ := ssetest.Checked(t, st.MustNext(t))
	if cs == nil || cs.Revision != revs[3] {
		t.Fatalf("resumed at %+v, want revision %d", cs, revs[3])
	}
	readChanges(t, st, revs[3], revs[len(revs)-1])
	last, _ := s.Publish("app", map[string]any{"live": true})
	readChanges(t, st, revs[len(revs)-1], last)
}

func TestWatchStalledReaderIsDisconnected(t *testing.T) {
	s := start(t, WithWatcherBuffer(4), WithHeartbeat(time.Hour))
	c := newClient(t)
	r0, _ := s.Publish("app", map[string]any{"k": 0})
	url := s.URL() + "/sdk/watch?ns=app&since=" + strconv.FormatInt(r0, 10)
	fast := []*ssetest.Stream{ssetest.Open(t, c, url, ""), ssetest.Open(t, c, url, ""), ssetest.Open(t, c, url, "")}

	// The stalled reader: a raw connection that reads the reply's first
	// bytes and then nothing.
	conn, err := net.Dial("tcp", s.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := io.WriteString(conn, "GET /sdk/watch?ns=app&since="+strconv.FormatInt(r0, 10)+" HTTP/1.1\r\nHost: x\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(conn)
	if line, err := br.ReadString('\n'); err != nil || !strings.Contains(line, "200") {
		t.Fatalf("stalled reader: %q %v", line, err)
	}
	testutil.Eventually(t, waitLimit, func() bool { return s.OpenStreams() == 4 }, "4 streams")

	// Publish big values, paced by the fast readers, until the stalled one
	// overflows (its socket buffers fill first, then its queue).
	value := strings.Repeat("v", 128<<10)
	prev := r0
	deadline := time.Now().Add(30 * time.Second)
	for s.OpenStreams() == 4 {
		if time.Now().After(deadline) {
			t.Fatal("stalled reader never disconnected")
		}
		r, err := s.Publish("app", map[string]any{"big": value, "n": prev})
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range fast {
			readChanges(t, f, prev, r)
		}
		prev = r
	}
	if s.OpenStreams() != 3 {
		t.Fatalf("%d streams open, want the 3 fast ones", s.OpenStreams())
	}
	// The fast readers keep receiving.
	r, _ := s.Publish("app", map[string]any{"after": true})
	for _, f := range fast {
		readChanges(t, f, prev, r)
	}
	// The stalled reader finds its stream ended after what was sent, and
	// resumes from its last id without missing anything.
	var lastID string
	conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	for {
		line, err := br.ReadString('\n')
		if err != nil {
			if errors.Is(err, os.ErrDeadlineExceeded) {
				t.Fatal("stalled stream did not end")
			}
			break
		}
		if id, ok := strings.CutPrefix(strings.TrimSpace(line), "id: "); ok {
			lastID = id
		}
	}
	last, err := strconv.ParseInt(lastID, 10, 64)
	if err != nil || last >= r {
		t.Fatalf("stalled reader's last id %q", lastID)
	}
	resumed := ssetest.Open(t, c, s.URL()+"/sdk/watch?ns=app", lastID)
	readChanges(t, resumed, last, r)
}

func TestBlackhole(t *testing.T) {
	const beat = 20 * time.Millisecond
	s := start(t, WithHeartbeat(beat))
	c := newClient(t)
	r0, _ := s.Publish("app", map[string]any{"k": 0})

	rawGet := func(path string) (net.Conn, *bufio.Reader) {
		conn, err := net.Dial("tcp", s.Addr())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { conn.Close() })
		if _, err := io.WriteString(conn, "GET "+path+" HTTP/1.1\r\nHost: x\r\n\r\n"); err != nil {
			t.Fatal(err)
		}
		return conn, bufio.NewReader(conn)
	}
	silent := func(conn net.Conn, br *bufio.Reader) {
		t.Helper()
		conn.SetReadDeadline(time.Now().Add(10 * beat))
		if n, err := br.Peek(1); !errors.Is(err, os.ErrDeadlineExceeded) {
			t.Fatalf("black hole sent %q (%v)", n, err)
		}
		conn.SetReadDeadline(time.Time{})
	}

	// An open stream, read up to its first progress event.
	streamConn, streamBR := rawGet("/sdk/watch?ns=app&since=" + strconv.FormatInt(r0, 10))
	for {
		line, err := streamBR.ReadString('\n')
		if err != nil {
			t.Fatal(err)
		}
		if strings.HasPrefix(line, "event: progress") {
			break
		}
	}
	for line, _ := streamBR.ReadString('\n'); line != "\n"; line, _ = streamBR.ReadString('\n') {
	}

	s.SetBlackhole(true)
	resp, body := do(t, c, "POST", s.URL()+"/control/faults", `{"blackhole":true}`) // the control API still answers
	if resp.StatusCode != 200 {
		t.Fatalf("%d %s", resp.StatusCode, body)
	}
	// Heartbeats sent before the hole opened may still be in the socket:
	// drain them (SetBlackhole waited for writes in flight), then expect
	// silence.
	streamConn.SetReadDeadline(time.Now().Add(5 * beat))
	for {
		if _, err := streamBR.ReadString('\n'); err != nil {
			break
		}
	}
	streamConn.SetReadDeadline(time.Time{})
	r1, _ := s.Publish("app", map[string]any{"k": 1})
	snapConn, snapBR := rawGet("/sdk/snapshot?ns=app")
	silent(streamConn, streamBR)
	silent(snapConn, snapBR)

	s.SetBlackhole(false)
	if line, err := snapBR.ReadString('\n'); err != nil || !strings.Contains(line, "200") {
		t.Fatalf("snapshot after heal: %q %v", line, err)
	}
	streamConn.SetReadDeadline(time.Now().Add(10 * time.Second))
	for {
		line, err := streamBR.ReadString('\n')
		if err != nil {
			t.Fatalf("stream after heal: %v", err)
		}
		if strings.TrimSpace(line) == "id: "+strconv.FormatInt(r1, 10) {
			break
		}
	}
}

func TestDropStreamsAndReset(t *testing.T) {
	s := start(t, WithHeartbeat(time.Hour))
	c := newClient(t)
	s.Publish("app", map[string]any{"k": 0})
	a := ssetest.Open(t, c, s.URL()+"/sdk/watch?ns=app", "")
	b := ssetest.Open(t, c, s.URL()+"/sdk/watch?ns=app", "")
	testutil.Eventually(t, waitLimit, func() bool { return s.OpenStreams() == 2 }, "2 streams")
	resp, _ := do(t, c, "POST", s.URL()+"/control/faults", `{"drop_streams":true}`)
	if resp.StatusCode != 200 {
		t.Fatal(resp.StatusCode)
	}
	a.Ended(t)
	b.Ended(t)
	testutil.Eventually(t, waitLimit, func() bool { return s.OpenStreams() == 0 }, "no streams")

	a = ssetest.Open(t, c, s.URL()+"/sdk/watch?ns=app", "")
	testutil.Eventually(t, waitLimit, func() bool { return s.OpenStreams() == 1 }, "1 stream")
	s.ResetStore()
	a.Ended(t)
	if st := s.Stats(); st.Watches != 3 {
		t.Fatalf("stats %+v", st)
	}
}

// TestWatchCursorIsHonest checks the meaning of a cursor under concurrent
// publishes to two namespaces, with watchers joining mid-way and frequent
// progress: a change never arrives at or below a cursor already sent, and
// the prev_revision chain has no gap.
func TestWatchCursorIsHonest(t *testing.T) {
	s := start(t, WithHeartbeat(time.Millisecond))
	c := newClient(t)
	s.Publish("a", map[string]any{"n": 0})
	const n = 400
	var lastA int64
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := range n {
			s.Publish("b", map[string]any{"n": i})
			lastA, _ = s.Publish("a", map[string]any{"n": i})
		}
	}()
	// Join while publishes are in flight, from the start and from the head.
	var streams []*ssetest.Stream
	for i := range 8 {
		testutil.Eventually(t, waitLimit, func() bool { return s.Head() >= int64(i*2*n/10) }, "publishes")
		streams = append(streams, ssetest.Open(t, c, s.URL()+"/sdk/watch?ns=a&since=1", ""))
	}
	<-done
	for _, st := range streams {
		var cursor int64 = 1
		prev := int64(1)
		for prev < lastA {
			cs, p := ssetest.Checked(t, st.MustNext(t))
			if p != nil {
				if p.Cursor < cursor {
					t.Fatalf("progress cursor went back from %d to %d", cursor, p.Cursor)
				}
				if p.Revision != prev || p.Cursor >= lastA {
					t.Fatalf("progress to cursor %d says namespace revision %d; last change was %d of %d", p.Cursor, p.Revision, prev, lastA)
				}
				cursor = p.Cursor
				continue
			}
			if cs.Revision <= cursor || cs.PrevRevision != prev {
				t.Fatalf("change %d (prev %d) after cursor %d and change %d", cs.Revision, cs.PrevRevision, cursor, prev)
			}
			prev, cursor = cs.Revision, cs.Revision
		}
	}
}
