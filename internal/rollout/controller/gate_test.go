package controller

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/holdfast-dev/holdfast/internal/gate"
	"github.com/holdfast-dev/holdfast/internal/testutil"
)

// prom is a fake Prometheus query API whose reply a test sets.
type prom struct {
	srv  *httptest.Server
	mu   sync.Mutex
	body string
}

func newProm(t *testing.T) *prom {
	p := &prom{}
	p.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		p.mu.Lock()
		body := p.body
		p.mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(body))
	}))
	t.Cleanup(p.srv.Close)
	p.set()
	return p
}

// set makes the query return one series per value (none: no series).
func (p *prom) set(values ...string) {
	parts := make([]string, len(values))
	for i, v := range values {
		parts[i] = fmt.Sprintf(`{"metric":{"instance":"i%d"},"value":[1733346000.1,%q]}`, i, v)
	}
	p.mu.Lock()
	p.body = `{"status":"success","data":{"resultType":"vector","result":[` + strings.Join(parts, ",") + `]}}`
	p.mu.Unlock()
}

func gateJSON(url string, grace time.Duration) json.RawMessage {
	return json.RawMessage(fmt.Sprintf(`{"prometheus":%q,"query":"sum(rate(app_errors_total[1m]))","max":0.5,"grace":%q}`, url, grace))
}

func newGateTest(f *fleet, m *MemStore) *Controller {
	return New(Config{Store: m, Reports: f.Reports, Now: f.clock, Gates: func(raw json.RawMessage) (Gate, error) {
		return gate.FromJSON(raw, f.clock, gate.WithTimeout(time.Second))
	}})
}

// TestGateRefusesTheStart: a gate whose first check cannot pass refuses
// the start with ErrGate, nothing written; a query with no series is a
// documented decision: accepted (its grace starts).
func TestGateRefusesTheStart(t *testing.T) {
	p := newProm(t)
	dead := fmt.Sprintf("http://127.0.0.1:%d", testutil.LoopbackPort(t)) // nothing answers there
	for _, tc := range []struct {
		name   string
		url    string
		values []string
		want   error
	}{
		{"no answer", dead, nil, ErrGate},
		{"several series", p.srv.URL, []string{"0.1", "0.2"}, gate.ErrSeveralSeries},
		{"no series", p.srv.URL, nil, nil},
		{"one series", p.srv.URL, []string{"0.1"}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p.set(tc.values...)
			f, m := newFleet(), NewMemStore()
			c := newGateTest(f, m)
			defer c.Close()
			s := Spec{Puts: spec.Puts, Stages: []float64{100}, Gates: []json.RawMessage{gateJSON(tc.url, 30*time.Second)}}
			_, err := c.Start(context.Background(), "app", s, "alice", "")
			if tc.want == nil {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if !errors.Is(err, tc.want) || !errors.Is(err, ErrGate) || !errors.Is(err, ErrInvalid) {
				t.Fatalf("err %v, want %v", err, tc.want)
			}
			if len(m.Log()) != 0 {
				t.Fatal("half applied")
			}
		})
	}
}

// bakingWithAGate starts a rollout of 4 clients with a gate (grace 30s)
// whose query passes, and has its first stage bake (an hour).
func bakingWithAGate(t *testing.T) (*prom, *fleet, *MemStore, *Controller, string) {
	t.Helper()
	p := newProm(t)
	p.set("0.1")
	f, m := newFleet(), NewMemStore()
	f.apply(m, "app", ids(4), nil)
	c := newGateTest(f, m)
	t.Cleanup(c.Close)
	s := Spec{Puts: spec.Puts, Stages: []float64{50, 100}, Bake: time.Hour, Gates: []json.RawMessage{gateJSON(p.srv.URL, 30*time.Second)}}
	rec, err := c.Start(context.Background(), "app", s, "alice", "")
	if err != nil {
		t.Fatal(err)
	}
	f.apply(m, "app", ids(4), nil)
	step(t, c, nil) // bakes
	step(t, c, nil)
	if cur, _ := m.Current(context.Background(), "app"); cur.BakeEnd.IsZero() || cur.State != Running {
		t.Fatalf("not baking: %+v", cur)
	}
	return p, f, m, c, rec.ID
}

// TestGateFailingSurvivesAFailover: a gate's query that fails is kept in
// the rollout's state, and a new leader's gate resumes its grace from it
// rather than restarting it.
func TestGateFailingSurvivesAFailover(t *testing.T) {
	p, f, m, c, id := bakingWithAGate(t)
	p.set() // no series from now: failing
	failedAt := f.clock()
	step(t, c, nil)
	cur, _ := m.Current(context.Background(), "app")
	if len(cur.GateFailing) != 1 || !cur.GateFailing[0].Equal(failedAt) {
		t.Fatalf("failing since not stored: %v", cur.GateFailing)
	}
	f.advance(20 * time.Second)
	step(t, c, nil)
	// A new leader, 20s into the 30s grace: it breaches 10s later, not 30.
	c2 := newGateTest(f, m)
	defer c2.Close()
	step(t, c2, nil)
	if cur, _ := m.Current(context.Background(), "app"); cur.State != Running {
		t.Fatalf("breached within the grace: %+v", cur)
	}
	f.advance(11 * time.Second)
	step(t, c2, nil)
	got, _ := c2.Get(context.Background(), "app", id)
	if got.State != Reverted || !strings.Contains(got.Reason, "gate 0 breached") {
		t.Fatalf("not reverted on the resumed grace: %+v", got)
	}
	// The record keeps the breaching check's result whole.
	var res gate.Result
	if len(got.GateResults) != 1 || json.Unmarshal(got.GateResults[0], &res) != nil || res.Status != gate.Breach ||
		res.Err == nil || !strings.Contains(res.Reason, "no series") || !res.FailingSince.Equal(failedAt) {
		t.Fatalf("gate results %s", got.GateResults)
	}
}

// TestGateRecoveryClearsFailing: a query that answers again clears the
// stored failure.
func TestGateRecoveryClearsFailing(t *testing.T) {
	p, f, m, c, _ := bakingWithAGate(t)
	p.set()
	step(t, c, nil)
	p.set("0.2")
	f.advance(time.Second)
	step(t, c, nil)
	if cur, _ := m.Current(context.Background(), "app"); cur.GateFailing != nil || cur.State != Running {
		t.Fatalf("failure not cleared: %+v", cur)
	}
}
