package etcd_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/holdfast-dev/holdfast/config"
	"github.com/holdfast-dev/holdfast/internal/sdksuite"
	"github.com/holdfast-dev/holdfast/internal/testutil"
	"github.com/holdfast-dev/holdfast/internal/testutil/nstest"
	"github.com/holdfast-dev/holdfast/transport/etcd"
)

// recorder keeps the revisions a namespace's callbacks saw and any that
// came twice or out of order.
type recorder struct {
	mu         sync.Mutex
	revs       []int64
	violations []string
}

func record(ns *config.Namespace) *recorder {
	r := &recorder{}
	ns.OnAnyChange(func(cs config.ChangeSet) {
		r.mu.Lock()
		defer r.mu.Unlock()
		if n := len(r.revs); n > 0 && cs.Revision <= r.revs[n-1] {
			r.violations = append(r.violations, fmt.Sprintf("revision %d after %d", cs.Revision, r.revs[n-1]))
		}
		r.revs = append(r.revs, cs.Revision)
	})
	return r
}

// publishOnce publishes round i (n=i and a key of its own) until it is
// known to be committed exactly once: after an error it reads n back
// before trying again, since a failed request may still have committed.
func publishOnce(t testing.TB, src *etcd.Source, ns string, i int) {
	t.Helper()
	puts := map[string]json.RawMessage{"n": json.RawMessage(strconv.Itoa(i)), "k" + strconv.Itoa(i): json.RawMessage(strconv.Itoa(i))}
	testutil.EventuallyNil(t, waitLimit, func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		_, err := write(ctx, src, ns, puts, nil)
		cancel()
		if err == nil {
			return nil
		}
		ctx, cancel = context.WithTimeout(context.Background(), 2*time.Second)
		resp, gerr := src.Client().Get(ctx, etcd.Prefix(ns)+"n")
		cancel()
		if gerr == nil && len(resp.Kvs) == 1 && string(resp.Kvs[0].Value) == strconv.Itoa(i) {
			return nil // it did commit
		}
		return err
	}, "publish %d", i)
}

// TestKillOneMemberWhilePublishing SIGKILLs the leader in the middle of
// 120 publishes: the clients, spread over the members, keep converging
// through the others; every round's key arrives (nothing lost), and no
// revision is applied twice or out of order.
func TestKillOneMemberWhilePublishing(t *testing.T) {
	cl := startCluster(t)
	pub := newSource(t, cl.endpoints())
	publish(t, pub, "ha", map[string]any{"n": 0})

	var namespaces []*config.Namespace
	var recs []*recorder
	for i := range 3 {
		// Each client lists the members starting at a different one.
		eps := append(cl.endpoints()[i:], cl.endpoints()[:i]...)
		ns := sdksuite.Open(t, sdksuite.NewClient(t, sdksuite.Source(newSource(t, eps))), "ha")
		namespaces = append(namespaces, ns)
		recs = append(recs, record(ns))
	}
	const rounds = 120
	leader := cl.leader(t)
	for i := 1; i <= rounds; i++ {
		if i == rounds/3 {
			t.Logf("killing the leader, member %d", leader)
			cl.kill(leader)
		}
		publishOnce(t, pub, "ha", i)
	}
	resp, err := pub.Client().Get(context.Background(), etcd.Prefix("ha"), clientv3.WithPrefix())
	if err != nil {
		t.Fatal(err)
	}
	var head int64
	for _, kv := range resp.Kvs {
		head = max(head, kv.ModRevision)
	}
	for c, ns := range namespaces {
		nstest.WaitRevision(t, ns, head, waitLimit)
		if got := ns.Int("n", -1); got != rounds {
			t.Errorf("client %d: n = %d; want %d", c, got, rounds)
		}
		for i := 1; i <= rounds; i++ {
			if got := ns.Int("k"+strconv.Itoa(i), -1); got != i {
				t.Errorf("client %d: k%d = %d: lost", c, i, got)
			}
		}
		if ns.Rejected() != 0 {
			t.Errorf("client %d rejected %d change sets", c, ns.Rejected())
		}
	}
	for c, r := range recs {
		r.mu.Lock()
		for _, v := range r.violations {
			t.Errorf("client %d: %s", c, v)
		}
		t.Logf("client %d: %d change sets for %d rounds", c, len(r.revs), rounds)
		r.mu.Unlock()
	}
}

// TestKillTwoMembersServesStale SIGKILLs two of three members: the clients
// keep serving their data, report it stale with the error, and converge
// once quorum returns.
func TestKillTwoMembersServesStale(t *testing.T) {
	cl := startCluster(t)
	pub := newSource(t, cl.endpoints())
	publish(t, pub, "quorum", map[string]any{"v": 1})
	var namespaces []*config.Namespace
	for i := range 2 {
		eps := append(cl.endpoints()[i:], cl.endpoints()[:i]...)
		namespaces = append(namespaces, sdksuite.Open(t, sdksuite.NewClient(t, sdksuite.Source(newSource(t, eps))), "quorum"))
	}

	cl.kill(0)
	cl.kill(1)
	for c, ns := range namespaces {
		testutil.Eventually(t, waitLimit, func() bool {
			st := ns.Status()
			return st.State == config.StateStale && st.LastError.Kind != config.ErrorNone
		}, fmt.Sprintf("client %d stale with an error", c))
		if got := ns.Int("v", -1); got != 1 {
			t.Errorf("client %d serves v=%d while stale; want the last good 1", c, got)
		}
		t.Logf("client %d: %+v", c, ns.Status().LastError)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	_, err := write(ctx, pub, "quorum", map[string]json.RawMessage{"v": json.RawMessage("9")}, nil)
	cancel()
	if err == nil {
		t.Fatal("a publish succeeded without quorum")
	}
	// Still stale a while later: nothing confirms data without quorum.
	for c, ns := range namespaces {
		if st := ns.Status(); st.State != config.StateStale {
			t.Errorf("client %d: %v without quorum", c, st.State)
		}
	}

	cl.restart(t, 0)
	cl.restart(t, 1)
	cl.waitHealthy(t)
	rev := publish(t, pub, "quorum", map[string]any{"v": 2})
	for c, ns := range namespaces {
		nstest.WaitRevision(t, ns, rev, waitLimit)
		testutil.Eventually(t, waitLimit, func() bool { return ns.Status().State == config.StateFresh }, fmt.Sprintf("client %d fresh", c))
		if got := ns.Int("v", -1); got != 2 {
			t.Errorf("client %d: v=%d", c, got)
		}
	}
}

// TestThroughGRPCProxy: clients behind `etcd grpc-proxy` get changes and
// progress (the cursor moves while their namespace is quiet).
func TestThroughGRPCProxy(t *testing.T) {
	cl := sharedCluster(t)
	proxyURL, _ := startGRPCProxy(t, cl)
	pub := newSource(t, cl.endpoints())
	publish(t, pub, "proxied", map[string]any{"v": 1})
	ns := sdksuite.Open(t, sdksuite.NewClient(t, sdksuite.Source(newSource(t, []string{proxyURL}))), "proxied")
	rev := publish(t, pub, "proxied", map[string]any{"v": 2})
	nstest.WaitRevision(t, ns, rev, waitLimit)
	other := publish(t, pub, "proxied.other", map[string]any{"x": 1})
	testutil.Eventually(t, waitLimit, func() bool { return ns.Status().Cursor >= other }, "the cursor past another namespace's publish")
	if st := ns.Status(); st.State != config.StateFresh || st.LastError.Kind != config.ErrorNone {
		t.Errorf("status through the proxy = %+v", st)
	}
}
