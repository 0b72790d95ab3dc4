package relay_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/holdfast-dev/holdfast/config"
	"github.com/holdfast-dev/holdfast/holdfasttest"
	"github.com/holdfast-dev/holdfast/internal/testutil"
	"github.com/holdfast-dev/holdfast/relay"
	"github.com/holdfast-dev/holdfast/transport"
)

// getSnapshot fetches ns's snapshot from a server or relay at url, as raw
// HTTP: its status, its headers and its body.
func getSnapshot(t testing.TB, url, ns string) (int, http.Header, transport.Snapshot) {
	t.Helper()
	resp, err := http.Get(url + transport.PathSnapshot + "?ns=" + ns)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var snap transport.Snapshot
	data, _ := io.ReadAll(resp.Body)
	if resp.StatusCode == http.StatusOK {
		if err := json.Unmarshal(data, &snap); err != nil {
			t.Fatalf("snapshot body %q: %v", data, err)
		}
	}
	return resp.StatusCode, resp.Header, snap
}

func openNamespace(t testing.TB, c *config.Client, name string, opts ...config.NamespaceOption) *config.Namespace {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ns, err := c.Namespace(ctx, name, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return ns
}

func valueOf(ns *config.Namespace, key string) string {
	v, _ := ns.Get(key)
	return v.String()
}

// TestRelayChain: origin → relay → relay → client, revisions and store id
// unchanged all the way.
func TestRelayChain(t *testing.T) {
	origin := holdfasttest.NewServer(t, holdfasttest.WithHeartbeat(200*time.Millisecond))
	mustPublish(t, origin, "app", map[string]any{"k": "v1"})
	_, first := startRelay(t, origin.URL())
	_, second := startRelay(t, first)
	ns := openNamespace(t, newClient(t, second), "app")
	for i := 2; i <= 5; i++ {
		rev := mustPublish(t, origin, "app", map[string]any{"k": "v" + strconv.Itoa(i)})
		testutil.Eventually(t, waitLimit, func() bool { return ns.Status().Revision == rev }, "the change through two relays")
	}
	if got := valueOf(ns, "k"); got != `v5` {
		t.Fatalf("k = %s", got)
	}
	if st := ns.Status(); st.StoreID != origin.StoreID() {
		t.Fatalf("store id %q, want the origin's %q", st.StoreID, origin.StoreID())
	}
}

func mustPublish(t testing.TB, s *holdfasttest.Server, ns string, puts map[string]any) int64 {
	t.Helper()
	rev, err := s.Publish(ns, puts)
	if err != nil {
		t.Fatal(err)
	}
	return rev
}

// TestRelayRestartedWithOriginDownServesItsCache: a relay restarted while
// the origin is down serves its last-good files, saying that its
// upstream is not confirming them, with their true age.
func TestRelayRestartedWithOriginDownServesItsCache(t *testing.T) {
	origin := holdfasttest.NewServer(t, holdfasttest.WithHeartbeat(200*time.Millisecond))
	rev := mustPublish(t, origin, "app", map[string]any{"k": "cached"})
	dir := t.TempDir()
	src, err := transport.NewHTTPSource(origin.URL())
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	r1, err := relay.New(src, relay.WithCacheDir(dir), relay.WithNamespaces("app"))
	if err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, waitLimit, func() bool { return r1.Ready() == nil }, "the first relay ready")
	if err := r1.Close(); err != nil {
		t.Fatal(err)
	}
	if err := origin.Stop(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(300 * time.Millisecond) // the outage's age, to be seen below

	r2, url := startRelay(t, origin.URL(), relay.WithCacheDir(dir))
	if err := r2.Ready(); err != nil {
		t.Fatalf("a relay with a cache is ready at once: %v", err)
	}
	status, h, snap := getSnapshot(t, url, "app")
	if status != http.StatusOK || snap.Revision != rev || snap.StoreID != origin.StoreID() {
		t.Fatalf("snapshot %d %+v, want revision %d of %s", status, snap, rev, origin.StoreID())
	}
	if !snap.Unconfirmed || h.Get(transport.HeaderUnconfirmed) != "true" {
		t.Errorf("snapshot of a relay cut off not marked unconfirmed: %+v, headers %v", snap, h)
	}
	if snap.AgeMillis < 300 {
		t.Errorf("age %d ms, want at least the outage's 300", snap.AgeMillis)
	}
	var vals map[string]string
	_ = json.Unmarshal(snap.Values, &vals)
	if vals["k"] != "cached" {
		t.Fatalf("values %s", snap.Values)
	}
	if err := origin.Restart(); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, waitLimit, func() bool {
		_, _, s := getSnapshot(t, url, "app")
		return !s.Unconfirmed && s.AgeMillis < 5000
	}, "confirmed once the origin is back")
}

