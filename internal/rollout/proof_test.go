package rollout_test

import (
	"bytes"
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
	"github.com/holdfast-dev/holdfast/internal/fakeserver"
	"github.com/holdfast-dev/holdfast/internal/rollout"
	"github.com/holdfast-dev/holdfast/relay"
	"github.com/holdfast-dev/holdfast/transport"
)

// The proof of issue 14, as the config distribution deep dive's toy: real
// SDK clients with checks of their own against the reference server, each
// change a rollout over stages 1, 10, 100.

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const (
	proofNS     = "proof.routes"
	fleetSize   = 100
	waitLimit   = 30 * time.Second
	baseRoute   = `{"cluster":"c1"}`
	strictDigit = "3" // clients whose ids end in it also reject new-field
)

// schemaNoBad rejects any string containing BAD, at any depth of objects.
const schemaNoBad = `{"$defs":{"v":{"not":{"type":"string","pattern":"BAD"},"additionalProperties":{"$ref":"#/$defs/v"}}},
 "additionalProperties":{"$ref":"#/$defs/v"}}`

// schemaStrict also rejects a route with the field new-field.
const schemaStrict = `{"$defs":{"v":{"not":{"type":"string","pattern":"BAD"},"additionalProperties":{"$ref":"#/$defs/v"}}},
 "additionalProperties":{"$ref":"#/$defs/v"},
 "properties":{"route/a":{"propertyNames":{"not":{"const":"new-field"}}}}}`

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
		f = append(f, startMember(t, url, clientID(i), opts...))
	}
	return f
}

