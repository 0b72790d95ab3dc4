package relay_test

import (
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/holdfast-dev/holdfast/holdfasttest"
	"github.com/holdfast-dev/holdfast/internal/testutil"
	"github.com/holdfast-dev/holdfast/relay"
	"github.com/holdfast-dev/holdfast/transport"
)

// TestNamespaceTableFlood: requests naming thousands of namespaces that
// do not exist upstream take no lasting place in the relay's table, each
// is asked for upstream once at most while it is remembered absent, and a
// real namespace published during the flood is served at once.
func TestNamespaceTableFlood(t *testing.T) {
	origin := holdfasttest.NewServer(t)
	mustPublish(t, origin, "real", map[string]any{"v": 1})
	r, url := startRelay(t, origin.URL(), relay.WithMaxNamespaces(500))
	if status, _, _ := getSnapshot(t, url, "real"); status != http.StatusOK {
		t.Fatalf("real: %d", status)
	}
	before := origin.Stats().Snapshots

	const ghosts = 2000 // four times the table
	var mu sync.Mutex
	statuses := map[int]int{}
	absentAt := map[string]time.Time{} // when each ghost got its 404
	maxTable := 0
	flood := func(list []string) {
		var wg sync.WaitGroup
		names := make(chan string)
		hc := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 16}, Timeout: 10 * time.Second}
		defer hc.CloseIdleConnections()
		for range 16 {
			wg.Go(func() {
				for ns := range names {
					resp, err := hc.Get(url + transport.PathSnapshot + "?ns=" + ns)
					if err != nil {
						t.Error(err)
						continue
					}
					resp.Body.Close()
					n := len(r.Namespaces())
					mu.Lock()
					statuses[resp.StatusCode]++
					if resp.StatusCode == http.StatusNotFound {
						absentAt[ns] = time.Now()
					}
					maxTable = max(maxTable, n)
					mu.Unlock()
				}
			})
		}
		for _, ns := range list {
			names <- ns
		}
		close(names)
		wg.Wait()
	}
	var all []string
	for i := range ghosts {
		all = append(all, fmt.Sprintf("ghost-%d", i))
	}
	flood(all)
	for code := range statuses {
		if code != http.StatusNotFound && code != http.StatusServiceUnavailable {
			t.Errorf("a ghost got %d (%v)", code, statuses)
		}
	}
	if maxTable > 100+1 {
		t.Errorf("the table held %d namespaces during the flood, want at most the 100 probed at once and real", maxTable)
	}
	// The real one, and a new one published now, are served.
	mustPublish(t, origin, "fresh", map[string]any{"v": 1})
	for _, ns := range []string{"real", "fresh"} {
		testutil.Eventually(t, waitLimit, func() bool {
			status, _, _ := getSnapshot(t, url, ns)
			return status == http.StatusOK
		}, ns+" served during the flood")
	}
	testutil.Eventually(t, waitLimit, func() bool {
		for _, st := range r.Namespaces() {
			if strings.HasPrefix(st.Namespace, "ghost-") {
				return false
			}
		}
		return true
	}, "no ghost left in the table")
	fetched := origin.Stats().Snapshots - before
	if fetched > ghosts+10 {
		t.Errorf("the origin served %d snapshots for %d ghosts", fetched, ghosts)
	}
	// Again at once, the ghosts answered 404 in the last 3 s: the relay
	// remembers them absent (5 s) and the origin hears of none of them.
	var recent []string
	mu.Lock()
	for ns, at := range absentAt {
		if time.Since(at) < 3*time.Second {
			recent = append(recent, ns)
		}
	}
	clear(statuses)
	mu.Unlock()
	fetchedBefore := origin.Stats().Snapshots
	start := time.Now()
	flood(recent)
	if again := origin.Stats().Snapshots - fetchedBefore; again > 0 && time.Since(start) < 2*time.Second {
		t.Errorf("the origin served %d snapshots for %d ghosts it had answered 404 for within 3 s", again, len(recent))
	}
	if statuses[http.StatusNotFound] != len(recent) && time.Since(start) < 2*time.Second {
		t.Errorf("ghosts remembered absent: %v, want %d 404s", statuses, len(recent))
	}
	t.Logf("first flood: %d upstream snapshots for %d ghosts; again, %d of them remembered absent: %v", fetched, ghosts, len(recent), statuses)
}
