package relay_test

import (
	"context"
	"encoding/json"
	"net/http"
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
