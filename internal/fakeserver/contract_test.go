package fakeserver

// Tests of the protocol's contract (docs/PROTOCOL.md): the first group
// reproduces bugs that were fixed, the rest pin behaviours that had no
// test of their own.

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/holdfast-dev/holdfast/internal/testutil"
	"github.com/holdfast-dev/holdfast/internal/testutil/ssetest"
	"github.com/holdfast-dev/holdfast/internal/wire"
	"github.com/holdfast-dev/holdfast/transport"
)

// rawRequest writes one raw HTTP/1.1 request on a new connection and
// returns it with a reader, so that a test can observe "nothing at all".
func rawRequest(t *testing.T, addr, method, path string) (net.Conn, *bufio.Reader) {
	t.Helper()
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	if _, err := io.WriteString(conn, method+" "+path+" HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	return conn, bufio.NewReader(conn)
}

// BUG (control.go handleFaults: `f.Status < 400 || f.Status > 599` is
// checked even when count is 0): PROTOCOL.md says "fail ... (400–599; N = 0
// clears)", but {"fail":{"count":0}} — the natural way to clear pending
// failures — is refused with 400 and the pending failures stay armed.
func TestFaultsClearWithCountZero(t *testing.T) {
	s := start(t)
	c := newClient(t)
	s.Publish("app", map[string]any{"a": 1})
	s.FailNext(5, http.StatusServiceUnavailable, 0)
	resp, body := do(t, c, "POST", s.URL()+"/control/faults", `{"fail":{"count":0}}`)
	if resp.StatusCode != 200 {
		t.Fatalf(`clearing with {"fail":{"count":0}}: %d %s; want 200`, resp.StatusCode, body)
	}
	if resp, _ := do(t, c, "GET", s.URL()+"/sdk/snapshot?ns=app", ""); resp.StatusCode != 200 {
		t.Fatalf("snapshot after clearing: %d, want 200", resp.StatusCode)
	}
}

// BUG (sdk.go acceptsGzip): the first matching entry decides, so
// "Accept-Encoding: *, gzip;q=0" gets a gzipped snapshot although the client
// explicitly refused gzip (RFC 9110 §12.5.3: an explicit coding's q wins
// over "*"; PROTOCOL.md: gzip "when Accept-Encoding allows gzip (or *,
// unless q=0)"). Parameters before q (gzip;x=1;q=0) are likewise missed.
func TestAcceptEncodingExplicitRefusalWins(t *testing.T) {
	s := start(t)
	c := newClient(t)
	s.Publish("app", map[string]any{"a": 1})
	for _, ae := range []string{"*, gzip;q=0", "gzip;x=1;q=0", "GZIP;Q=0"} {
		resp, body := do(t, c, "GET", s.URL()+"/sdk/snapshot?ns=app", "", "Accept-Encoding", ae)
		if resp.StatusCode != 200 {
			t.Fatalf("%q: %d %s", ae, resp.StatusCode, body)
		}
		if ce := resp.Header.Get("Content-Encoding"); ce != "" {
			t.Errorf("Accept-Encoding %q refuses gzip, got Content-Encoding %q", ae, ce)
		}
	}
}

// BUG (control.go routes: the per-path 405 fallback, and "/" for unknown
// /sdk/ paths, bypass gate): while the data plane is black-holed the server
// must "accept requests and then send nothing at all", but a data-plane
// request with another method is answered at once (405, with the
// Holdfast-* headers, and without the bearer token check).
func TestBlackholeAnswersWrongMethod(t *testing.T) {
	s := start(t)
	s.Publish("app", map[string]any{"a": 1})
	s.SetBlackhole(true)
	conn, br := rawRequest(t, s.Addr(), "POST", "/sdk/snapshot?ns=app")
	conn.SetReadDeadline(time.Now().Add(300 * time.Millisecond))
	if line, err := br.ReadString('\n'); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("black hole answered a data-plane request: %q (%v)", line, err)
	}
}

// ---- guards ----------------------------------------------------------------

