package relay_test

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/holdfast-dev/holdfast/config"
	"github.com/holdfast-dev/holdfast/holdfasttest"
	"github.com/holdfast-dev/holdfast/internal/testutil"
	"github.com/holdfast-dev/holdfast/internal/wire"
	"github.com/holdfast-dev/holdfast/relay"
	"github.com/holdfast-dev/holdfast/transport"
)

// TestRelayOneUpstreamStream: however many clients and namespaces behind
// it, the relay holds one stream to the origin; every client gets every
// revision, and the origin counts each client behind the relay.
func TestRelayOneUpstreamStream(t *testing.T) {
	origin := holdfasttest.NewServer(t, holdfasttest.WithHeartbeat(200*time.Millisecond))
	names := []string{"n0", "n1", "n2"}
	for _, n := range names {
		mustPublish(t, origin, n, map[string]any{"v": 0})
	}
	_, url := startRelay(t, origin.URL())
	const clients = 8
	nss := make([][]*config.Namespace, clients)
	cs := make([]*config.Client, clients)
	for i := range cs {
		cs[i] = newClient(t, url)
		for _, n := range names {
			nss[i] = append(nss[i], openNamespace(t, cs[i], n))
		}
	}
	var last int64
	for round := 1; round <= 3; round++ {
		for _, n := range names {
			last = mustPublish(t, origin, n, map[string]any{"v": round})
		}
	}
	for i := range nss {
		for j, ns := range nss[i] {
			testutil.Eventually(t, waitLimit, func() bool { return valueOf(ns, "v") == "3" }, "every client at v=3")
			if ns.Status().Revision > last {
				t.Fatalf("client %d ns %s at revision %d past the head %d", i, names[j], ns.Status().Revision, last)
			}
		}
	}
	testutil.Eventually(t, waitLimit, func() bool { return origin.OpenStreams() == 1 }, "one stream at the origin")
	// Joins restart the stream (debounced): one per namespace at most.
	if got := origin.Stats().Streams; got > int64(len(names)) {
		t.Errorf("the relay opened %d streams to the origin, want at most %d", got, len(names))
	}
	testutil.Eventually(t, waitLimit, func() bool {
		st, err := origin.Status("n0")
		return err == nil && st.Clients == clients && st.Acked == clients && st.Streams == 1
	}, "the origin counts every client behind the relay, and one stream")
}

// TestRelayLingersThenLetsGo: a namespace a client carries is followed;
// once nobody asks for it any more it is followed for the linger time,
// then dropped (no upstream subscription); a namespace of WithNamespaces
// stays.
func TestRelayLingersThenLetsGo(t *testing.T) {
	origin := holdfasttest.NewServer(t)
	mustPublish(t, origin, "pinned", map[string]any{"v": 1})
	mustPublish(t, origin, "passing", map[string]any{"v": 1})
	r, url := startRelay(t, origin.URL(), relay.WithNamespaces("pinned"), relay.WithLinger(200*time.Millisecond))
	followed := func() string {
		var out []string
		for _, st := range r.Namespaces() {
			out = append(out, st.Namespace)
		}
		return strings.Join(out, ",")
	}
	// A client's stream carries passing: no linger runs while it is open
	// (a snapshot alone could be past its 200 ms by the next line, under
	// load).
	c := newClient(t, url)
	openNamespace(t, c, "passing")
	testutil.Eventually(t, waitLimit, func() bool {
		for _, st := range r.Namespaces() {
			if st.Namespace == "passing" && st.Streams > 0 {
				return true
			}
		}
		return false
	}, "the client's stream carrying passing")
	if got := followed(); got != "passing,pinned" {
		t.Fatalf("followed %q", got)
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, waitLimit, func() bool { return followed() == "pinned" }, "passing dropped after the linger")
	// Asked again: followed again.
	if status, _, snap := getSnapshot(t, url, "passing"); status != http.StatusOK || snap.Revision == 0 {
		t.Fatalf("passing again: %d %+v", status, snap)
	}
}