func startMember(t testing.TB, url, id string, opts ...config.Option) *member {
	t.Helper()
	c, err := config.New(append([]config.Option{config.WithEndpoint(url), config.WithClientID(id),
		config.WithReconnectBackoff(5*time.Millisecond, 100*time.Millisecond)}, opts...)...)
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
	ns, err := c.Namespace(ctx, proofNS, config.WithSchema([]byte(sch)))
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

// controlAPI drives the reference server over its real HTTP control API.
type controlAPI struct {
	t   testing.TB
	url string
}

func (c controlAPI) do(method, path string, body any, want int, out any) {
	c.t.Helper()
	var r io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			c.t.Fatal(err)
		}
		r = bytes.NewReader(b)
	}
	req, err := http.NewRequest(method, c.url+path, r)
	if err != nil {
		c.t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		c.t.Fatal(err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != want {
		c.t.Fatalf("%s %s: %d %s, want %d", method, path, resp.StatusCode, data, want)
	}
	if out != nil {
		if err := json.Unmarshal(data, out); err != nil {
			c.t.Fatalf("%s %s: %v in %s", method, path, err, data)
		}
	}
}

// record is GET /control/namespaces/{ns}/rollouts/{id}.
type record struct {
	ID        string    `json:"id"`
	State     string    `json:"state"`
	Stage     float64   `json:"stage"`
	Stages    []float64 `json:"stages"`
	Clients   int       `json:"clients"`
	Served    int       `json:"served"`
	Acked     int       `json:"acked"`
	Nacked    int       `json:"nacked"`
	WouldNack int       `json:"would_nack"`
	Lagging   int       `json:"lagging"`
	Reason    string    `json:"reason"`
	Revisions []int64   `json:"revisions"`
}

type spec struct {
	Puts        map[string]json.RawMessage `json:"puts,omitempty"`
	Deletes     []string                   `json:"deletes,omitempty"`
	Stages      []float64                  `json:"stages"`
	Bake        string                     `json:"bake,omitempty"`
	MaxNacks    int                        `json:"max_nacks,omitempty"`
	Prevalidate bool                       `json:"prevalidate,omitempty"`
	OnTimeout   string                     `json:"on_timeout,omitempty"`
}

func (c controlAPI) start(ns string, s spec) (id string, rev int64) {
	c.t.Helper()
	var out struct {
		ID       string `json:"id"`
		Revision int64  `json:"revision"`
	}
	c.do("POST", "/control/namespaces/"+ns+"/rollouts", s, http.StatusCreated, &out)
	return out.ID, out.Revision
}

func (c controlAPI) get(ns, id string) record {
	c.t.Helper()
	var r record
	c.do("GET", "/control/namespaces/"+ns+"/rollouts/"+id, nil, http.StatusOK, &r)
	return r
}

// ended waits for the rollout to end and returns its record.
func (c controlAPI) ended(ns, id string) record {
	c.t.Helper()
	var r record
	eventually(c.t, "rollout "+id+" to end", func() bool {
		r = c.get(ns, id)
		return r.State != "running"
	})
	return r
}

// known waits until the server knows n clients of ns, each at ns's revision.
func (c controlAPI) known(ns string, n int) {
	c.t.Helper()
	eventually(c.t, fmt.Sprintf("%d clients acked %s", n, ns), func() bool {
		var st struct {
			Clients int `json:"clients"`
			Acked   int `json:"acked"`
		}
		c.do("GET", "/control/namespaces/"+ns+"/status", nil, http.StatusOK, &st)
		return st.Clients >= n && st.Acked >= n
	})
}

func eventually(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(waitLimit)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
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
		eventually(t, m.id+" to serve route/a "+want, func() bool { return m.route() == want })
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
	api := controlAPI{t, srv.URL()}
	f := startFleet(t, srv.URL(), fleetSize)
	api.known(proofNS, fleetSize)
	stages := []float64{1, 10, 100}

	t.Run("good change is promoted", func(t *testing.T) {
		api := controlAPI{t, srv.URL()}
		before := written.Load()
		good := `{"cluster":"c2"}`
		id, _ := api.start(proofNS, spec{Puts: map[string]json.RawMessage{"route/a": raw(good)}, Stages: stages, Bake: "50ms"})
		r := api.ended(proofNS, id)
		if r.State != "promoted" || r.Stage != 100 {
			t.Fatalf("rollout %+v, want promoted after stage 100", r)
		}
		f.converge(t, good)
		eventually(t, "every client's ack", func() bool { return api.get(proofNS, id).Acked >= fleetSize })
		// Bytes on the wire: every stage and the promotion reached 100
		// clients, against one full snapshot each.
		rollout := written.Load() - before
		snap := snapshotBytes(t, srv.URL(), proofNS)
		t.Logf("scenario 1: %d bytes on the wire through %d revisions; 100 full snapshots: %d bytes (%.0fx)",
			rollout, len(r.Revisions), 100*snap, float64(100*snap)/float64(rollout))
		if rollout*20 > 100*snap {
			t.Errorf("a rollout cost %d bytes, over a twentieth of 100 snapshots (%d)", rollout, 100*snap)
		}
		// Back to the base for the next scenarios.
		if _, err := srv.Publish(proofNS, map[string]any{"route/a": raw(baseRoute)}); err != nil {
			t.Fatal(err)
		}
		f.converge(t, baseRoute)
	})

	t.Run("BAD stops at 1%", func(t *testing.T) {
		api := controlAPI{t, srv.URL()}
		id, _ := api.start(proofNS, spec{Puts: map[string]json.RawMessage{"route/a": raw(`{"cluster":"BAD"}`)}, Stages: stages, Bake: "50ms"})
		r := api.ended(proofNS, id)
		if r.State != "reverted" || r.Stage != 1 || r.Nacked < 1 || r.Served != 0 {
			t.Fatalf("rollout %+v, want reverted at stage 1 with a nack and none served", r)
		}
		f.converge(t, baseRoute)
		for _, m := range f {
			if m.served("BAD") {
				t.Errorf("%s served BAD", m.id)
			}
		}
	})

	t.Run("new-field stops at the first stage with a strict client", func(t *testing.T) {
		api := controlAPI{t, srv.URL()}
		id, _ := api.start(proofNS, spec{Puts: map[string]json.RawMessage{"route/a": raw(`{"cluster":"c1","new-field":true}`)}, Stages: stages, Bake: "50ms"})
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
		api := controlAPI{t, srv.URL()}
		id, _ := api.start(proofNS, spec{Puts: map[string]json.RawMessage{"route/a": raw(`{"cluster":"c1","new-field":true}`)}, Stages: stages, Bake: "50ms", Prevalidate: true})
		r := api.ended(proofNS, id)
		if r.State != "reverted" || r.Stage != 1 {
			t.Fatalf("rollout %+v, want reverted at stage 1", r)
		}
		eventually(t, "ten would-nacks", func() bool { r = api.get(proofNS, id); return r.WouldNack == fleetSize/10 })
		f.converge(t, baseRoute)
		for _, m := range f {
			if strict(m.id) && m.served("new-field") {
				t.Errorf("strict %s served new-field", m.id)
			}
		}
	})
}

func snapshotBytes(t testing.TB, url, ns string) int64 {
	t.Helper()
	resp, err := http.Get(url + transport.PathSnapshot + "?ns=" + ns)
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
	api := controlAPI{t, srv.URL()}
	f := startFleet(t, startRelay(t, srv.URL()), 20)
	api.known(proofNS, len(f))
	stages := []float64{5, 50, 100}

	good := `{"cluster":"c9"}`
	id, _ := api.start(proofNS, spec{Puts: map[string]json.RawMessage{"route/a": raw(good)}, Stages: stages, Bake: "20ms"})
	if r := api.ended(proofNS, id); r.State != "promoted" {
		t.Fatalf("through a relay: %+v, want promoted", r)
	}
	f.converge(t, good)

	id, _ = api.start(proofNS, spec{Puts: map[string]json.RawMessage{"route/a": raw(`{"cluster":"c1","new-field":1}`)}, Stages: stages, Bake: "20ms", Prevalidate: true})
	r := api.ended(proofNS, id)
	if r.State != "reverted" || r.Stage != 5 {
		t.Fatalf("through a relay: %+v, want reverted at stage 5", r)
	}
	eventually(t, "would-nacks through the relay", func() bool { return api.get(proofNS, id).WouldNack == 2 })
	f.converge(t, good)
}
