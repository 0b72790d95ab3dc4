package relay_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/holdfast-dev/holdfast/config"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/holdfast-dev/holdfast/holdfasttest"
	"github.com/holdfast-dev/holdfast/internal/testutil"
	"github.com/holdfast-dev/holdfast/relay"
	"github.com/holdfast-dev/holdfast/transport"
)

// slowUpstream serves one namespace at revision 1. Its snapshot waits for
// snapshotGate (when set); its watch sends nothing and, once its context
// ends, says so on canceled and (when set) waits for watchGate before it
// returns, as a slow connection's teardown would.
type slowUpstream struct {
	snapshotGate chan struct{}
	watchGate    chan struct{}
	mu           sync.Mutex
	snapshots    int
	canceled     chan struct{} // closed at the first end of a snapshot or watch's context
	once         sync.Once
}

func newSlowUpstream() *slowUpstream { return &slowUpstream{canceled: make(chan struct{})} }

func (u *slowUpstream) cancel() { u.once.Do(func() { close(u.canceled) }) }

func (u *slowUpstream) Snapshot(ctx context.Context, req transport.SnapshotRequest) (*transport.Snapshot, error) {
	u.mu.Lock()
	u.snapshots++
	u.mu.Unlock()
	if u.snapshotGate != nil {
		select {
		case <-u.snapshotGate:
		case <-ctx.Done():
			u.cancel()
			return nil, ctx.Err()
		}
	}
	snap := &transport.Snapshot{Namespace: req.Namespace, StoreID: "s1", Revision: 1, Cursor: 1, Values: json.RawMessage(`{"k":1}`)}
	if req.KnownStoreID == "s1" && req.KnownRevision == 1 {
		return &transport.Snapshot{Namespace: req.Namespace, StoreID: "s1", Revision: 1, Cursor: 1}, transport.ErrNotModified
	}
	return snap, nil
}

func (u *slowUpstream) Watch(ctx context.Context, req transport.WatchRequest, handle func(transport.Event) error) error {
	<-ctx.Done()
	u.cancel()
	if u.watchGate != nil {
		<-u.watchGate
	}
	return ctx.Err()
}

// A request that waits for a namespace's first data keeps the namespace
// followed, however short the linger: the janitor must not drop what a
// request is waiting for.
func TestRelayKeepsANamespaceARequestWaitsFor(t *testing.T) {
	up := newSlowUpstream()
	up.snapshotGate = make(chan struct{})
	_, url := startRelay(t, "", withSource(up), relay.WithLinger(50*time.Millisecond))
	type result struct {
		status int
		err    error
	}
	got := make(chan result, 1)
	go func() {
		resp, err := http.Get(url + transport.PathSnapshot + "?ns=app")
		if err != nil {
			got <- result{err: err}
			return
		}
		resp.Body.Close()
		got <- result{status: resp.StatusCode}
	}()
	testutil.Eventually(t, waitLimit, func() bool { up.mu.Lock(); defer up.mu.Unlock(); return up.snapshots > 0 }, "the relay's upstream snapshot")
	// A few janitor rounds (every 100ms) while the request waits.
	select {
	case <-up.canceled:
		t.Error("the relay stopped following the namespace a request waits for")
	case <-time.After(500 * time.Millisecond):
	}
	close(up.snapshotGate)
	r := <-got
	if r.err != nil || r.status != http.StatusOK {
		t.Fatalf("snapshot: %d %v, want 200", r.status, r.err)
	}
}

