package config_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/holdfast-dev/holdfast/config"
	"github.com/holdfast-dev/holdfast/internal/fakeserver"
	"github.com/holdfast-dev/holdfast/internal/sdksuite"
	"github.com/holdfast-dev/holdfast/internal/testutil"
	"github.com/holdfast-dev/holdfast/internal/testutil/nstest"
	"github.com/holdfast-dev/holdfast/transport"
)

// TestRestartDuringOutageServesFromDisk: client A syncs and closes; the
// server goes down; client B with A's cache dir serves A's values at once,
// Stale from disk; the server returns and B converges.
func TestRestartDuringOutageServesFromDisk(t *testing.T) {
	srv := sdksuite.StartReference(t)
	sdksuite.Publish(t, srv, "payments.prod", map[string]any{"retry-timeout-ms": 50, "mode": "fast"})
	dir, rev := syncedCacheDir(t, srv, "payments.prod")
	if err := srv.Stop(); err != nil {
		t.Fatal(err)
	}

	b := sdksuite.NewClient(t, sdksuite.Endpoint(srv.URL()), config.WithCacheDir(dir))
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	start := time.Now()
	nsB, err := b.Namespace(ctx, "payments.prod")
	if err != nil {
		t.Fatalf("open from disk with the server down: %v", err)
	}
	if took := time.Since(start); took > time.Second {
		t.Errorf("open from disk took %v; it must not wait for the network", took)
	}
	if nsB.Int("retry-timeout-ms", 0) != 50 || nsB.String("mode", "") != "fast" || nsB.Revision() != rev {
		t.Errorf("B serves %v rev %d; want A's values at rev %d", nsB.Snapshot().Keys(), nsB.Revision(), rev)
	}
	st := nsB.Status()
	if st.State != config.StateStale || st.Origin != config.OriginDisk {
		t.Errorf("status from disk = %v from %v; want Stale from disk", st.State, st.Origin)
	}
	if st.Staleness <= 0 || st.LastConfirmed.IsZero() {
		t.Errorf("staleness from disk = %v, confirmed %v", st.Staleness, st.LastConfirmed)
	}

	newRev := sdksuite.Publish(t, srv, "payments.prod", map[string]any{"retry-timeout-ms": 75})
	if err := srv.Restart(); err != nil {
		t.Fatal(err)
	}
	nstest.WaitRevision(t, nsB, newRev, waitLimit)
	testutil.Eventually(t, waitLimit, func() bool {
		st := nsB.Status()
		return st.State == config.StateFresh && st.Origin == config.OriginNetwork
	}, "fresh from the network")
	if nsB.Int("retry-timeout-ms", 0) != 75 {
		t.Errorf("after converging: %d", nsB.Int("retry-timeout-ms", 0))
	}
}

// TestDiskFileWithUnchangedServerCostsNoBody: reopening from disk against
// an unchanged server confirms the data with a conditional snapshot (304).
func TestDiskFileWithUnchangedServerCostsNoBody(t *testing.T) {
	srv := sdksuite.StartReference(t)
	sdksuite.Publish(t, srv, "quiet", map[string]any{"v": 1})
	dir, _ := syncedCacheDir(t, srv, "quiet")

	before := srv.Stats()
	b := sdksuite.NewClient(t, sdksuite.Endpoint(srv.URL()), config.WithCacheDir(dir))
	ns := sdksuite.Open(t, b, "quiet")
	testutil.Eventually(t, waitLimit, func() bool { return ns.Status().State == config.StateFresh }, "fresh")
	after := srv.Stats()
	if after.NotModified-before.NotModified != 1 {
		t.Errorf("reopen with an unchanged server: %d 304s; want 1 (a conditional snapshot)", after.NotModified-before.NotModified)
	}
}

