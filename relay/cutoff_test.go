package relay_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/holdfast-dev/holdfast/config"

	"github.com/holdfast-dev/holdfast/holdfasttest"
	"github.com/holdfast-dev/holdfast/internal/testutil"
	"github.com/holdfast-dev/holdfast/relay"
	"github.com/holdfast-dev/holdfast/transport"
)

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