// A watch that opens while the janitor drops its namespace must not be
// left carrying a namespace the relay no longer follows (it would never
// get another change, and look fresh): it is refused (503, retried), or
// the namespace is followed again.
func TestRelayWatchOpenedWhileItsNamespaceIsDropped(t *testing.T) {
	up := newSlowUpstream()
	up.watchGate = make(chan struct{})
	r, url := startRelay(t, "", withSource(up), relay.WithLinger(50*time.Millisecond))
	if status, _, _ := getSnapshot(t, url, "app"); status != http.StatusOK {
		t.Fatalf("snapshot: %d", status)
	}
	<-up.canceled // the janitor drops app: its syncer is stopping
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	type result struct {
		status int
		err    error
	}
	opened := make(chan result, 1)
	go func() {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url+transport.PathWatch+"?ns=app&since=1", nil)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			opened <- result{err: err}
			return
		}
		opened <- result{status: resp.StatusCode}
		<-ctx.Done()
		resp.Body.Close()
	}()
	var res result
	select {
	case res = <-opened:
	case <-time.After(500 * time.Millisecond):
	}
	close(up.watchGate) // the syncer stops; the drop completes
	if res == (result{}) {
		res = <-opened
	}
	if res.status == http.StatusOK {
		// Followed again: a new syncer, with a snapshot of its own.
		testutil.Eventually(t, waitLimit, func() bool {
			up.mu.Lock()
			again := up.snapshots > 1
			up.mu.Unlock()
			if !again {
				return false
			}
			for _, st := range r.Namespaces() {
				if st.Namespace == "app" && st.Ready {
					return true
				}
			}
			return false
		}, "a watch open only on a namespace followed")
	} else if res.status != http.StatusServiceUnavailable {
		t.Fatalf("watch: %d %v, want 200 (followed) or 503", res.status, res.err)
	}
}

// cacheOf fills a cache directory with the origin's namespaces, through a
// relay that follows them, closed before it returns.
func cacheOf(t *testing.T, originURL string, names ...string) string {
	t.Helper()
	dir := t.TempDir()
	src, err := transport.NewHTTPSource(originURL)
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	r, err := relay.New(src, relay.WithCacheDir(dir), relay.WithNamespaces(names...))
	if err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, waitLimit, func() bool { return r.Ready() == nil }, "the relay ready")
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	return dir
}

// A relay restarted with a cache holding a namespace its allow-list no
// longer allows must not serve it, nor follow it upstream; one holding
// more namespaces than its limit serves those it follows, and refuses the
// others as past the limit rather than serve their files, unfollowed,
// for ever.
func TestRelayCacheObeysTheAllowListAndTheLimit(t *testing.T) {
	origin := holdfasttest.NewServer(t)
	for _, n := range []string{"app", "secret"} {
		mustPublish(t, origin, n, map[string]any{"k": 1})
	}
	dir := cacheOf(t, origin.URL(), "app", "secret")

	r, url := startRelay(t, origin.URL(), relay.WithCacheDir(dir), relay.WithAllow("app"))
	if status, _, _ := getSnapshot(t, url, "secret"); status != http.StatusForbidden {
		t.Errorf("secret (no longer allowed, in the cache): %d, want 403", status)
	}
	for _, st := range r.Namespaces() {
		if st.Namespace == "secret" {
			t.Errorf("the relay follows %+v, outside its allow-list", st)
		}
	}

	_, url = startRelay(t, origin.URL(), relay.WithCacheDir(dir), relay.WithMaxNamespaces(1))
	if status, _, _ := getSnapshot(t, url, "app"); status != http.StatusOK {
		t.Errorf("app (followed from the cache): %d, want 200", status)
	}
	if status, _, _ := getSnapshot(t, url, "secret"); status != http.StatusTooManyRequests {
		t.Errorf("secret (in the cache, past the limit): %d, want 429", status)
	}
}

// postAck posts one ack body to a relay or server at url.
func postAck(t *testing.T, url, body string) {
	t.Helper()
	resp, err := http.Post(url+transport.PathAck, "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNoContent {
		t.Fatalf("ack %s: %d", body, resp.StatusCode)
	}
}

// One client's report that the upstream refuses (a status of a later
// protocol, to an origin of this one) must not cost the other clients
// whose acks the relay forwards in the same batch theirs.
func TestRelayForwardsTheOthersAcksPastOneTheUpstreamRefuses(t *testing.T) {
	origin := holdfasttest.NewServer(t)
	rev := mustPublish(t, origin, "app", map[string]any{"k": 1})
	_, url := startRelay(t, origin.URL())
	if status, _, _ := getSnapshot(t, url, "app"); status != http.StatusOK {
		t.Fatalf("snapshot: %d", status)
	}
	// Within one batch's gathering (50 ms at least): the refused one, then
	// two good ones.
	postAck(t, url, `{"client_id":"odd","ns":"app","revision":1,"status":"would_nack"}`)
	postAck(t, url, `{"client_id":"good-1","ns":"app","revision":`+strconv.FormatInt(rev, 10)+`,"status":"ack"}`)
	postAck(t, url, `{"client_id":"good-2","ns":"app","revision":`+strconv.FormatInt(rev, 10)+`,"status":"ack"}`)
	testutil.Eventually(t, waitLimit, func() bool {
		n := 0
		for _, cs := range origin.Clients() {
			if strings.HasPrefix(cs.ClientID, "good-") && cs.AckedRevision == rev {
				n++
			}
		}
		return n == 2
	}, "the good acks at the origin")
}

