package etcd_test

import (
	"context"
	"net"
	"strconv"
	"testing"
	"time"

	"github.com/holdfast-dev/holdfast/config"
	"github.com/holdfast-dev/holdfast/internal/sdksuite"
	"github.com/holdfast-dev/holdfast/internal/testutil/nstest"
	"github.com/holdfast-dev/holdfast/relay"
)

// TestRelayOverEtcd: a relay follows the 3-member cluster through the etcd
// source (one watch stream for every namespace it serves) and serves its
// clients over HTTP; the cluster's leader is killed and every client still
// converges, with etcd's revisions unchanged.
func TestRelayOverEtcd(t *testing.T) {
	cl := startCluster(t)
	pub := newSource(t, cl.endpoints())
	up := newSpy(newSource(t, cl.endpoints()))
	r, err := relay.New(up, relay.WithHeartbeat(testHeartbeat), relay.WithLogger(sdksuite.Logger(t)))
	if err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- r.Serve(ctx, l) }()
	defer func() {
		cancel()
		if err := <-served; err != nil {
			t.Errorf("Serve: %v", err)
		}
	}()
	url := "http://" + l.Addr().String()

	names := []string{"relay.a", "relay.b"}
	for _, n := range names {
		publish(t, pub, n, map[string]any{"v": 0})
	}
	var nss []*config.Namespace
	var nsNames []string
	for range 3 {
		c := sdksuite.NewDefaultClient(t, sdksuite.Endpoint(url), config.WithReconnectBackoff(5*time.Millisecond, 100*time.Millisecond),
			config.WithLogger(sdksuite.Logger(t)))
		for _, n := range names {
			nss = append(nss, sdksuite.Open(t, c, n))
			nsNames = append(nsNames, n)
		}
	}
	last := map[string]int64{}
	round := func(from, to int) {
		t.Helper()
		for i := from; i <= to; i++ {
			for _, n := range names {
				last[n] = publish(t, pub, n, map[string]any{"v": i})
			}
		}
		for j, ns := range nss {
			nstest.WaitRevision(t, ns, last[nsNames[j]], waitLimit)
			if v, _ := ns.Get("v"); v.String() != strconv.Itoa(to) {
				t.Fatalf("%s: v = %s, want %d", nsNames[j], v, to)
			}
			if st := ns.Status(); st.Revision != last[nsNames[j]] {
				t.Fatalf("%s at revision %d, want etcd's %d", nsNames[j], st.Revision, last[nsNames[j]])
			}
		}
	}
	round(1, 3)
	up.mu.Lock()
	streams, watches := up.streams, up.watches
	up.mu.Unlock()
	if watches != 0 || streams > len(names) {
		t.Errorf("the relay opened %d streams and %d single watches on etcd; want its one stream (restarted per join at most)", streams, watches)
	}

	cl.kill(cl.leader(t))
	round(4, 5)
	for _, st := range r.Namespaces() {
		if st.Unconfirmed || !st.Ready {
			t.Errorf("relay namespace %s: %+v", st.Namespace, st)
		}
	}
	t.Logf("relay over etcd: %d stream attempts before the leader died", streams)
}