// TestRelaySnapshotAdmission: past WithMaxSnapshotsInFlight a snapshot
// request gets 503 with a Retry-After within the window; a 304 is never
// refused.
func TestRelaySnapshotAdmission(t *testing.T) {
	origin := holdfasttest.NewServer(t)
	big := strings.Repeat("x", 8<<20) // larger than the socket buffers: a reader that does not read holds its slot
	rev := mustPublish(t, origin, "big", map[string]any{"blob": big})
	r, url := startRelay(t, origin.URL(), relay.WithMaxSnapshotsInFlight(1, 5*time.Second))
	// The relay follows big first: until it has it, a request gets a
	// short 503 of its own, and holds no slot.
	// 8 MiB through the relay: slow under -race.
	testutil.Eventually(t, 6*waitLimit, func() bool {
		status, _, _ := getSnapshot(t, url, "big")
		return status == http.StatusOK
	}, "the relay serving big")
	// A reader that does not read holds the slot until it has made no
	// progress for a second (then it stops counting): a request right
	// behind it is refused. Each try opens a new one.
	var resp *http.Response
	testutil.Eventually(t, waitLimit, func() bool {
		conn, err := net.Dial("tcp", strings.TrimPrefix(url, "http://"))
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		if _, err := conn.Write([]byte("GET " + transport.PathSnapshot + "?ns=big HTTP/1.1\r\nHost: x\r\n\r\n")); err != nil {
			t.Fatal(err)
		}
		if _, err := bufio.NewReader(conn).Peek(1); err != nil { // its reply has begun: it holds the slot
			t.Fatal(err)
		}
		resp, err = http.Get(url + transport.PathSnapshot + "?ns=big")
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode == http.StatusServiceUnavailable
	}, "a 503 while the slot is held")
	secs, err := strconv.Atoi(resp.Header.Get("Retry-After"))
	if err != nil || secs < 1 || secs > 5 {
		t.Errorf("Retry-After %q, want 1..5", resp.Header.Get("Retry-After"))
	}
	if r.Stats().Shed == 0 {
		t.Error("Stats.Shed is 0")
	}
	// A conditional request for what the client has costs nothing: 304.
	req, _ := http.NewRequest(http.MethodGet, url+transport.PathSnapshot+"?ns=big", nil)
	req.Header.Set("If-None-Match", wire.ETag(origin.StoreID(), rev))
	resp, err = http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNotModified {
		t.Errorf("conditional snapshot while shedding: %d, want 304", resp.StatusCode)
	}
}

// TestRelayCutsASlowClient: a downstream reader that stops reading is cut
// off once its queue overflows; a fast client behind the same relay gets
// every change meanwhile.
func TestRelayCutsASlowClient(t *testing.T) {
	origin := holdfasttest.NewServer(t)
	mustPublish(t, origin, "app", map[string]any{"v": 0})
	r, url := startRelay(t, origin.URL())
	fast := openNamespace(t, newClient(t, url), "app")

	slow, err := net.Dial("tcp", strings.TrimPrefix(url, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer slow.Close()
	if _, err := slow.Write([]byte("GET " + transport.PathWatch + "?ns=app HTTP/1.1\r\nHost: x\r\n\r\n")); err != nil {
		t.Fatal(err)
	}
	if _, err := bufio.NewReader(slow).Peek(1); err != nil { // its reply began; it reads no more
		t.Fatal(err)
	}
	testutil.Eventually(t, waitLimit, func() bool { return r.Stats().OpenStreams == 2 }, "both streams open")

	pad := strings.Repeat("p", 16<<10)
	var last int64
	for i := 1; i <= 2500; i++ { // past the socket buffers, then past the queue of 1024 per watcher
		last = mustPublish(t, origin, "app", map[string]any{"v": i, "pad": pad})
	}
	// Cut by its queue's overflow, or at worst by the write timeout
	// (10 s): slow under -race and load, so a longer deadline.
	start := time.Now()
	testutil.Eventually(t, 30*time.Second, func() bool { return fast.Status().Revision == last }, "the fast client at the last change")
	t.Logf("fast done after %v", time.Since(start))
	testutil.Eventually(t, 30*time.Second, func() bool { return r.Stats().OpenStreams == 1 }, "the slow one cut off")
	t.Logf("slow cut after %v", time.Since(start))
}

// TestRelayClosesItsUpstreamStreamWhenIdle: once the last namespace
// lingered out, the relay holds no stream to the origin.
func TestRelayClosesItsUpstreamStreamWhenIdle(t *testing.T) {
	origin := holdfasttest.NewServer(t)
	mustPublish(t, origin, "app", map[string]any{"v": 1})
	r, url := startRelay(t, origin.URL(), relay.WithLinger(100*time.Millisecond))
	ns := openNamespace(t, newClient(t, url), "app")
	testutil.Eventually(t, waitLimit, func() bool { return origin.OpenStreams() == 1 }, "the relay's stream at the origin")
	// The client leaves; nobody asks for app any more.
	if err := ns.Close(); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, waitLimit, func() bool { return len(r.Namespaces()) == 0 }, "no namespace followed")
	testutil.Eventually(t, waitLimit, func() bool { return origin.OpenStreams() == 0 }, "no stream at the origin")
}

// TestWaitForRevisionThroughARelay: a publish to a namespace neither the
// client nor its relay follows still advances the client's Revision
// within a second (the origin's prompt progress, passed on), although
// the heartbeat is 5 s.
func TestWaitForRevisionThroughARelay(t *testing.T) {
	origin := holdfasttest.NewServer(t, holdfasttest.WithHeartbeat(5*time.Second))
	mustPublish(t, origin, "watched", map[string]any{"v": 1})
	mustPublish(t, origin, "elsewhere", map[string]any{"v": 1})
	src, err := transport.NewHTTPSource(origin.URL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = src.Close() })
	_, url := startRelay(t, "", withSource(src), relay.WithHeartbeat(5*time.Second))
	c := newClient(t, url)
	openNamespace(t, c, "watched")
	testutil.Eventually(t, waitLimit, func() bool { return c.Revision() >= origin.Head() }, "the client's revision at the head")
	rev := mustPublish(t, origin, "elsewhere", map[string]any{"v": 2})
	start := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	if err := c.WaitForRevision(ctx, rev); err != nil {
		t.Fatalf("WaitForRevision(%d): %v (at %d)", rev, err, c.Revision())
	}
	if d := time.Since(start); d > time.Second {
		t.Errorf("WaitForRevision took %v through the relay, want under 1s", d)
	}
}