// cuttable passes an upstream through until cut: from then on every call
// fails, and the watch running ends, as a partition would.
type cuttable struct {
	inner transport.Source
	cut   chan struct{}
	once  sync.Once
}

var errCut = errors.New("cut off from the upstream")

func newCuttable(inner transport.Source) *cuttable {
	return &cuttable{inner: inner, cut: make(chan struct{})}
}

func (c *cuttable) sever() { c.once.Do(func() { close(c.cut) }) }

func (c *cuttable) severed() bool {
	select {
	case <-c.cut:
		return true
	default:
		return false
	}
}

func (c *cuttable) Snapshot(ctx context.Context, req transport.SnapshotRequest) (*transport.Snapshot, error) {
	if c.severed() {
		return nil, errCut
	}
	return c.inner.Snapshot(ctx, req)
}

func (c *cuttable) Watch(ctx context.Context, req transport.WatchRequest, handle func(transport.Event) error) error {
	if c.severed() {
		return errCut
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		select {
		case <-c.cut:
			cancel()
		case <-ctx.Done():
		}
	}()
	err := c.inner.Watch(ctx, req, handle)
	if c.severed() {
		return errCut
	}
	return err
}

// A client that fails over to a relay cut off from the origin, behind the
// revision the client holds, keeps what it holds (Stale): the relay must
// not call the client's cursor another history (cursor_ahead), which
// makes the client resnapshot and, the relay's older data persisting,
// take it for rewritten history and go back.
func TestClientFailingOverToACutOffRelayBehindItDoesNotGoBack(t *testing.T) {
	origin := holdfasttest.NewServer(t, holdfasttest.WithHeartbeat(100*time.Millisecond))
	mustPublish(t, origin, "app", map[string]any{"k": 1})
	hs, err := transport.NewHTTPSource(origin.URL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = hs.Close() })
	up := newCuttable(hs)
	a, urlA := startRelay(t, origin.URL())
	_, urlB := startRelay(t, "", withSource(up))
	if status, _, _ := getSnapshot(t, urlB, "app"); status != http.StatusOK { // b follows app
		t.Fatalf("b: %d", status)
	}
	c := newClient(t, urlA, config.WithEndpoints(urlA, urlB), config.WithHistoryRewriteGrace(300*time.Millisecond))
	ns := openNamespace(t, c, "app")
	up.sever() // b is cut off at revision 1
	rev := mustPublish(t, origin, "app", map[string]any{"k": 2})
	testutil.Eventually(t, waitLimit, func() bool { return ns.Status().Revision == rev }, "the client at the new revision through a")
	if err := a.Close(); err != nil { // the client moves to b
		t.Fatal(err)
	}
	testutil.Eventually(t, waitLimit, func() bool { return ns.Status().Endpoint == urlB }, "the client on b")
	// b's catch-up wait (1s), the grace, and some more.
	testutil.Consistently(t, 3*time.Second, func() error {
		if st := ns.Status(); st.Revision < rev {
			return fmt.Errorf("the client went back to revision %d from %d: %v", st.Revision, rev, st)
		}
		return nil
	}, "on a relay cut off")
	if st := ns.Status(); st.State == config.StateFresh {
		t.Errorf("the client is %v on a relay cut off", st)
	}
}

// cutOffRelay is an upstream relay that is itself cut off: every
// namespace at revision 1, last confirmed 90 s ago, unconfirmed.
type cutOffRelay struct{}

