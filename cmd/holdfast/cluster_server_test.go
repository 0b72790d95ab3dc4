package main

import (
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"github.com/holdfast-dev/holdfast/internal/testutil"
)

// serverStatusz reads a server's /statusz.
func serverStatusz(t *testing.T, base string) (storeID string, leader bool) {
	t.Helper()
	code, body, _ := get(t, base+"/statusz")
	var st struct {
		StoreID string `json:"store_id"`
		Leader  bool   `json:"leader"`
	}
	if code != http.StatusOK || json.Unmarshal([]byte(body), &st) != nil || st.StoreID == "" {
		t.Fatalf("%s/statusz: %d %s", base, code, body)
	}
	return st.StoreID, st.Leader
}

// TestTwoServersOneClusterFailover: two `holdfast server -etcd` processes
// over one real 3-member cluster serve the same store id, revisions and
// content. An SDK client that lists both and a relay that follows both
// (with a client of its own) move to the second when the first is killed
// (SIGKILL), and resume by cursor: no snapshot, every revision once, in
// order. One of the two leads; once the first is killed the second leads
// within 10 s.
func TestTwoServersOneClusterFailover(t *testing.T) {
	bin := buildBinary(t)
	members := startEtcd(t)
	a := startServerProc(t, bin, "-etcd", members)
	b := startServerProc(t, bin, "-etcd", members)
	idA, _ := serverStatusz(t, a.url())
	if idB, _ := serverStatusz(t, b.url()); idA != idB {
		t.Fatalf("store ids %q and %q, want one", idA, idB)
	}
	publish := func(base string, v int) int64 {
		t.Helper()
		rev, err := publishApp(controlClient(t, base, nil), "v", v)
		if err != nil {
			t.Fatalf("publish v=%d on %s: %v", v, base, err)
		}
		return rev
	}
	rev := publish(a.url(), 0)
	for _, base := range []string{a.url(), b.url()} {
		testutil.Eventually(t, waitLimit, func() bool {
			code, body, _ := get(t, base+"/sdk/snapshot?ns=app")
			var snap struct {
				StoreID  string `json:"store_id"`
				Revision int64  `json:"revision"`
			}
			return code == http.StatusOK && json.Unmarshal([]byte(body), &snap) == nil && snap.Revision == rev && snap.StoreID == idA
		}, "the snapshot of "+base)
	}

	r := startRelayProc(t, bin, a.url()+","+b.url())
	direct, directCT := fleetClient(t, []string{a.url(), b.url()})
	behind, behindCT := fleetClient(t, []string{r.url()})
	nsDirect, nsBehind := openNS(t, direct, "app"), openNS(t, behind, "app")
	recDirect, recBehind := record(nsDirect), record(nsBehind)
	for v := 1; v <= 3; v++ {
		rev = publish(a.url(), v)
	}
	testutil.Eventually(t, waitLimit, func() bool {
		return nsDirect.Status().Revision == rev && nsBehind.Status().Revision == rev
	}, "both clients at the last publish on the first server")
	snapsDirect, snapsBehind := directCT.snapshots.Load(), behindCT.snapshots.Load()

	testutil.Eventually(t, waitLimit, func() bool {
		_, la := serverStatusz(t, a.url())
		_, lb := serverStatusz(t, b.url())
		return la != lb
	}, "one leader of the two servers")
	a.kill()
	killed := time.Now()
	for {
		if _, lb := serverStatusz(t, b.url()); lb {
			t.Logf("the second server leads %v after the first was killed", time.Since(killed).Round(time.Millisecond))
			break
		}
		if time.Since(killed) > 10*time.Second {
			t.Fatal("the second server does not lead 10s after the first was killed")
		}
		time.Sleep(50 * time.Millisecond)
	}
	for v := 4; v <= 8; v++ {
		rev = publish(b.url(), v)
	}
	testutil.Eventually(t, waitLimit, func() bool {
		return nsDirect.Status().Revision == rev && nsBehind.Status().Revision == rev
	}, "both clients at the last publish on the second server")
	if ep := nsDirect.Status().Endpoint; ep != b.url() {
		t.Errorf("the direct client is served by %q, want the second server %q", ep, b.url())
	}
	if n := directCT.snapshots.Load() - snapsDirect; n != 0 {
		t.Errorf("the direct client fetched %d snapshots in the failover, want 0", n)
	}
	if n := behindCT.snapshots.Load() - snapsBehind; n != 0 {
		t.Errorf("the relay's client fetched %d snapshots in the failover, want 0", n)
	}
	recDirect.checkIncreasing(t, "the direct client", rev)
	recBehind.checkIncreasing(t, "the relay's client", rev)
}
