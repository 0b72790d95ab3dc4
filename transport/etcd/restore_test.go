package etcd_test

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/holdfast-dev/holdfast/config"
	"github.com/holdfast-dev/holdfast/internal/sdksuite"
	"github.com/holdfast-dev/holdfast/internal/testutil"
	"github.com/holdfast-dev/holdfast/internal/testutil/nstest"
	"github.com/holdfast-dev/holdfast/transport"
)

// restoreConverge bounds how long after the first publish to the restored
// cluster the client may take to serve the restored history: the
// linearizable snapshot proves new history at once, so well under the
// client's bound for evidence that proves nothing by itself (10 s or more).
const restoreConverge = 8 * time.Second

// TestClientAfterRestoreFromBackup restores a 3-member cluster from a copy
// of its data directories under a running client: the same cluster id
// (store id) with lower revisions, a history without the changes published
// after the copy. The client never reports StateFresh on a confirmation
// made against the restored store while it serves the lost changes, and
// after one new publish it converges, promptly, to the restored content
// plus that change: it resnapshots (its watch cursor is above the restored
// head: transport.ErrCursorAhead) and, the snapshot being linearizable,
// resets its monotonic floor and applies a revision below the one it had.
func TestClientAfterRestoreFromBackup(t *testing.T) {
	cl := startCluster(t)
	pub := newSource(t, cl.endpoints())
	const name, kept, lost = "restored", 3, 3
	for i := 1; i <= kept; i++ {
		publish(t, pub, name, map[string]any{"v": i, "era": "backup", "b" + strconv.Itoa(i): i})
	}
	src := &countingSource{Source: newSource(t, cl.endpoints())}
	ns := sdksuite.Open(t, sdksuite.NewClient(t, sdksuite.Source(src)), name)

	backup := cl.backup(t) // stops the cluster, copies the data, restarts it
	var applied int64
	for j := 1; j <= lost; j++ {
		applied = publish(t, pub, name, map[string]any{"v": 10 + j, "era": "lost", "lost" + strconv.Itoa(j): j})
	}
	nstest.WaitRevision(t, ns, applied, waitLimit)
	testutil.Eventually(t, waitLimit, func() bool { return ns.Status().State == config.StateFresh }, "fresh before the restore")
	storeID := ns.Status().StoreID
	snapshots := src.snapshots.Load()

	cl.killAll()
	cl.putBack(t, backup)
	// From here on every confirmation comes from the restored store, which
	// has no "lost" era.
	restarted := time.Now()
	violations := watchFreshLost(t, ns, restarted)
	cl.restartAll(t)
	rev := publish(t, pub, name, map[string]any{"v": 100, "era": "new"})
	published := time.Now()
	if rev >= applied {
		t.Fatalf("the restored store's new revision %d is not below the applied %d: nothing to test", rev, applied)
	}

	converged := func() bool {
		snap := ns.Snapshot()
		if snap.Revision() != rev || snap.String("era", "") != "new" || snap.Int("v", 0) != 100 {
			return false
		}
		for i := 1; i <= kept; i++ {
			if snap.Int("b"+strconv.Itoa(i), 0) != i {
				return false
			}
		}
		for j := 1; j <= lost; j++ {
			if _, ok := snap.Get("lost" + strconv.Itoa(j)); ok {
				return false
			}
		}
		return ns.Status().State == config.StateFresh
	}
	reportViolations := func() {
		for _, v := range violations() {
			t.Error(v)
		}
	}
	if !testutil.Wait(time.Until(published.Add(restoreConverge)), converged) {
		reportViolations()
		snap := ns.Snapshot()
		t.Fatalf("not converged %v after the publish to the restored store: serving revision %d (era %q, v=%d; want revision %d, era \"new\", v=100), status %+v",
			restoreConverge, snap.Revision(), snap.String("era", ""), snap.Int("v", 0), rev, ns.Status())
	}
	t.Logf("converged %v after the publish (%v after the restart began): revision %d, from %d",
		time.Since(published).Round(time.Millisecond), time.Since(restarted).Round(time.Millisecond), rev, applied)

	reportViolations()
	if st := ns.Status(); st.StoreID != storeID {
		t.Errorf("store id %s after the restore; want the same %s (a restore keeps the cluster id)", st.StoreID, storeID)
	}
	if src.snapshots.Load() == snapshots {
		t.Error("converged without a new snapshot")
	}
	if !src.sawError(transport.ErrCursorAhead) {
		t.Error("no watch ended with ErrCursorAhead")
	}
	// And it follows the restored store on from there.
	next := publish(t, pub, name, map[string]any{"v": 101})
	nstest.WaitRevision(t, ns, next, waitLimit)
}

// watchFreshLost samples ns until the test ends, and returns a function
// that lists the times it was StateFresh on a confirmation made after since
// while serving the "lost" era. Each sample reads the status, the data and
// the status again, and counts only when both statuses are the same Fresh
// confirmation (no state change, no new confirmation in between): the
// data read was served under it.
func watchFreshLost(t *testing.T, ns *config.Namespace, since time.Time) func() []string {
	var mu sync.Mutex
	var found []string
	var last time.Time // the confirmation found last: each is listed once
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		tick := time.NewTicker(time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			st := ns.Status()
			snap := ns.Snapshot()
			st2 := ns.Status()
			if st.State != config.StateFresh || st2.State != config.StateFresh || !st.Since.Equal(st2.Since) ||
				!st.LastConfirmed.Equal(st2.LastConfirmed) || !st.LastConfirmed.After(since) || snap.String("era", "") != "lost" {
				continue
			}
			mu.Lock()
			if !st.LastConfirmed.Equal(last) && len(found) < 5 {
				last = st.LastConfirmed
				found = append(found, fmt.Sprintf("Fresh (confirmed %v after the restored cluster started) while serving revision %d of the lost era",
					st.LastConfirmed.Sub(since).Round(time.Millisecond), snap.Revision()))
			}
			mu.Unlock()
		}
	}()
	stop := func() { cancel(); wg.Wait() }
	t.Cleanup(stop)
	return func() []string {
		stop()
		mu.Lock()
		defer mu.Unlock()
		return found
	}
}
