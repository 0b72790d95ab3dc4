package relay_test

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/holdfast-dev/holdfast/config"
	"github.com/holdfast-dev/holdfast/holdfasttest"
	"github.com/holdfast-dev/holdfast/internal/testutil"
	"github.com/holdfast-dev/holdfast/relay"
	"github.com/holdfast-dev/holdfast/transport"
)

// ackedAt reports whether the origin lists exactly the clients ids of ns,
// once each, every one having applied rev.
func ackedAt(origin *holdfasttest.Server, ns string, rev int64, ids ...string) bool {
	var got []string
	for _, cs := range origin.Clients() {
		if cs.Namespace != ns {
			continue
		}
		if cs.AckedRevision != rev {
			return false
		}
		got = append(got, cs.ClientID)
	}
	slices.Sort(got)
	ids = slices.Sorted(slices.Values(ids))
	return slices.Equal(got, ids)
}

// The relay reports its clients' outcomes as cohort reports: the origin
// lists each client behind it, with what it applied, and without a per
// client ack. An origin that forgot the cohort (a store reset) hears its
// members again and lists them all.
func TestRelayReportsItsClientsAsACohort(t *testing.T) {
	origin := holdfasttest.NewServer(t, holdfasttest.WithHeartbeat(200*time.Millisecond))
	rev := mustPublish(t, origin, "app", map[string]any{"v": 1})
	_, url := startRelay(t, origin.URL())
	var ids []string
	var nss []*config.Namespace
	for range 6 {
		c := newClient(t, url)
		ids = append(ids, c.ClientID())
		nss = append(nss, openNamespace(t, c, "app"))
	}
	testutil.Eventually(t, waitLimit, func() bool { return ackedAt(origin, "app", rev, ids...) }, "the origin lists every client behind the relay")
	if st := origin.Stats(); st.Cohorts == 0 {
		t.Fatalf("no cohort reports at the origin: %+v", st)
	}

	origin.ResetStore() // forgets every ack, and the relay's cohort
	rev = mustPublish(t, origin, "app", map[string]any{"v": 2})
	for _, ns := range nss {
		testutil.Eventually(t, waitLimit, func() bool { return valueOf(ns, "v") == "2" }, "every client at v=2")
	}
	testutil.Eventually(t, waitLimit, func() bool { return ackedAt(origin, "app", rev, ids...) }, "the origin lists every client again")
	st, err := origin.Status("app")
	if err != nil {
		t.Fatal(err)
	}
	if st.Clients != len(ids) || st.Acked != len(ids) {
		t.Errorf("status %+v, want %d clients, all acked", st, len(ids))
	}
}

// A client's nack travels in the cohort too, with its error.
func TestRelayCohortCarriesNacks(t *testing.T) {
	origin := holdfasttest.NewServer(t, holdfasttest.WithHeartbeat(200*time.Millisecond))
	mustPublish(t, origin, "app", map[string]any{"port": 80})
	_, url := startRelay(t, origin.URL())
	c := newClient(t, url)
	ns := openNamespace(t, c, "app", config.Schema([]byte(`{"type":"object","properties":{"port":{"type":"integer","minimum":1}}}`)))
	bad := mustPublish(t, origin, "app", map[string]any{"port": 0})
	testutil.Eventually(t, waitLimit, func() bool {
		for _, cs := range origin.Clients() {
			if cs.ClientID == c.ClientID() && cs.NackedRevision == bad && cs.NackError != "" {
				return true
			}
		}
		return false
	}, "the origin hears the nack")
	if v, _ := ns.Get("port"); v.String() != "80" {
		t.Errorf("port = %v, want the last good 80", v)
	}
}

// Through a chain of two relays the origin still lists each client, and
// a client that moves from one relay to another is listed once, with its
// newest outcome (each relay's cohort names it).
func TestRelayCohortsThroughAChainAndAcrossRelays(t *testing.T) {
	origin := holdfasttest.NewServer(t, holdfasttest.WithHeartbeat(200*time.Millisecond))
	rev := mustPublish(t, origin, "app", map[string]any{"v": 1})
	_, mid := startRelay(t, origin.URL())
	_, edge := startRelay(t, mid)
	chained := newClient(t, edge)
	openNamespace(t, chained, "app")

	var stop func()
	_, first := startRelay(t, origin.URL(), withStop(&stop))
	_, second := startRelay(t, origin.URL())
	mover := newClient(t, first, config.WithEndpoints(first, second))
	moved := openNamespace(t, mover, "app")
	testutil.Eventually(t, waitLimit, func() bool { return ackedAt(origin, "app", rev, chained.ClientID(), mover.ClientID()) }, "both clients listed")

	stop()
	rev = mustPublish(t, origin, "app", map[string]any{"v": 2})
	testutil.Eventually(t, waitLimit, func() bool { return valueOf(moved, "v") == "2" }, "the mover at v=2 through the second relay")
	if ep := moved.Status().Endpoint; ep != second {
		t.Fatalf("the mover is served by %q, want %q", ep, second)
	}
	testutil.Eventually(t, waitLimit, func() bool { return ackedAt(origin, "app", rev, chained.ClientID(), mover.ClientID()) }, "both listed once, at the new revision")
}

// A relay id the upstream would refuse in every report is refused at New.
func TestRelayRefusesAnIDItsUpstreamWould(t *testing.T) {
	hs, err := transport.NewHTTPSource("http://127.0.0.1:1")
	if err != nil {
		t.Fatal(err)
	}
	defer hs.Close()
	for _, id := range []string{"relay\n1", strings.Repeat("r", transport.MaxClientIDBytes+1)} {
		if r, err := relay.New(hs, relay.WithID(id)); err == nil {
			_ = r.Close()
			t.Errorf("New(WithID(%q)) succeeded", id)
		}
	}
}

// A client's SDK version reaches the origin with its reports: directly,
// and through a chain of two relays (their cohort reports carry it).
func TestRelayCarriesTheSDKVersion(t *testing.T) {
	origin := holdfasttest.NewServer(t, holdfasttest.WithHeartbeat(200*time.Millisecond))
	mustPublish(t, origin, "app", map[string]any{"v": 1})
	_, mid := startRelay(t, origin.URL())
	_, edge := startRelay(t, mid)
	direct := newClient(t, origin.URL())
	openNamespace(t, direct, "app")
	chained := newClient(t, edge)
	openNamespace(t, chained, "app")
	versions := func() map[string]string {
		out := map[string]string{}
		for _, cs := range origin.Clients() {
			out[cs.ClientID] = cs.SDKVersion
		}
		return out
	}
	testutil.Eventually(t, waitLimit, func() bool {
		v := versions()
		return v[direct.ClientID()] == config.Version && v[chained.ClientID()] == config.Version
	}, "the origin lists both clients at version "+config.Version)
	if st := origin.Stats(); st.Cohorts == 0 {
		t.Errorf("no cohort reports at the origin: %+v", st)
	}
}