// TestRevisionFollowsChangesThroughARelay: a relay sends a client of one
// namespace each change without a progress after it; the change alone
// moves the client's cursor and Revision to its revision, promptly (the
// heartbeats are 5 s), and the client stays Fresh.
func TestRevisionFollowsChangesThroughARelay(t *testing.T) {
	origin := holdfasttest.NewServer(t, holdfasttest.WithHeartbeat(5*time.Second))
	mustPublish(t, origin, "watched", map[string]any{"v": 0})
	_, url := startRelay(t, origin.URL(), relay.WithHeartbeat(5*time.Second))
	c := newClient(t, url)
	ns := openNamespace(t, c, "watched")
	for i := 1; i <= 3; i++ {
		rev := mustPublish(t, origin, "watched", map[string]any{"v": i})
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		err := c.WaitForRevision(ctx, rev)
		cancel()
		if err != nil {
			t.Fatalf("WaitForRevision(%d): %v (at %d)", rev, err, c.Revision())
		}
		if st := ns.Status(); st.State != config.StateFresh || st.Revision != rev || st.Cursor != rev {
			t.Fatalf("after publish %d at revision %d: %v", i, rev, st)
		}
	}
}

// TestClientBehindTwoRelaysLearnsTheAgeOfAResnapshot: a relay upstream (a
// Follower fed by hand) resnapshotted from its own upstream, which
// confirmed the data 30 s ago: it serves the difference as a change and
// dates the data 30 s back. Its stream of one namespace to the relay
// below must tell that age with the change (a change alone is dated at
// its receipt), and the client behind both, MaxStaleness 10 s, must see
// its data 30 s old, not Fresh.
func TestClientBehindTwoRelaysLearnsTheAgeOfAResnapshot(t *testing.T) {
	f, upper := handFedUpstream(t, time.Hour)
	f.Apply("app", "st", 1, 1, map[string]json.RawMessage{"a": json.RawMessage(`1`)}, nil, 0, false)
	_, url := startRelay(t, "http://"+upper.Addr())
	c := newClient(t, url)
	ns := openNamespace(t, c, "app", config.MaxStaleness(10*time.Second), config.FailOpen())
	testutil.Eventually(t, waitLimit, func() bool { st := ns.Status(); return st.State == config.StateFresh && st.Revision == 1 }, "Fresh at 1")
	testutil.Eventually(t, waitLimit, func() bool { return upper.Watchers("app") == 1 }, "the relay's stream from the upper one")

	f.Apply("app", "st", 2, 2, map[string]json.RawMessage{"a": json.RawMessage(`2`)}, nil, 30*time.Second, false)
	testutil.Eventually(t, 5*time.Second, func() bool {
		st := ns.Status()
		return st.Revision == 2 && st.State == config.StateBreached && st.Staleness >= 30*time.Second
	}, "Breached at 2, 30 s old")
}