func TestCorruptCacheFileIsNeverServed(t *testing.T) {
	srv := sdksuite.StartReference(t)
	sdksuite.Publish(t, srv, "corrupt", map[string]any{"v": 1})
	dir, _ := syncedCacheDir(t, srv, "corrupt")

	path := filepath.Join(dir, "corrupt.hfc")
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	data[len(data)/2] ^= 0x40
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := srv.Stop(); err != nil {
		t.Fatal(err)
	}
	b := sdksuite.NewClient(t, sdksuite.Endpoint(srv.URL()), config.WithCacheDir(dir))
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	if ns, err := b.Namespace(ctx, "corrupt"); err == nil {
		t.Fatalf("a corrupt file was served: %v", ns.Snapshot().Keys())
	}
	if _, err := os.Stat(path + ".corrupt"); err != nil {
		t.Errorf("corrupt file not moved aside: %v", err)
	}
	// With the server back, the namespace opens from the network and
	// writes a good file again.
	if err := srv.Restart(); err != nil {
		t.Fatal(err)
	}
	ns := sdksuite.Open(t, b, "corrupt")
	if ns.Int("v", 0) != 1 {
		t.Error("did not recover from the network")
	}
}

func TestFailClosedRefusesTooOldFile(t *testing.T) {
	srv := sdksuite.StartReference(t)
	sdksuite.Publish(t, srv, "strict", map[string]any{"v": 1})
	dir, _ := syncedCacheDir(t, srv, "strict")
	if err := srv.Stop(); err != nil {
		t.Fatal(err)
	}
	const maxStale = 100 * time.Millisecond
	written := time.Now()
	testutil.Eventually(t, waitLimit, func() bool { return time.Since(written) > 2*maxStale }, "the file to grow older than MaxStaleness")

	b := sdksuite.NewClient(t, sdksuite.Endpoint(srv.URL()), config.WithCacheDir(dir))
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	_, err := b.Namespace(ctx, "strict", config.FailClosed(), config.MaxStaleness(maxStale))
	if !errors.Is(err, config.ErrStale) {
		t.Fatalf("fail-closed open on a too-old file = %v; want ErrStale", err)
	}
	// The last network error is wrapped too.
	var oe *config.OpenError
	if !errors.As(err, &oe) || oe.Last == nil {
		t.Errorf("ErrStale without the last network error: %v", err)
	}

	// Fail-open serves the same file, breached.
	ns := sdksuite.Open(t, b, "strict", config.MaxStaleness(maxStale))
	if ns.Int("v", 0) != 1 {
		t.Error("fail-open did not serve the file")
	}
	testutil.Eventually(t, waitLimit, func() bool { return ns.Status().State == config.StateBreached }, "breached")
}

// TestFailClosedAtRunTime: past MaxStaleness a fail-closed namespace serves
// its Defaults (OnChange fires), and its data again when fresh data returns.
func TestFailClosedAtRunTime(t *testing.T) {
	srv := sdksuite.StartReference(t)
	sdksuite.Publish(t, srv, "fc", map[string]any{"limit": 100, "only-live": true})
	c := sdksuite.NewClient(t, sdksuite.Endpoint(srv.URL()))
	ns := sdksuite.Open(t, c, "fc", config.FailClosed(), config.MaxStaleness(200*time.Millisecond),
		config.Defaults(map[string]any{"limit": 5}))

	changes := make(chan config.Change, 16)
	ns.OnChange("limit", func(ch config.Change) { changes <- ch })
	statuses := make(chan config.State, 16)
	ns.OnStatusChange(func(st config.Status) { statuses <- st.State })

	if err := srv.Stop(); err != nil {
		t.Fatal(err)
	}
	waitState(t, statuses, config.StateFailedClosed)
	if got := ns.Int("limit", -1); got != 5 {
		t.Errorf("limit when failed closed = %d; want the default 5", got)
	}
	if _, ok := ns.Get("only-live"); ok {
		t.Error("a key without a default is still served when failed closed")
	}
	if ch := <-changes; ch.Old.String() != "100" || ch.New.String() != "5" {
		t.Errorf("OnChange on failing closed = %+v", ch)
	}
	if st := ns.Status(); st.Origin != config.OriginDefaults {
		t.Errorf("origin when failed closed = %v", st.Origin)
	}

	rev := sdksuite.Publish(t, srv, "fc", map[string]any{"limit": 200})
	if err := srv.Restart(); err != nil {
		t.Fatal(err)
	}
	waitState(t, statuses, config.StateFresh)
	nstest.WaitRevision(t, ns, rev, waitLimit)
	if got := ns.Int("limit", -1); got != 200 {
		t.Errorf("limit after recovery = %d", got)
	}
	if ch := <-changes; ch.Old.String() != "5" || ch.New.String() != "200" {
		t.Errorf("OnChange on recovery = %+v", ch)
	}
}

