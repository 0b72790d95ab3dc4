package rollout_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/holdfast-dev/holdfast/config"
	"github.com/holdfast-dev/holdfast/controlapi"
	"github.com/holdfast-dev/holdfast/internal/fakeserver"
	"github.com/holdfast-dev/holdfast/internal/rollout"
	"github.com/holdfast-dev/holdfast/internal/testutil"
	"github.com/holdfast-dev/holdfast/relay"
	"github.com/holdfast-dev/holdfast/schema"
	"github.com/holdfast-dev/holdfast/transport"
)

// End-to-end proofs of staged rollouts: real SDK clients with checks of
// their own (schemas, some stricter than others) against the reference
// server, each change a rollout over stages 1, 10, 100.

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const (
	proofNS     = "proof.routes"
	fleetSize   = 100
	waitLimit   = 2 * time.Minute
	baseRoute   = `{"cluster":"c1"}`
	strictDigit = "3" // clients whose ids end in it also reject new-field
)

// schemaNoBad rejects any string containing BAD, at any depth of objects.
const schemaNoBad = `{"$defs":{"v":{"not":{"type":"string","pattern":"BAD"},"additionalProperties":{"$ref":"#/$defs/v"}}},
 "additionalProperties":{"$ref":"#/$defs/v"}}`

// schemaStrict also rejects a route with the field new-field. Naming
// route/a under "properties" takes it out of "additionalProperties", so its
// own schema must check for BAD too.
const schemaStrict = `{"$defs":{"v":{"not":{"type":"string","pattern":"BAD"},"additionalProperties":{"$ref":"#/$defs/v"}}},
 "additionalProperties":{"$ref":"#/$defs/v"},
 "properties":{"route/a":{"$ref":"#/$defs/v","propertyNames":{"not":{"const":"new-field"}}}}}`

// TestProofSchemas checks the fleet's own checks, which every scenario
// relies on: each schema rejects exactly what it is meant to.
func TestProofSchemas(t *testing.T) {
	for _, tc := range []struct {
		route            string
		noBad, strictToo bool // whether each schema rejects it
	}{
		{baseRoute, false, false},
		{`{"cluster":"c2"}`, false, false},
		{`{"cluster":"BAD"}`, true, true},
		{`{"cluster":"c1","new-field":true}`, false, true},
		{`{"cluster":"c1","new-field":"BAD"}`, true, true},
	} {
		for _, s := range []struct {
			name, src string
			reject    bool
		}{{"schemaNoBad", schemaNoBad, tc.noBad}, {"schemaStrict", schemaStrict, tc.strictToo}} {
			sch, err := schema.Compile([]byte(s.src))
			if err != nil {
				t.Fatalf("%s: %v", s.name, err)
			}
			for _, key := range []string{"route/a", "cluster/c1"} {
				err := sch.ValidateValues(map[string]json.RawMessage{key: raw(tc.route)})
				// Only route/a is checked for new-field.
				want := s.reject && (key == "route/a" || strings.Contains(tc.route, "BAD"))
				if (err != nil) != want {
					t.Errorf("%s on %s=%s: error %v, want rejected %v", s.name, key, tc.route, err, want)
				}
			}
		}
	}
}

func clientID(i int) string { return fmt.Sprintf("app-%03d", i) }

func strict(id string) bool { return strings.HasSuffix(id, strictDigit) }

// proofContent is 1,000 cluster keys and route/a.
func proofContent() map[string]any {
	m := map[string]any{"route/a": json.RawMessage(baseRoute)}
	for i := range 1000 {
		m[fmt.Sprintf("cluster/c%d", i)] = map[string]any{"host": fmt.Sprintf("10.0.%d.%d", i/256, i%256), "weight": 1}
	}
	return m
}

// member is one SDK client of the fleet and what it ever served.
type member struct {
	id     string
	client *config.Client
	ns     *config.Namespace
	mu     sync.Mutex
	routes []string // every route/a it served, in order
}

func (m *member) served(sub string) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return slices.ContainsFunc(m.routes, func(r string) bool { return strings.Contains(r, sub) })
}

func (m *member) route() string {
	v, _ := m.ns.Get("route/a")
	return string(v.Raw())
}