// A publish that fails the schema gets 422 with every failure, commits
// nothing, and reaches no stream; a rollback to content that fails it too.
func TestSchema422EveryFailure(t *testing.T) {
	s := start(t, WithHeartbeat(time.Hour))
	c := newClient(t)
	u := s.URL()
	s.Publish("app", map[string]any{"a": 1, "b": "x"})
	rBad, _ := s.Publish("app", map[string]any{"a": "not a number"}) // valid before the schema
	s.Publish("app", map[string]any{"a": 2})
	resp, body := do(t, c, "PUT", u+"/control/namespaces/app/schema",
		`{"type":"object","properties":{"a":{"type":"integer"},"b":{"type":"string"}},"required":["a","c"]}`)
	if resp.StatusCode != 204 {
		t.Fatalf("schema: %d %s", resp.StatusCode, body)
	}
	// Fix "c" so that only the publish's own failures count.
	if _, err := s.Publish("app", map[string]any{"c": true}); err != nil {
		t.Fatal(err)
	}
	head := s.Head()
	st := ssetest.Open(t, c, u+"/sdk/watch?ns=app&since="+strconv.FormatInt(head, 10), "")
	if _, p := ssetest.Checked(t, st.MustNext(t)); p == nil || p.Cursor != head {
		t.Fatalf("initial progress %+v", p)
	}
	resp, body = do(t, c, "POST", u+"/control/namespaces/app/publish", `{"puts":{"a":"x","b":7},"deletes":["c"]}`)
	eb := decode[transport.ErrorBody](t, body)
	if resp.StatusCode != 422 || eb.Error != transport.CodeSchemaViolation || len(eb.Details) != 3 {
		t.Fatalf("publish failing 3 ways: %d %s; want 422 with 3 details", resp.StatusCode, body)
	}
	resp, body = do(t, c, "POST", u+"/control/namespaces/app/rollback", `{"to_revision":`+strconv.FormatInt(rBad, 10)+`}`)
	if eb := decode[transport.ErrorBody](t, body); resp.StatusCode != 422 || eb.Error != transport.CodeSchemaViolation || len(eb.Details) == 0 {
		t.Fatalf("rollback to invalid content: %d %s", resp.StatusCode, body)
	}
	if s.Head() != head {
		t.Fatalf("a refused publish moved the head from %d to %d", head, s.Head())
	}
	// The stream sees the next good publish as the very next change.
	good, _ := s.Publish("app", map[string]any{"a": 3})
	for {
		cs, _ := ssetest.Checked(t, st.MustNext(t))
		if cs == nil {
			continue
		}
		if cs.Revision != good {
			t.Fatalf("stream got change %d, want %d (a refused publish leaked?)", cs.Revision, good)
		}
		break
	}
}

// Rollback: to a compacted revision is 410 with the compaction point; to
// exactly the compaction point restores that content as a new revision.
func TestRollbackAndCompaction(t *testing.T) {
	s := start(t)
	c := newClient(t)
	u := s.URL()
	r1, _ := s.Publish("app", map[string]any{"a": 1, "gone": true})
	r2, _ := s.Publish("app", map[string]any{"a": 2}, "gone")
	s.Publish("app", map[string]any{"a": 3, "new": 1})
	if _, err := s.Compact(r2); err != nil {
		t.Fatal(err)
	}
	resp, body := do(t, c, "POST", u+"/control/namespaces/app/rollback", `{"to_revision":`+strconv.FormatInt(r1, 10)+`}`)
	if eb := decode[transport.ErrorBody](t, body); resp.StatusCode != 410 || eb.Error != transport.CodeCompacted || eb.CompactRevision != r2 {
		t.Fatalf("rollback below compaction: %d %s", resp.StatusCode, body)
	}
	resp, body = do(t, c, "POST", u+"/control/namespaces/app/rollback", `{"to_revision":`+strconv.FormatInt(r2, 10)+`}`)
	if resp.StatusCode != 200 {
		t.Fatalf("rollback to the compaction point: %d %s", resp.StatusCode, body)
	}
	rb := decode[struct {
		Revision int64 `json:"revision"`
	}](t, body)
	snap, err := s.Snapshot("app")
	if err != nil {
		t.Fatal(err)
	}
	if snap.Revision != rb.Revision || len(valuesOf(t, *snap)) != 1 || string(valuesOf(t, *snap)["a"]) != "2" {
		t.Fatalf("after rollback to %d: %+v", r2, snap)
	}
}