func (cutOffRelay) Snapshot(_ context.Context, req transport.SnapshotRequest) (*transport.Snapshot, error) {
	snap := &transport.Snapshot{Namespace: req.Namespace, StoreID: "s1", Revision: 1, Cursor: 1, AgeMillis: 90000, Unconfirmed: true}
	if req.KnownStoreID == "s1" && req.KnownRevision == 1 {
		return snap, transport.ErrNotModified
	}
	snap.Values = json.RawMessage(`{"k":1}`)
	return snap, nil
}

func (cutOffRelay) Watch(ctx context.Context, req transport.WatchRequest, handle func(transport.Event) error) error {
	<-ctx.Done()
	return ctx.Err()
}

// A client that opens a namespace through a relay whose upstream is a
// relay cut off gets, in its very first answer, the data's true age and
// the flag: never a fresh-looking reply made between the relay's taking
// the data and its taking the upstream's word on it.
func TestFirstAnswerThroughARelayOfACutOffRelayIsUnconfirmed(t *testing.T) {
	_, url := startRelay(t, "", withSource(cutOffRelay{}), relay.WithMaxNamespaces(1000))
	for i := 0; i < 200; i++ {
		ns := "n" + strconv.Itoa(i)
		status, _, snap := getSnapshot(t, url, ns)
		if status != http.StatusOK {
			t.Fatalf("%s: %d", ns, status)
		}
		if !snap.Unconfirmed || snap.AgeMillis < 90000 {
			t.Fatalf("%s, first answer: unconfirmed %v, age %d ms; want unconfirmed, at least 90000 ms", ns, snap.Unconfirmed, snap.AgeMillis)
		}
	}
}

// Requests through Handler end when the relay closes: one waiting for a
// namespace's first data ends at once, not after its 10 s; and once
// closed, Handler serves nothing (503), not the data it held, unconfirmed
// by nobody and never to change, nor a watch that never ends.
func TestRelayHandlerRequestsEndWithTheRelay(t *testing.T) {
	up := newSlowUpstream()
	up.snapshotGate = make(chan struct{}) // never opened: "waiting" has no data
	r, err := relay.New(up, relay.WithHeartbeat(50*time.Millisecond), relay.WithNamespaces("app"))
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(r.Handler())
	defer srv.Close()
	got := make(chan int, 1)
	go func() {
		resp, err := http.Get(srv.URL + transport.PathSnapshot + "?ns=app")
		if err != nil {
			got <- 0
			return
		}
		resp.Body.Close()
		got <- resp.StatusCode
	}()
	testutil.Eventually(t, waitLimit, func() bool { up.mu.Lock(); defer up.mu.Unlock(); return up.snapshots > 0 }, "the relay's upstream snapshot")
	testutil.Eventually(t, waitLimit, func() bool { return r.Stats().Snapshots == 1 }, "the request in")
	start := time.Now()
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-got:
		if d := time.Since(start); d > 2*time.Second {
			t.Errorf("a waiting request ended %v after Close", d)
		}
	case <-time.After(5 * time.Second):
		t.Error("a waiting request still waits 5s after Close")
	}

	// A relay that had data: closed, it serves none.
	origin := holdfasttest.NewServer(t)
	mustPublish(t, origin, "app", map[string]any{"k": 1})
	hs, err := transport.NewHTTPSource(origin.URL())
	if err != nil {
		t.Fatal(err)
	}
	defer hs.Close()
	r2, err := relay.New(hs, relay.WithHeartbeat(50*time.Millisecond), relay.WithNamespaces("app"))
	if err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, waitLimit, func() bool { return r2.Ready() == nil }, "the relay ready")
	srv2 := httptest.NewServer(r2.Handler())
	defer srv2.Close()
	if err := r2.Close(); err != nil {
		t.Fatal(err)
	}
	if err := r2.Close(); err != nil {
		t.Fatalf("Close again: %v", err)
	}
	if status, _, _ := getSnapshot(t, srv2.URL, "app"); status != http.StatusServiceUnavailable {
		t.Errorf("snapshot after Close: %d, want 503", status)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, srv2.URL+transport.PathWatch+"?ns=app", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("watch after Close: %v", err)
	}
	_, err = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable || err != nil {
		t.Errorf("watch after Close: %d (body read: %v), want 503", resp.StatusCode, err)
	}
	l, _ := net.Listen("tcp", "127.0.0.1:0")
	if err := r2.Serve(context.Background(), l); !errors.Is(err, relay.ErrClosed) {
		t.Errorf("Serve after Close: %v, want ErrClosed", err)
	}
}