type fleet []*member

func startFleet(t testing.TB, url string, n int, opts ...config.Option) fleet {
	t.Helper()
	var f fleet
	for i := range n {
		f = append(f, startMember(t, url, proofNS, clientID(i), opts...))
	}
	return f
}

func startMember(t testing.TB, url, nsName, id string, opts ...config.Option) *member {
	t.Helper()
	// A generous idle timeout: 100 clients of 1,000 keys under -race on a
	// busy machine must not turn slow replies into reconnects.
	c, err := config.New(append([]config.Option{config.WithEndpoint(url), config.WithClientID(id),
		config.WithReconnectBackoff(5*time.Millisecond, 100*time.Millisecond), config.WithStreamIdleTimeout(15 * time.Second)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	sch := schemaNoBad
	if strict(id) {
		sch = schemaStrict
	}
	ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
	defer cancel()
	ns, err := c.Namespace(ctx, nsName, config.Schema([]byte(sch)))
	if err != nil {
		t.Fatalf("%s: open: %v", id, err)
	}
	m := &member{id: id, client: c, ns: ns}
	m.routes = append(m.routes, m.route())
	ns.OnChange("route/a", func(config.Change) {
		r := m.route()
		m.mu.Lock()
		m.routes = append(m.routes, r)
		m.mu.Unlock()
	})
	return m
}

// controlAPI drives the reference server over its real HTTP control API,
// through its client.
type controlAPI struct {
	t     testing.TB
	c     *controlapi.Client
	debug func() string
}

func newControlAPI(t testing.TB, url string, debug func() string) controlAPI {
	t.Helper()
	tr := &http.Transport{}
	t.Cleanup(tr.CloseIdleConnections)
	c, err := controlapi.NewClient(url, controlapi.WithHTTPClient(&http.Client{Transport: tr, Timeout: 10 * time.Second}))
	if err != nil {
		t.Fatal(err)
	}
	return controlAPI{t, c, debug}
}

func (c controlAPI) start(ns string, s controlapi.RolloutRequest) (id string, rev int64) {
	c.t.Helper()
	r, err := c.c.StartRollout(context.Background(), ns, s)
	if err != nil {
		c.t.Fatalf("starting a rollout of %s: %v", ns, err)
	}
	return r.ID, r.Revision
}

func (c controlAPI) get(ns, id string) controlapi.RolloutRecord {
	c.t.Helper()
	r, err := c.c.GetRollout(context.Background(), ns, id)
	if err != nil {
		c.t.Fatalf("rollout %s of %s: %v", id, ns, err)
	}
	return *r
}

// ended waits for the rollout to end and returns its record; on the
// deadline it shows the record as the server has it.
func (c controlAPI) ended(ns, id string) controlapi.RolloutRecord {
	c.t.Helper()
	var r controlapi.RolloutRecord
	if !testutil.Wait(waitLimit, func() bool { r = c.get(ns, id); return r.State != "running" }) {
		more := ""
		if c.debug != nil {
			more = c.debug()
		}
		c.t.Fatalf("rollout %s still running after %v: %+v %s", id, waitLimit, c.get(ns, id), more)
	}
	return r
}

// known waits until the server knows n clients of ns, each at ns's revision.
func (c controlAPI) known(ns string, n int) {
	c.t.Helper()
	testutil.Eventually(c.t, waitLimit, func() bool {
		st, err := c.c.Status(context.Background(), ns)
		if err != nil {
			c.t.Fatalf("status of %s: %v", ns, err)
		}
		return st.Clients >= n && st.Acked >= n
	}, fmt.Sprintf("%d clients acked %s", n, ns))
}

// firstStageWith is the first of stages whose members, by the rule every
// client applies, include a client that matches pick: the stage a bad
// change must stop at.
func firstStageWith(id string, ids []string, stages []float64, pick func(string) bool) float64 {
	var hashes []uint64
	for _, c := range ids {
		hashes = append(hashes, rollout.Hash(id, c))
	}
	var floor uint64
	for _, p := range stages {
		floor = rollout.Cut(hashes, p, floor)
		s := rollout.Staged{ID: id, Stage: p, Cut: floor}
		if slices.ContainsFunc(ids, func(c string) bool { return pick(c) && s.Member(c) }) {
			return p
		}
	}
	return 0
}

// describe says where the fleet stands, for a test that times out: how
// many clients serve each revision, and the status of a few of the last.
func (f fleet) describe() string {
	revs := map[int64]int{}
	low := f[0]
	for _, m := range f {
		revs[m.ns.Revision()]++
		if m.ns.Revision() < low.ns.Revision() {
			low = m
		}
	}
	return fmt.Sprintf("clients at each revision %v; %s: %v", revs, low.id, low.ns.Status())
}

func (f fleet) ids() []string {
	var out []string
	for _, m := range f {
		out = append(out, m.id)
	}
	return out
}

// converge waits until every client serves route/a == want.
func (f fleet) converge(t testing.TB, want string) {
	t.Helper()
	for _, m := range f {
		testutil.Eventually(t, waitLimit, func() bool { return m.route() == want }, m.id+" to serve route/a "+want)
	}
}

// countingListener counts the bytes the server writes to its clients.
type countingListener struct {
	net.Listener
	written *atomic.Int64
}

func (l countingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return countingConn{c, l.written}, nil
}

type countingConn struct {
	net.Conn
	written *atomic.Int64
}

func (c countingConn) Write(p []byte) (int, error) {
	n, err := c.Conn.Write(p)
	c.written.Add(int64(n))
	return n, err
}

func startOrigin(t testing.TB, written *atomic.Int64) *fakeserver.Server {
	t.Helper()
	opts := []fakeserver.Option{fakeserver.WithHeartbeat(time.Second)}
	if written != nil {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		opts = append(opts, fakeserver.WithListener(countingListener{l, written}))
	}
	srv, err := fakeserver.Start(opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Close() })
	if _, err := srv.Publish(proofNS, proofContent()); err != nil {
		t.Fatal(err)
	}
	return srv
}

func raw(s string) json.RawMessage { return json.RawMessage(s) }

func TestProofFourRollouts(t *testing.T) {
	var written atomic.Int64
	srv := startOrigin(t, &written)
	api := newControlAPI(t, srv.URL(), nil)
	f := startFleet(t, srv.URL(), fleetSize)
	api.known(proofNS, fleetSize)
	stages := []float64{1, 10, 100}

	t.Run("good change is promoted", func(t *testing.T) {
		api := newControlAPI(t, srv.URL(), f.describe)
		// The idle cost of the fleet's streams (heartbeats) over a second,
		// to take out of what the rollout's span cost.
		idleFrom, idleStart := written.Load(), time.Now()
		time.Sleep(time.Second)
		idleRate := float64(written.Load()-idleFrom) / time.Since(idleStart).Seconds()

		good := `{"cluster":"c2"}`
		before, start := written.Load(), time.Now()
		id, _ := api.start(proofNS, controlapi.RolloutRequest{Puts: map[string]json.RawMessage{"route/a": raw(good)}, Stages: stages, Bake: "50ms"})
		r := api.ended(proofNS, id)
		if r.State != "promoted" || r.Stage != 100 {
			t.Fatalf("rollout %+v, want promoted after stage 100", r)
		}
		f.converge(t, good)
		testutil.Eventually(t, waitLimit, func() bool { return api.get(proofNS, id).Acked >= fleetSize }, "every client's ack of the promotion")
		span := time.Since(start)
		// Bytes on the wire: every stage and the promotion reached 100
		// clients (and their acks were answered), against one full
		// snapshot each.
		spent := float64(written.Load()-before) - idleRate*span.Seconds()
		identity, gzipped := snapshotBytes(t, srv.URL(), proofNS, false), snapshotBytes(t, srv.URL(), proofNS, true)
		t.Logf("scenario 1: %.0f bytes written in %v through %d revisions beyond the heartbeats (%.0f B/s idle); "+
			"100 full snapshots: %d bytes (%.0fx), %d gzipped (%.0fx)",
			spent, span.Round(time.Millisecond), len(r.Revisions), idleRate, 100*identity, float64(100*identity)/spent,
			100*gzipped, float64(100*gzipped)/spent)
		if spent*10 > float64(100*identity) {
			t.Errorf("a rollout cost %.0f bytes, over a tenth of 100 snapshots (%d)", spent, 100*identity)
		}
		// Back to the base for the next scenarios.
		if _, err := srv.Publish(proofNS, map[string]any{"route/a": raw(baseRoute)}); err != nil {
			t.Fatal(err)
		}
		f.converge(t, baseRoute)
	})

	t.Run("BAD stops at 1%", func(t *testing.T) {
		api := newControlAPI(t, srv.URL(), f.describe)
		id, _ := api.start(proofNS, controlapi.RolloutRequest{Puts: map[string]json.RawMessage{"route/a": raw(`{"cluster":"BAD"}`)}, Stages: stages, Bake: "50ms"})
		r := api.ended(proofNS, id)
		f.converge(t, baseRoute)
		for _, m := range f {
			if m.served("BAD") {
				t.Errorf("%s served BAD: %v; %v", m.id, m.routes, m.ns.Status())
			}
		}
		if r.State != "reverted" || r.Stage != 1 || r.Nacked < 1 || r.Served != 0 {
			t.Fatalf("rollout %+v, want reverted at stage 1 with a nack and none served", r)
		}
	})

	t.Run("new-field stops at the first stage with a strict client", func(t *testing.T) {
		api := newControlAPI(t, srv.URL(), f.describe)
		id, _ := api.start(proofNS, controlapi.RolloutRequest{Puts: map[string]json.RawMessage{"route/a": raw(`{"cluster":"c1","new-field":true}`)}, Stages: stages, Bake: "50ms"})
		r := api.ended(proofNS, id)
		want := firstStageWith(id, f.ids(), stages, strict)
		if r.State != "reverted" || r.Stage != want {
			t.Fatalf("rollout %+v, want reverted at stage %v (the first with a client ending in %s)", r, want, strictDigit)
		}
		f.converge(t, baseRoute)
		for _, m := range f {
			if strict(m.id) && m.served("new-field") {
				t.Errorf("strict %s served new-field", m.id)
			}
		}
	})

	t.Run("new-field with prevalidation stops before any strict client", func(t *testing.T) {
		api := newControlAPI(t, srv.URL(), f.describe)
		id, _ := api.start(proofNS, controlapi.RolloutRequest{Puts: map[string]json.RawMessage{"route/a": raw(`{"cluster":"c1","new-field":true}`)}, Stages: stages, Bake: "50ms", Prevalidate: true, ReportTimeout: "2m"})
		r := api.ended(proofNS, id)
		if r.State != "reverted" || r.Stage != 1 {
			t.Fatalf("rollout %+v, want reverted at stage 1", r)
		}
		testutil.Eventually(t, waitLimit, func() bool { r = api.get(proofNS, id); return r.WouldNack == fleetSize/10 }, "ten would-nacks")
		f.converge(t, baseRoute)
		for _, m := range f {
			if strict(m.id) && m.served("new-field") {
				t.Errorf("strict %s served new-field", m.id)
			}
		}
	})
}

// snapshotBytes is the size of one snapshot body of ns, gzipped as the
// SDK asks for it, or not.
func snapshotBytes(t testing.TB, url, ns string, gzipped bool) int64 {
	t.Helper()
	req, err := http.NewRequest("GET", url+transport.PathSnapshot+"?ns="+ns, nil)
	if err != nil {
		t.Fatal(err)
	}
	enc := "identity"
	if gzipped {
		enc = "gzip"
	}
	req.Header.Set("Accept-Encoding", enc) // set by hand: the transport then leaves the body as sent
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	n, err := io.Copy(io.Discard, resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// startRelay runs a relay of url on 127.0.0.1 and returns its URL.
func startRelay(t testing.TB, url string) string {
	t.Helper()
	hs, err := transport.NewHTTPSource(url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = hs.Close() })
	r, err := relay.New(hs, relay.WithHeartbeat(200*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Serve(ctx, l) }()
	t.Cleanup(func() {
		cancel()
		<-done
		_ = r.Close()
	})
	return "http://" + l.Addr().String()
}

// TestProofThroughARelay: the same gates with every client behind a relay,
// which holds no per-client state: it forwards the acks, nacks and
// would-nacks, and passes the staged change on as data.
func TestProofThroughARelay(t *testing.T) {
	srv := startOrigin(t, nil)
	api := newControlAPI(t, srv.URL(), nil)
	f := startFleet(t, startRelay(t, srv.URL()), 20)
	api.known(proofNS, len(f))
	stages := []float64{5, 50, 100}

	good := `{"cluster":"c9"}`
	id, _ := api.start(proofNS, controlapi.RolloutRequest{Puts: map[string]json.RawMessage{"route/a": raw(good)}, Stages: stages, Bake: "20ms"})
	if r := api.ended(proofNS, id); r.State != "promoted" {
		t.Fatalf("through a relay: %+v, want promoted", r)
	}
	f.converge(t, good)

	id, _ = api.start(proofNS, controlapi.RolloutRequest{Puts: map[string]json.RawMessage{"route/a": raw(`{"cluster":"c1","new-field":1}`)}, Stages: stages, Bake: "20ms", Prevalidate: true, ReportTimeout: "2m"})
	r := api.ended(proofNS, id)
	if r.State != "reverted" || r.Stage != 5 {
		t.Fatalf("through a relay: %+v, want reverted at stage 5", r)
	}
	testutil.Eventually(t, waitLimit, func() bool { return api.get(proofNS, id).WouldNack == 2 }, "would-nacks through the relay")
	f.converge(t, good)
}

// TestProofAbortDuringBake: an operator's abort while a stage bakes
// reverts at once: the clients that took the change return to the base,
// and the history tells each revision's kind.
func TestProofAbortDuringBake(t *testing.T) {
	srv := startOrigin(t, nil)
	api := newControlAPI(t, srv.URL(), nil)
	f := startFleet(t, srv.URL(), 20)
	api.known(proofNS, len(f))
	staged := `{"cluster":"c5"}`
	id, _ := api.start(proofNS, controlapi.RolloutRequest{Puts: map[string]json.RawMessage{"route/a": raw(staged)}, Stages: []float64{50, 100}, Bake: "1h"})
	var baking controlapi.RolloutRecord
	testutil.Eventually(t, waitLimit, func() bool {
		baking = api.get(proofNS, id)
		return baking.Baking
	}, "the first stage to bake")
	serving := 0
	for _, m := range f {
		if m.route() == staged {
			serving++
		}
	}
	if serving != baking.InStage || serving != 10 {
		t.Fatalf("%d clients serve the staged change, %d in the stage; want 10", serving, baking.InStage)
	}
	r, err := api.c.AbortRollout(context.Background(), proofNS, id, controlapi.RolloutActionRequest{})
	if err != nil || r.State != "reverted" || r.Stage != 50 {
		t.Fatalf("abort: %+v, %v", r, err)
	}
	f.converge(t, baseRoute)

	h, err := api.c.History(context.Background(), proofNS, controlapi.HistoryOptions{Limit: 3})
	if err != nil {
		t.Fatal(err)
	}
	var kinds []string
	for _, rev := range h.Revisions {
		kinds = append(kinds, rev.Kind)
	}
	if want := []string{"rollout-revert", "rollout-stage", "publish"}; !slices.Equal(kinds, want) {
		t.Fatalf("history kinds %v, want %v", kinds, want)
	}
}

// TestProofTwoNamespacesAtOnce: rollouts of two namespaces run side by
// side, each gated on its own clients: one promoted, one reverted.
func TestProofTwoNamespacesAtOnce(t *testing.T) {
	srv := startOrigin(t, nil)
	const other = "proof.other"
	if _, err := srv.Publish(other, proofContent()); err != nil {
		t.Fatal(err)
	}
	api := newControlAPI(t, srv.URL(), nil)
	var a, b fleet
	for i := range 10 {
		a = append(a, startMember(t, srv.URL(), proofNS, clientID(i)))
		b = append(b, startMember(t, srv.URL(), other, clientID(100+i)))
	}
	api.known(proofNS, len(a))
	api.known(other, len(b))
	good := `{"cluster":"c3"}`
	stages := []float64{10, 50, 100}
	idA, _ := api.start(proofNS, controlapi.RolloutRequest{Puts: map[string]json.RawMessage{"route/a": raw(good)}, Stages: stages, Bake: "20ms"})
	idB, _ := api.start(other, controlapi.RolloutRequest{Puts: map[string]json.RawMessage{"route/a": raw(`{"cluster":"BAD"}`)}, Stages: stages, Bake: "20ms"})
	if r := api.ended(proofNS, idA); r.State != "promoted" {
		t.Errorf("%s: %+v, want promoted", proofNS, r)
	}
	if r := api.ended(other, idB); r.State != "reverted" || r.Stage != 10 {
		t.Errorf("%s: %+v, want reverted at stage 10", other, r)
	}
	a.converge(t, good)
	b.converge(t, baseRoute)
}

// stagedOnTheWire reads ns's rollout as a client that evaluates rollouts
// sees it.
func stagedOnTheWire(t testing.TB, url, ns string) *rollout.Staged {
	t.Helper()
	req, err := http.NewRequest("GET", url+transport.PathSnapshot+"?ns="+ns, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set(transport.HeaderCapabilities, transport.CapabilityRollout)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var snap transport.Snapshot
	if err := json.NewDecoder(resp.Body).Decode(&snap); err != nil {
		t.Fatal(err)
	}
	var values map[string]json.RawMessage
	if err := json.Unmarshal(snap.Values, &values); err != nil {
		t.Fatal(err)
	}
	s, err := rollout.Decode(values[rollout.Key])
	if err != nil {
		t.Fatalf("the rollout on the wire: %v", err)
	}
	return s
}

// TestProofRestartMidStage: a client that served the staged change
// restarts, under an id outside the stage, mid-stage: its last-good file
// holds the change, and it serves what its membership says, the base, from
// disk with the server down and then from the server; the promotion
// brings it the change.
func TestProofRestartMidStage(t *testing.T) {
	srv := startOrigin(t, nil)
	api := newControlAPI(t, srv.URL(), nil)
	dir := t.TempDir()
	f := startFleet(t, srv.URL(), 10)
	cached := startMember(t, srv.URL(), proofNS, "app-cached", config.WithCacheDir(dir))
	api.known(proofNS, len(f)+1)
	staged := `{"cluster":"c7"}`
	id, _ := api.start(proofNS, controlapi.RolloutRequest{Puts: map[string]json.RawMessage{"route/a": raw(staged)}, Stages: []float64{99, 100}, Bake: "1h"})
	testutil.Eventually(t, waitLimit, func() bool { return cached.route() == staged }, "the cached client to serve the staged change")
	s := stagedOnTheWire(t, srv.URL(), proofNS)
	if !s.Member(cached.id) {
		t.Fatalf("app-cached serves the change but is not in the stage")
	}
	outside := ""
	for i := 0; outside == ""; i++ {
		if c := fmt.Sprintf("app-restarted-%d", i); !s.Member(c) {
			outside = c
		}
	}
	if err := cached.client.Close(); err != nil {
		t.Fatal(err)
	}

	// From disk alone: the server's port is closed (kept: nothing else
	// listens there meanwhile).
	dead := fmt.Sprintf("http://127.0.0.1:%d", testutil.LoopbackPort(t))
	offline := startMember(t, dead, proofNS, outside, config.WithCacheDir(dir))
	if got := offline.route(); got != baseRoute {
		t.Fatalf("restarted outside the stage, from disk: route/a %s, want the base %s", got, baseRoute)
	}
	if st := offline.ns.Status(); st.Rollout.ID != id || st.Rollout.Staged {
		t.Fatalf("status from disk: %+v", st.Rollout)
	}
	if err := offline.client.Close(); err != nil {
		t.Fatal(err)
	}

	online := startMember(t, srv.URL(), proofNS, outside, config.WithCacheDir(dir))
	if got := online.route(); got != baseRoute {
		t.Fatalf("restarted outside the stage: route/a %s, want the base", got)
	}
	if _, err := api.c.PromoteRollout(context.Background(), proofNS, id, controlapi.RolloutActionRequest{}); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, waitLimit, func() bool { return online.route() == staged }, "the promotion at the restarted client")
}