func waitState(t *testing.T, statuses <-chan config.State, want config.State) {
	t.Helper()
	deadline := time.After(waitLimit)
	for {
		select {
		case st := <-statuses:
			if st == want {
				return
			}
		case <-deadline:
			t.Fatalf("state %v never reached", want)
		}
	}
}

// TestPersistErrorShowsAndServingGoesOn puts a directory where the
// namespace's file must go: writes fail, Status shows it, reads go on.
func TestPersistErrorShowsAndServingGoesOn(t *testing.T) {
	srv := sdksuite.StartReference(t)
	sdksuite.Publish(t, srv, "ro", map[string]any{"v": 1})
	dir := t.TempDir()
	c := sdksuite.NewClient(t, sdksuite.Endpoint(srv.URL()), config.WithCacheDir(dir))
	ns := sdksuite.Open(t, c, "ro")
	path := filepath.Join(dir, "ro.hfc")
	testutil.Eventually(t, waitLimit, func() bool { _, err := os.Stat(path); return err == nil }, "the first write")
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(path, "blocker"), 0o700); err != nil {
		t.Fatal(err)
	}
	rev := sdksuite.Publish(t, srv, "ro", map[string]any{"v": 2})
	nstest.WaitRevision(t, ns, rev, waitLimit)
	testutil.Eventually(t, waitLimit, func() bool { return ns.Status().PersistError.Kind == config.ErrorPersist }, "the persist error in Status")
	if ns.Int("v", 0) != 2 {
		t.Error("serving stopped after a persist error")
	}
}

// TestDiskRevisionIsTheMonotonicFloor: after a restart from disk at revision
// 5, a server of the same store that offers revision 3 is refused; a new
// store id resets the floor.
func TestDiskRevisionIsTheMonotonicFloor(t *testing.T) {
	values := func(v string) json.RawMessage { return json.RawMessage(`{"v":` + v + `}`) }
	srv := &scriptedServer{t: t, snapshots: []transport.Snapshot{
		{Namespace: "hm", StoreID: "s1", Revision: 5, Cursor: 5, Values: values("5")},
		{Namespace: "hm", StoreID: "s1", Revision: 3, Cursor: 3, Values: values("3")},
		{Namespace: "hm", StoreID: "s1", Revision: 3, Cursor: 3, Values: values("3")},
		{Namespace: "hm", StoreID: "s2", Revision: 1, Cursor: 1, Values: values("1")},
	}}
	hs := httptest.NewServer(srv)
	t.Cleanup(hs.Close)
	dir := t.TempDir()

	a := sdksuite.NewClient(t, sdksuite.Endpoint(hs.URL), config.WithCacheDir(dir))
	if ns := sdksuite.Open(t, a, "hm"); ns.Revision() != 5 {
		t.Fatalf("first client at revision %d", ns.Revision())
	}
	_ = a.Close()

	b := sdksuite.NewClient(t, sdksuite.Endpoint(hs.URL), config.WithCacheDir(dir))
	ns := sdksuite.Open(t, b, "hm")
	testutil.Eventually(t, waitLimit, func() bool {
		st := ns.Status()
		if st.StoreID == "s1" && ns.Revision() < 5 {
			t.Fatalf("revision went back to %d within store s1", ns.Revision())
		}
		return st.StoreID == "s2"
	}, "the new store's snapshot")
	if ns.Revision() != 1 || ns.Int("v", 0) != 1 {
		t.Errorf("after the store change: revision %d, v %d", ns.Revision(), ns.Int("v", 0))
	}
	if got := srv.snapCount.Load(); got < 4 {
		t.Errorf("%d snapshot requests; the behind ones were not refused", got)
	}
}

// syncedCacheDir is the cache dir of a client that opened ns from srv and
// closed (which flushes the file), and the revision it held.
func syncedCacheDir(t *testing.T, srv *fakeserver.Server, ns string) (string, int64) {
	t.Helper()
	dir := t.TempDir()
	c := sdksuite.NewClient(t, sdksuite.Endpoint(srv.URL()), config.WithCacheDir(dir))
	rev := sdksuite.Open(t, c, ns).Revision()
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	return dir, rev
}