// TestRelayStoreResetAndOriginRestart: the origin restarts (same store),
// then its store is reset: a client behind the relay converges each time.
func TestRelayStoreResetAndOriginRestart(t *testing.T) {
	origin := holdfasttest.NewServer(t, holdfasttest.WithHeartbeat(200*time.Millisecond))
	mustPublish(t, origin, "app", map[string]any{"k": "a"})
	_, url := startRelay(t, origin.URL())
	ns := openNamespace(t, newClient(t, url), "app")

	if err := origin.Restart(); err != nil {
		t.Fatal(err)
	}
	rev := mustPublish(t, origin, "app", map[string]any{"k": "b"})
	testutil.Eventually(t, waitLimit, func() bool { return ns.Status().Revision == rev }, "converged after the origin restarted")

	id := origin.ResetStore()
	rev = mustPublish(t, origin, "app", map[string]any{"k": "c"})
	testutil.Eventually(t, waitLimit, func() bool {
		st := ns.Status()
		return st.StoreID == id && st.Revision == rev && valueOf(ns, "k") == "c"
	}, "converged on the new store")
}

// TestRelayCompactionDuringItsOutage: the origin compacts away the relay's
// cursor while the relay cannot reach it; the relay resnapshots and its
// client gets the difference as one change, without a snapshot of its
// own.
func TestRelayCompactionDuringItsOutage(t *testing.T) {
	origin := holdfasttest.NewServer(t, holdfasttest.WithHeartbeat(200*time.Millisecond))
	mustPublish(t, origin, "app", map[string]any{"k": "0", "gone": true})
	r, url := startRelay(t, origin.URL())
	ns := openNamespace(t, newClient(t, url), "app")
	snapshots := r.Stats().Snapshots

	origin.SetBlackhole(true)
	for i := 1; i <= 5; i++ {
		mustPublish(t, origin, "app", map[string]any{"k": strconv.Itoa(i)})
	}
	if _, err := origin.Delete("app", "gone"); err != nil {
		t.Fatal(err)
	}
	rev := mustPublish(t, origin, "app", map[string]any{"new": 1})
	if _, err := origin.Compact(0); err != nil {
		t.Fatal(err)
	}
	origin.DropStreams()
	origin.SetBlackhole(false)
	testutil.Eventually(t, waitLimit, func() bool { return ns.Status().Revision == rev }, "the client converged")
	if _, ok := ns.Get("gone"); ok || valueOf(ns, "k") != "5" || valueOf(ns, "new") != "1" {
		t.Fatalf("content after the gap: k=%s new=%s", valueOf(ns, "k"), valueOf(ns, "new"))
	}
	if got := r.Stats().Snapshots; got != snapshots {
		t.Errorf("the client fetched %d snapshots from the relay; want none: the gap comes as one change", got-snapshots)
	}
}

// TestRelayAllowListAndLimit: a namespace outside the allow-list gets 403,
// one past the limit 429, and neither is followed upstream.
func TestRelayAllowListAndLimit(t *testing.T) {
	origin := holdfasttest.NewServer(t)
	for _, n := range []string{"pay.a", "pay.b", "other"} {
		mustPublish(t, origin, n, map[string]any{"k": 1})
	}
	r, url := startRelay(t, origin.URL(), relay.WithAllow("pay.*"), relay.WithMaxNamespaces(1))
	if status, _, _ := getSnapshot(t, url, "pay.a"); status != http.StatusOK {
		t.Fatalf("pay.a: %d", status)
	}
	before := origin.Stats().Snapshots
	if status, _, _ := getSnapshot(t, url, "other"); status != http.StatusForbidden {
		t.Errorf("other (not allowed): %d, want 403", status)
	}
	status, h, _ := getSnapshot(t, url, "pay.b")
	if status != http.StatusTooManyRequests || h.Get("Retry-After") == "" {
		t.Errorf("pay.b (past the limit): %d Retry-After %q, want 429 with one", status, h.Get("Retry-After"))
	}
	if got := origin.Stats().Snapshots - before; got != 0 {
		t.Errorf("%d upstream snapshots for refused namespaces", got)
	}
	var names []string
	for _, st := range r.Namespaces() {
		names = append(names, st.Namespace)
	}
	if strings.Join(names, ",") != "pay.a" {
		t.Errorf("followed %v, want [pay.a]", names)
	}
}