// Watch and events: a cursor above the head is 400 cursor_ahead naming the
// store, and one below the compaction point is 410, both as JSON before any
// stream starts; after a store reset the old ETag no longer matches even at
// the same revision number, and an old cursor above the new head is 400
// cursor_ahead naming the new store (resnapshot).
func TestCursorErrorsAndETagAfterReset(t *testing.T) {
	s := start(t)
	c := newClient(t)
	u := s.URL()
	for i := range 4 {
		s.Publish("app", map[string]any{"a": i})
	}
	k, _ := s.Compact(2)
	oldID, head := s.StoreID(), s.Head()
	oldTag := wire.ETag(oldID, head)
	for _, path := range []string{"/sdk/watch", "/sdk/events"} {
		resp, body := do(t, c, "GET", u+path+"?ns=app&since="+strconv.FormatInt(k-1, 10), "")
		if eb := decode[transport.ErrorBody](t, body); resp.StatusCode != 410 || eb.CompactRevision != k ||
			!strings.HasPrefix(resp.Header.Get("Content-Type"), "application/json") {
			t.Fatalf("%s below compaction: %d %s", path, resp.StatusCode, body)
		}
		resp, body = do(t, c, "GET", u+path+"?ns=app&since="+strconv.FormatInt(head+1, 10), "")
		if eb := decode[transport.ErrorBody](t, body); resp.StatusCode != 400 || eb.Error != transport.CodeCursorAhead ||
			eb.StoreID != oldID || resp.Header.Get(transport.HeaderStoreID) != oldID {
			t.Fatalf("%s above head: %d %v %s", path, resp.StatusCode, resp.Header, body)
		}
	}

	s.ResetStore()
	for i := range 4 { // the same revision numbers again
		s.Publish("app", map[string]any{"a": 10 + i})
	}
	resp, body := do(t, c, "GET", u+"/sdk/snapshot?ns=app", "", "If-None-Match", oldTag)
	if resp.StatusCode != 200 || resp.Header.Get(transport.HeaderStoreID) == oldID {
		t.Fatalf("old store's ETag after reset: %d %v", resp.StatusCode, resp.Header)
	}
	if snap := decode[transport.Snapshot](t, body); snap.StoreID == oldID || snap.Revision != head || string(valuesOf(t, snap)["a"]) != "13" {
		t.Fatalf("snapshot after reset %s", body)
	}
	resp, body = do(t, c, "GET", u+"/sdk/watch?ns=app&since="+strconv.FormatInt(head+5, 10), "")
	if eb := decode[transport.ErrorBody](t, body); resp.StatusCode != 400 || eb.Error != transport.CodeCursorAhead ||
		eb.StoreID != s.StoreID() || eb.StoreID == oldID {
		t.Fatalf("old cursor above the new head: %d %s", resp.StatusCode, body)
	}
}

// The reference server and the HTTP source agree on what an error means: a
// cursor above the head is ErrCursorAhead naming the server's store, an
// unknown namespace is ErrNotFound, and a wrong base path on a holdfast
// server is ErrNotHoldfast, not "no such namespace".
func TestClientReadsServerErrors(t *testing.T) {
	s := start(t, WithHeartbeat(time.Hour))
	rev, _ := s.Publish("app", map[string]any{"a": 1})
	src, err := transport.NewHTTPSource(s.URL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { src.Close() })
	lp, err := transport.NewHTTPSource(s.URL(), transport.WithWatchMode(transport.WatchLongPoll))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { lp.Close() })
	ctx := context.Background()
	nop := func(transport.Event) error { return nil }

	for name, src := range map[string]*transport.HTTPSource{"sse": src, "long-poll": lp} {
		err := src.Watch(ctx, transport.WatchRequest{Namespace: "app", Since: rev + 10}, nop)
		var se *transport.StatusError
		if !errors.Is(err, transport.ErrCursorAhead) || !errors.As(err, &se) || se.StoreID != s.StoreID() || transport.Retryable(err) {
			t.Errorf("%s above the head: %#v, want ErrCursorAhead naming %s, not retryable", name, err, s.StoreID())
		}
		err = src.Watch(ctx, transport.WatchRequest{Namespace: "nope"}, nop)
		if !errors.Is(err, transport.ErrNotFound) || errors.Is(err, transport.ErrNotHoldfast) {
			t.Errorf("%s of an unknown namespace: %v, want ErrNotFound", name, err)
		}
	}
	if _, err := src.Snapshot(ctx, transport.SnapshotRequest{Namespace: "nope"}); !errors.Is(err, transport.ErrNotFound) {
		t.Errorf("snapshot of an unknown namespace: %v, want ErrNotFound", err)
	}

	wrong, err := transport.NewHTTPSource(s.URL() + "/holdfast")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { wrong.Close() })
	if _, err := wrong.Snapshot(ctx, transport.SnapshotRequest{Namespace: "app"}); !errors.Is(err, transport.ErrNotHoldfast) || errors.Is(err, transport.ErrNotFound) {
		t.Errorf("snapshot under a wrong base path: %v, want ErrNotHoldfast", err)
	}
	if err := wrong.Watch(ctx, transport.WatchRequest{Namespace: "app"}, nop); !errors.Is(err, transport.ErrNotHoldfast) {
		t.Errorf("watch under a wrong base path: %v, want ErrNotHoldfast", err)
	}
}