// The origin's store is restored to an earlier revision: the namespace
// that changed after it goes back (a rewind, which the relay's Follower
// takes as a reset of every namespace), and the one that did not must be
// served again too, although its syncer, whose data is still good, has
// nothing new to apply.
func TestRelayServesEveryNamespaceAfterTheOriginRestoresItsStore(t *testing.T) {
	if testing.Short() {
		t.Skip("waits for the syncer's history-rewrite grace (10s)")
	}
	origin := holdfasttest.NewServer(t, holdfasttest.WithHeartbeat(200*time.Millisecond))
	mustPublish(t, origin, "a", map[string]any{"k": 1})
	rb := mustPublish(t, origin, "b", map[string]any{"k": 1})
	ra := mustPublish(t, origin, "a", map[string]any{"k": 2})
	r, url := startRelay(t, origin.URL(), relay.WithNamespaces("a", "b"))
	revision := func(ns string) int64 {
		for _, st := range r.Namespaces() {
			if st.Namespace == ns && st.Ready {
				return st.Revision
			}
		}
		return -1
	}
	testutil.Eventually(t, waitLimit, func() bool { return revision("a") == ra && revision("b") == rb }, "both followed")
	if err := origin.RestoreTo(rb); err != nil {
		t.Fatal(err)
	}
	// a's rewind waits out the grace.
	if !testutil.Wait(20*time.Second, func() bool { return revision("a") == 1 }) {
		t.Fatalf("a at %d, want 1 after the restore", revision("a"))
	}
	testutil.Eventually(t, waitLimit, func() bool {
		status, _, snap := getSnapshot(t, url, "b")
		return status == http.StatusOK && snap.Revision == rb
	}, "b served again")
}

// A namespace the upstream does not have is refused as the origin refuses
// it (404; on a stream, ended not_found) and at once: not after the
// relay's 10 s wait for first data, which held the whole stream, every
// other namespace of it included, at every open.
func TestRelayRefusesANamespaceItsUpstreamDoesNotHave(t *testing.T) {
	origin := holdfasttest.NewServer(t)
	mustPublish(t, origin, "app", map[string]any{"k": 1})
	_, url := startRelay(t, origin.URL())
	start := time.Now()
	if status, _, _ := getSnapshot(t, url, "nope"); status != http.StatusNotFound {
		t.Errorf("snapshot of a namespace the origin does not have: %d, want 404", status)
	}
	if d := time.Since(start); d > 3*time.Second {
		t.Errorf("the 404 took %v", d)
	}
	for i := 0; i < 2; i++ { // the first open, and one once the relay knows
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url+transport.PathStream+"?ns=app:0&ns=nope:0", nil)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			cancel()
			t.Fatalf("stream %d: %v (the relay held it)", i, err)
		}
		buf := make([]byte, 4096)
		n, _ := io.ReadAtLeast(resp.Body, buf, 1)
		resp.Body.Close()
		cancel()
		if resp.StatusCode != http.StatusOK || !strings.Contains(string(buf[:n]), `"error":"not_found"`) {
			t.Errorf("stream %d: %d %q, want nope ended not_found", i, resp.StatusCode, buf[:n])
		}
	}
	// Published at last: served.
	rev := mustPublish(t, origin, "nope", map[string]any{"k": 1})
	testutil.Eventually(t, waitLimit, func() bool {
		status, _, snap := getSnapshot(t, url, "nope")
		return status == http.StatusOK && snap.Revision == rev
	}, "nope served once the origin has it")
}

// chattyCutOffRelay is cutOffRelay whose watch sends a progress every
// 10 ms, each with the upstream's age (90 s and growing).
type chattyCutOffRelay struct{ cutOffRelay }

func (chattyCutOffRelay) Watch(ctx context.Context, req transport.WatchRequest, handle func(transport.Event) error) error {
	start := time.Now()
	t := time.NewTicker(10 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
		age := 90000 + time.Since(start).Milliseconds()
		if err := handle(transport.Event{Progress: &transport.Progress{Namespace: req.Namespace, StoreID: "s1", Revision: 1, Cursor: 1,
			AgeMillis: age, Unconfirmed: true}}); err != nil {
			return err
		}
	}
}