// TestClientBehindACutOffRelay: the origin stops; the relay keeps
// answering, but its clients go Stale within their idle timeout and
// Breached past MaxStaleness, as if they were cut off themselves; a
// chain of two relays passes it on. The origin back, they are Fresh.
func TestClientBehindACutOffRelay(t *testing.T) {
	origin := holdfasttest.NewServer(t, holdfasttest.WithHeartbeat(100*time.Millisecond))
	rev := mustPublish(t, origin, "app", map[string]any{"k": 1})
	_, first := startRelay(t, origin.URL())
	_, second := startRelay(t, first)
	const maxStale = 1500 * time.Millisecond
	var nss []*config.Namespace
	for _, url := range []string{first, second} {
		c := newClient(t, url, config.WithStreamIdleTimeout(500*time.Millisecond))
		nss = append(nss, openNamespace(t, c, "app", config.MaxStaleness(maxStale)))
	}
	for _, ns := range nss {
		testutil.Eventually(t, waitLimit, func() bool { st := ns.Status(); return st.State == config.StateFresh && st.Revision == rev }, "Fresh")
	}
	// Healthy, a chain stays Fresh: its age does not add up heartbeats.
	testutil.Consistently(t, time.Second, func() error {
		for i, ns := range nss {
			if st := ns.Status(); st.State != config.StateFresh {
				return fmt.Errorf("client %d not Fresh: %v", i, st)
			}
		}
		return nil
	}, "behind healthy relays")

	if err := origin.Stop(); err != nil {
		t.Fatal(err)
	}
	down := time.Now()
	for i, ns := range nss {
		testutil.Eventually(t, waitLimit, func() bool { return ns.Status().State == config.StateStale }, "Stale")
		if d := time.Since(down); d > 1200*time.Millisecond {
			t.Errorf("client %d Stale %v after the origin stopped", i, d)
		}
	}
	for _, ns := range nss {
		testutil.Eventually(t, waitLimit, func() bool { return ns.Status().State == config.StateBreached }, "Breached")
		if st := ns.Status(); st.Staleness < maxStale {
			t.Errorf("Breached at staleness %v", st.Staleness)
		}
	}
	if err := origin.Restart(); err != nil {
		t.Fatal(err)
	}
	for _, ns := range nss {
		testutil.Eventually(t, waitLimit, func() bool { return ns.Status().State == config.StateFresh }, "Fresh again")
	}
}

// TestRelayWithoutNamespacesIsReadyOnceItsUpstreamAnswers: a relay given
// no namespaces and no client becomes ready once its upstream answers
// (behind a balancer that routes only to ready relays, no client would
// ever come to make it ask): not while the upstream is down, nor while the
// upstream refuses its token; at once when the upstream is up.
func TestRelayWithoutNamespacesIsReadyOnceItsUpstreamAnswers(t *testing.T) {
	origin := holdfasttest.NewServer(t)
	if err := origin.Stop(); err != nil {
		t.Fatal(err)
	}
	r, rURL := startRelay(t, origin.URL())
	if testutil.Wait(500*time.Millisecond, func() bool { return r.Ready() == nil }) {
		t.Fatal("a relay whose upstream is down is ready")
	}
	if err := origin.Restart(); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, waitLimit, func() bool { return r.Ready() == nil }, "the relay ready once its upstream answers, with no client")

	// A relay behind that relay (which has followed nothing yet) is
	// ready too: the first relay's 404 names the origin's store.
	second, _ := startRelay(t, rURL)
	testutil.Eventually(t, waitLimit, func() bool { return second.Ready() == nil }, "a relay behind a relay ready, with no client")

	guarded := holdfasttest.NewServer(t, holdfasttest.WithBearerToken("s3cret-relay-token-0001"))
	refused, _ := startRelay(t, guarded.URL())
	if testutil.Wait(time.Second, func() bool { return refused.Ready() == nil }) {
		t.Fatal("a relay whose token the upstream refuses is ready")
	}
}