// Compaction by retention while a watch is open and while one resumes: the
// open stream's chain has no gap, a resume from a cursor still kept works,
// and one from a cursor just below the retention window is 410.
func TestRetentionRacesWatch(t *testing.T) {
	const keep = 3
	s := start(t, WithRetention(keep), WithHeartbeat(time.Hour))
	c := newClient(t)
	r0, _ := s.Publish("app", map[string]any{"k": 0})
	st := ssetest.Open(t, c, s.URL()+"/sdk/watch?ns=app&since="+strconv.FormatInt(r0, 10), "")
	var last int64
	for i := range 50 {
		s.Publish("other", map[string]any{"x": i})
		last, _ = s.Publish("app", map[string]any{"k": i + 1})
	}
	readChanges(t, st, r0, last)
	if s.CompactRevision() != s.Head()-keep {
		t.Fatalf("compact %d, head %d", s.CompactRevision(), s.Head())
	}
	ok := ssetest.Open(t, c, s.URL()+"/sdk/watch?ns=app", strconv.FormatInt(s.CompactRevision(), 10))
	if cs, p := ssetest.Checked(t, ok.MustNext(t)); cs == nil && (p == nil || p.Cursor != s.Head()) {
		t.Fatalf("resume at the compaction point: %+v %+v", cs, p)
	}
	resp, body := do(t, c, "GET", s.URL()+"/sdk/watch?ns=app&since="+strconv.FormatInt(s.CompactRevision()-1, 10), "")
	if resp.StatusCode != 410 {
		t.Fatalf("resume below the retention window: %d %s", resp.StatusCode, body)
	}
}

// Stop and Restart on the same address: a client resuming by Last-Event-ID
// gets every change published while the server was down, exactly once.
func TestRestartResumeMissesNothing(t *testing.T) {
	s := start(t, WithHeartbeat(time.Hour))
	c := newClient(t)
	r0, _ := s.Publish("app", map[string]any{"k": 0})
	st := ssetest.Open(t, c, s.URL()+"/sdk/watch?ns=app&since=0", "")
	readChanges(t, st, 0, r0)
	if err := s.Stop(); err != nil {
		t.Fatal(err)
	}
	st.Ended(t)
	var last int64
	for i := range 5 {
		s.Publish("other", map[string]any{"x": i})
		last, _ = s.Publish("app", map[string]any{"k": i + 1})
	}
	if err := s.Restart(); err != nil {
		t.Fatal(err)
	}
	st = ssetest.Open(t, c, s.URL()+"/sdk/watch?ns=app", strconv.FormatInt(r0, 10))
	seen := map[int64]bool{}
	prev := r0
	for prev < last {
		cs, _ := ssetest.Checked(t, st.MustNext(t))
		if cs == nil {
			continue
		}
		if seen[cs.Revision] || cs.PrevRevision != prev {
			t.Fatalf("change %d (prev %d) after %d", cs.Revision, cs.PrevRevision, prev)
		}
		seen[cs.Revision], prev = true, cs.Revision
	}
}

// A held long-poll woken by a change while black-holed sends nothing, and
// answers after the heal with that change and a cursor that covers it.
func TestBlackholeLongPoll(t *testing.T) {
	s := start(t)
	r0, _ := s.Publish("app", map[string]any{"k": 0})
	conn, br := rawRequest(t, s.Addr(), "GET", "/sdk/events?ns=app&wait=10s&since="+strconv.FormatInt(r0, 10))
	testutil.Eventually(t, waitLimit, func() bool { return s.Watchers("app") > 0 }, "a held long-poll")
	s.SetBlackhole(true)
	r1, _ := s.Publish("app", map[string]any{"k": 1})
	conn.SetReadDeadline(time.Now().Add(300 * time.Millisecond))
	if b, err := br.Peek(1); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("black-holed long-poll sent %q (%v)", b, err)
	}
	conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	s.SetBlackhole(false)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var er transport.EventsResponse
	if err := json.NewDecoder(resp.Body).Decode(&er); err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != 200 || len(er.Changes) != 1 || er.Changes[0].Revision != r1 || er.Cursor < r1 {
		t.Fatalf("after heal: %d %+v", resp.StatusCode, er)
	}
}

// Oversized schema bodies are 413 too, and change nothing.
func TestSchemaBodyTooLarge(t *testing.T) {
	s := start(t, WithMaxPublishBytes(256))
	c := newClient(t)
	big := `{"type":"object","description":"` + strings.Repeat("d", 1024) + `"}`
	resp, body := do(t, c, "PUT", s.URL()+"/control/namespaces/app/schema", big)
	if eb := decode[transport.ErrorBody](t, body); resp.StatusCode != 413 || eb.Error != transport.CodeTooLarge {
		t.Fatalf("big schema: %d %s", resp.StatusCode, body)
	}
	if _, ok := s.store.NsRevision("app"); ok {
		t.Fatal("a refused schema created the namespace")
	}
	// net/http lingers 500 ms on a connection whose body limit was hit
	// (closeWriteAndWait); wait it out so that goleak sees nothing.
	testutil.Eventually(t, waitLimit, func() bool {
		buf := make([]byte, 1<<20)
		return !strings.Contains(string(buf[:runtime.Stack(buf, true)]), "closeWriteAndWait")
	}, "the refused connection to close")
}