// A confirmation alone rewrites a namespace's file at most every 10 s,
// whatever the age its upstream reports: not at every progress while the
// upstream is itself cut off.
func TestRelayRewritesItsFileRarelyWhileItsUpstreamIsCutOff(t *testing.T) {
	dir := t.TempDir()
	r, _ := startRelay(t, "", withSource(chattyCutOffRelay{}), relay.WithCacheDir(dir), relay.WithNamespaces("app"))
	testutil.Eventually(t, waitLimit, func() bool { return r.Ready() == nil }, "the relay ready")
	file := filepath.Join(dir, "app.hfc")
	var first os.FileInfo
	testutil.Eventually(t, waitLimit, func() bool {
		var err error
		first, err = os.Stat(file)
		return err == nil
	}, "the file written")
	testutil.Consistently(t, time.Second, func() error { // a hundred progress events
		if st, err := os.Stat(file); err == nil && !st.ModTime().Equal(first.ModTime()) {
			return fmt.Errorf("the file was rewritten %v after it was written", st.ModTime().Sub(first.ModTime()))
		}
		return nil
	}, "a confirmation alone")
}

// A client restarted from its last-good file against a relay cut off from
// the origin, behind that file, keeps what it holds (Stale): the relay's
// older data, which it would refuse and then, persisting, take for
// rewritten history, is not offered to it.
func TestClientFromItsCacheOnACutOffRelayBehindItDoesNotGoBack(t *testing.T) {
	origin := holdfasttest.NewServer(t, holdfasttest.WithHeartbeat(100*time.Millisecond))
	mustPublish(t, origin, "app", map[string]any{"k": 1})
	hs, err := transport.NewHTTPSource(origin.URL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = hs.Close() })
	up := newCuttable(hs)
	_, urlB := startRelay(t, "", withSource(up))
	if status, _, _ := getSnapshot(t, urlB, "app"); status != http.StatusOK { // b follows app
		t.Fatalf("b: %d", status)
	}
	up.sever() // b is cut off at revision 1
	rev := mustPublish(t, origin, "app", map[string]any{"k": 2})
	dir := t.TempDir()
	c1 := newClient(t, origin.URL(), config.WithCacheDir(dir))
	ns := openNamespace(t, c1, "app")
	testutil.Eventually(t, waitLimit, func() bool { return ns.Status().Revision == rev }, "the client at the new revision")
	if err := c1.Close(); err != nil {
		t.Fatal(err)
	}
	c2 := newClient(t, urlB, config.WithCacheDir(dir), config.WithHistoryRewriteGrace(300*time.Millisecond))
	ns = openNamespace(t, c2, "app")
	testutil.Consistently(t, 2*time.Second, func() error { // the grace, and some more
		if st := ns.Status(); st.Revision < rev {
			return fmt.Errorf("the client went back to revision %d from %d: %v", st.Revision, rev, st)
		}
		return nil
	}, "from its cache on a relay cut off")
	if st := ns.Status(); st.State == config.StateFresh {
		t.Errorf("the client is %v on a relay cut off", st)
	}
}

// A relay forwards only reports of namespaces it may serve: its
// allow-list bounds what its clients can tell the origin too.
func TestRelayForwardsNoReportOutsideItsAllowList(t *testing.T) {
	up := &reportSink{}
	_, url := startRelay(t, "", withSource(up), relay.WithAllow("app"))
	postAck(t, url, `{"client_id":"c1","acks":[{"ns":"secret","revision":1,"status":"ack"},{"ns":"app","revision":1,"status":"ack"}]}`)
	testutil.Eventually(t, waitLimit, func() bool { up.mu.Lock(); defer up.mu.Unlock(); return len(up.acks) > 0 }, "the ack of app upstream")
	up.mu.Lock()
	defer up.mu.Unlock()
	for _, a := range up.acks {
		if a.Namespace != "app" {
			t.Errorf("forwarded %+v, outside the allow-list", a)
		}
	}
}
