package dataplane

// A test of the protocol's contract (internal/fakeserver's
// contract_test.go has the others): it reproduces a bug that was fixed.

import (
	"io"
	"net/http"
	"runtime"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/holdfast-dev/holdfast/internal/testutil"
	"github.com/holdfast-dev/holdfast/transport"
)

// longPollWatcher returns the one watcher of ns (a held long-poll).
func longPollWatcher(s *Server, ns string) *watcher {
	s.hub.mu.RLock()
	defer s.hub.mu.RUnlock()
	for w := range s.hub.byNS[ns] {
		return w
	}
	return nil
}

// BUG (sdk.go handleEvents, the wait loop: `items, _ := wt.take()` then
// `resp.Cursor = max(d, cursor)`): when a held long-poll's watcher
// overflows, the queued change sets are thrown away (watcher.push sets
// queue = nil) but the handler ignores the overflow flag and still replies
// with the hub's dispatched cursor d, which is at or past the discarded
// changes. The reply has no changes and a cursor beyond them, and a stale
// revision, so the client advances its cursor past changes it never
// received: a silent skip, which the design forbids ("a watcher that falls
// behind is disconnected, never silently skipped, and resumes from its
// cursor").
//
// To make the overflow happen before the handler can take the first change,
// the test runs on one P and holds the hub's lock while two changes are
// committed, so the dispatcher pushes both in one uninterrupted batch into
// a watcher with room for one. It retries until the watcher really
// overflowed (checked on the watcher itself) and then checks the reply.
func TestLongPollOverflowSkipsChanges(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	be := newMemBackend()
	s := be.start(t, WithWatcherBuffer(1), WithHeartbeat(time.Hour))
	c := newClient(t)
	be.publish("app", map[string]any{"k": 0})

	for attempt := 0; attempt < 20; attempt++ {
		_, since, _ := be.Info()
		type reply struct {
			resp *http.Response
			body []byte
		}
		got := make(chan reply, 1)
		go func() {
			resp, err := c.Get(url(s) + "/sdk/events?ns=app&since=" + strconv.FormatInt(since, 10) + "&wait=10s")
			if err != nil {
				got <- reply{}
				return
			}
			defer resp.Body.Close()
			b, _ := io.ReadAll(resp.Body)
			got <- reply{resp, b}
		}()
		testutil.Eventually(t, waitLimit, func() bool { return longPollWatcher(s, "app") != nil }, "a held long-poll")
		wt := longPollWatcher(s, "app")

		// The dispatcher blocks on the hub lock while pushing "other"'s
		// change; both changes of "app" queue behind it, in one batch.
		s.hub.mu.Lock()
		be.publish("other", map[string]any{"x": attempt})
		r1 := be.publish("app", map[string]any{"k": 2*attempt + 1})
		r2 := be.publish("app", map[string]any{"k": 2*attempt + 2})
		s.hub.mu.Unlock()

		var rp reply
		select {
		case rp = <-got:
		case <-time.After(15 * time.Second):
			t.Fatal("no long-poll reply")
		}
		if rp.resp == nil || rp.resp.StatusCode != 200 {
			t.Fatalf("long-poll failed: %+v %s", rp.resp, rp.body)
		}
		er := decode[transport.EventsResponse](t, rp.body)
		wt.mu.Lock()
		overflowed := wt.overflow
		wt.mu.Unlock()

		// The invariant, whatever happened: every change of the namespace
		// at or below the reply's cursor and after since is in the reply.
		var revs []int64
		for _, cs := range er.Changes {
			revs = append(revs, cs.Revision)
		}
		for _, r := range []int64{r1, r2} {
			if r <= er.Cursor && !slices.Contains(revs, r) {
				t.Fatalf("attempt %d (overflow %v): long-poll from %d replied cursor %d, revision %d, changes %v: "+
					"change %d is at or below the cursor but was never sent (silently skipped)",
					attempt, overflowed, since, er.Cursor, er.Revision, revs, r)
			}
		}
		if overflowed {
			return // the overflow path was exercised and behaved
		}
	}
	t.Skip("could not make the long-poll watcher overflow")
}
