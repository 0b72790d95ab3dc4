package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/holdfast-dev/holdfast/config"
	"github.com/holdfast-dev/holdfast/controlapi"
	"github.com/holdfast-dev/holdfast/internal/promtest"
	"github.com/holdfast-dev/holdfast/internal/testutil"
)

// relayedClients opens ns in n SDK clients of the relay at url.
func relayedClients(t *testing.T, url, ns string, n int) []*config.Namespace {
	t.Helper()
	var nss []*config.Namespace
	for range n {
		c, _ := fleetClient(t, []string{url})
		nss = append(nss, openNS(t, c, ns))
	}
	return nss
}

// waitClientsKnown waits until the server of c knows n clients of ns,
// every one acked: a rollout's stages are cut from the clients the
// server knows.
func waitClientsKnown(t *testing.T, c *controlapi.Client, ns string, n int) {
	t.Helper()
	testutil.Eventually(t, waitLimit, func() bool {
		st, err := c.Status(context.Background(), ns)
		return err == nil && st.Clients == n && st.Acked == n
	}, "the server knows every client")
}

// readRollout reads rollout id of ns on the server of c (ok false: it
// did not answer, a server being killed).
func readRollout(t *testing.T, c *controlapi.Client, ns, id string) (controlapi.RolloutRecord, bool) {
	t.Helper()
	r, err := c.GetRollout(context.Background(), ns, id)
	if err != nil {
		return controlapi.RolloutRecord{}, false
	}
	return *r, true
}

// startRollout starts a rollout of v=2 over stages on the server of c.
func startRollout(t *testing.T, c *controlapi.Client, spec controlapi.RolloutSpec, actor, reason string) string {
	t.Helper()
	spec.Puts = map[string]json.RawMessage{"v": json.RawMessage(`2`)}
	r, err := c.StartRollout(context.Background(), "app", controlapi.NewRolloutRequest(spec, actor, reason))
	if err != nil {
		t.Fatalf("rollout start: %v", err)
	}
	return r.ID
}

// TestRolloutLeaderKilledMidStage: two `holdfast server` processes over a
// real 3-member etcd cluster; SDK clients that list both ack a rollout's
// stages. The leader is killed (SIGKILL) mid-rollout; the other server
// takes the lead and continues the rollout within 10 s, and it completes
// once: the history holds one record per transition (three stages, one
// promotion), each with its actor and reason, and every client serves the
// change.
func TestRolloutLeaderKilledMidStage(t *testing.T) {
	bin := buildBinary(t)
	members := startEtcd(t)
	a := startServerProc(t, bin, "-etcd", members)
	b := startServerProc(t, bin, "-etcd", members)
	if _, err := publishApp(controlClient(t, a.url(), nil), "v", 1); err != nil {
		t.Fatalf("publish: %v", err)
	}
	var leader, other *relayProc
	testutil.Eventually(t, waitLimit, func() bool {
		_, la := serverStatusz(t, a.url())
		_, lb := serverStatusz(t, b.url())
		switch {
		case la && !lb:
			leader, other = a, b
		case lb && !la:
			leader, other = b, a
		default:
			return false
		}
		return true
	}, "one leader of the two servers")
	// The clients list the leader first: their acks reach it directly,
	// and the other server's summary is empty until they fail over.
	const n = 8
	for i := range n {
		c, _ := fleetClient(t, []string{leader.url(), other.url()})
		ns := openNS(t, c, "app")
		t.Cleanup(func() {
			if t.Failed() {
				t.Logf("client %d: %+v", i, ns.Status())
			}
		})
		defer func() {
			testutil.Eventually(t, waitLimit, func() bool { return ns.Int("v", 0) == 2 }, fmt.Sprintf("client %d serves v=2", i))
		}()
	}
	// Cut over known clients: a rollout started before their reports
	// reach the leader has a blind first stage, recut once they do (an
	// extra decision and stage revision; TestRolloutBlindStageIsCutAgain).
	waitClientsKnown(t, controlClient(t, leader.url(), nil), "app", n)
	oc := controlClient(t, other.url(), nil)
	id := startRollout(t, oc, controlapi.RolloutSpec{Stages: []float64{25, 50, 100}, Bake: 2 * time.Second}, "alice", "ticket 30")
	testutil.Eventually(t, waitLimit, func() bool {
		r, ok := readRollout(t, oc, "app", id)
		return ok && r.Stage == 50 && r.Baking
	}, "the second stage bakes")
	leader.kill()
	killed := time.Now()
	var rec controlapi.RolloutRecord
	testutil.Eventually(t, 30*time.Second, func() bool {
		r, ok := readRollout(t, oc, "app", id)
		rec = r
		return ok && r.State != "running"
	}, "the rollout ends on the surviving server")
	if rec.State != "promoted" || len(rec.Revisions) != 4 {
		t.Fatalf("record %+v", rec)
	}
	for _, d := range rec.Decisions {
		if d.What == "stage" && d.At.After(killed) || d.What == "promote" {
			if lag := d.At.Sub(killed); lag > 10*time.Second+2*time.Second {
				t.Errorf("%s %v after the kill: the bake had at most 2s left, the lead moves within 5s", d.What, lag)
			}
			t.Logf("%s %v after the leader was killed", d.What, d.At.Sub(killed).Round(time.Millisecond))
			break
		}
	}
	var whats []string
	for _, d := range rec.Decisions {
		whats = append(whats, d.What)
	}
	if want := "start bake bake-end stage bake bake-end stage bake bake-end promote"; strings.Join(whats, " ") != want {
		t.Fatalf("decisions %q, want %q", whats, want)
	}
	h, err := oc.History(context.Background(), "app", controlapi.HistoryOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var kinds []string
	for i := len(h.Revisions) - 1; i >= 0; i-- {
		r := h.Revisions[i]
		kinds = append(kinds, r.Kind)
		if strings.HasPrefix(r.Kind, "rollout-") && (r.Actor == "" || !strings.Contains(r.Reason, id)) {
			t.Errorf("audit record %+v: want an actor and a reason naming the rollout", r)
		}
	}
	if want := "publish rollout-stage rollout-stage rollout-stage rollout-promote"; strings.Join(kinds, " ") != want {
		t.Fatalf("history %q, want %q (one record per transition)", kinds, want)
	}
}

// TestRolloutCommandsOnServer: the rollout commands against holdfast
// server (a process over its embedded etcd): start with a reason, status
// -watch prints each change as one JSON line until the rollout ends, list
// shows it, and abort or promote of an ended rollout is refused.
func TestRolloutCommandsOnServer(t *testing.T) {
	s := start(t, "server", "-memory", "-addr", "127.0.0.1:0", "-heartbeat", "100ms", "-log-format", "json")
	rec := s.stderr.waitFor(t, "serving", s.done)
	base, _ := rec["url"].(string)
	mustRun(t, "publish", "-server", base, "app", "v=1")
	c, _ := fleetClient(t, []string{base})
	ns := openNS(t, c, "app")
	out := mustRun(t, "rollout", "start", "-server", base, "-stages", "50,100", "-bake", "300ms", "-reason", "ticket 30", "-actor", "alice", "-o", "json", "app", "v=2")
	id, _ := startedRollout(t, out)
	watched := mustRun(t, "rollout", "status", "-server", base, "-id", id, "-watch", "-o", "json", "app")
	lines := strings.Split(strings.TrimSpace(watched), "\n")
	var last controlapi.RolloutRecord
	if err := json.Unmarshal([]byte(lines[len(lines)-1]), &last); err != nil || last.State != "promoted" {
		t.Fatalf("the last line of -watch: %q (%v)", lines[len(lines)-1], err)
	}
	if len(lines) < 3 {
		t.Errorf("-watch printed %d records, want one per change (at least a stage, a bake, the end):\n%s", len(lines), watched)
	}
	testutil.Eventually(t, waitLimit, func() bool { return ns.Int("v", 0) == 2 }, "the client serves v=2")
	if out := mustRun(t, "rollout", "list", "-server", base, "app"); !strings.Contains(out, id) || !strings.Contains(out, "promoted") {
		t.Errorf("rollout list:\n%s", out)
	}
	if out := mustRun(t, "history", "-server", base, "app"); !strings.Contains(out, "ticket 30") || !strings.Contains(out, "alice") {
		t.Errorf("history without the start's actor and reason:\n%s", out)
	}
	mustFail(t, exitFail, "ended", "rollout", "promote", "-server", base, "-id", id, "app")
}

// TestRolloutMetricGateRevertsOnServer: `rollout start -gate` against
// holdfast server: a stage bakes while the gate's query (a fake
// Prometheus here; TestRolloutRevertsOnARealPrometheus runs a real one) is under its
// max, and the rollout reverts once the value rises above it, with the
// gate's value in its history.
func TestRolloutMetricGateRevertsOnServer(t *testing.T) {
	var errorRate atomic.Value
	errorRate.Store("0")
	prom := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"status":"success","data":{"resultType":"vector","result":[{"metric":{},"value":[%d,%q]}]}}`,
			time.Now().Unix(), errorRate.Load().(string))
	}))
	defer prom.Close()
	s := start(t, "server", "-memory", "-addr", "127.0.0.1:0", "-heartbeat", "100ms", "-log-format", "json", "-gate-allow", prom.URL)
	rec := s.stderr.waitFor(t, "serving", s.done)
	base, _ := rec["url"].(string)
	mustRun(t, "publish", "-server", base, "app", "v=1")
	c, _ := fleetClient(t, []string{base})
	ns := openNS(t, c, "app")
	out := mustRun(t, "rollout", "start", "-server", base, "-stages", "100", "-bake", "1m", "-o", "json",
		"-gate", "prometheus="+prom.URL+",query=errors,max=1", "app", "v=2")
	id, _ := startedRollout(t, out)
	testutil.Eventually(t, waitLimit, func() bool { return ns.Int("v", 0) == 2 }, "the client serves the staged v=2")
	errorRate.Store("5")
	watched := mustRun(t, "rollout", "status", "-server", base, "-id", id, "-watch", "-o", "json", "app")
	lines := strings.Split(strings.TrimSpace(watched), "\n")
	var last controlapi.RolloutRecord
	if err := json.Unmarshal([]byte(lines[len(lines)-1]), &last); err != nil || last.State != "reverted" {
		t.Fatalf("the last line of -watch: %q (%v); want the rollout reverted", lines[len(lines)-1], err)
	}
	testutil.Eventually(t, waitLimit, func() bool { return ns.Int("v", 0) == 1 }, "the client back on v=1")
	if out := mustRun(t, "history", "-server", base, "app"); !strings.Contains(out, "rollout-revert") || !strings.Contains(out, `value 5 above max 1`) || !strings.Contains(out, `query "errors"`) {
		t.Errorf("history without the gate's query and value:\n%s", out)
	}
}

// TestRolloutRevertsOnARealPrometheus: real processes — a holdfast
// server, a relay, a real Prometheus (Debian's) scraping a test
// application every second — and 20 SDK clients behind the relay. A
// rollout started with `rollout start -gate` bakes its first stage
// while the application's error counter is 0; the test raises it, and
// the rollout reverts at the stage in progress: no client beyond that
// stage ever served the change, every client serves the old content
// again within 10 s of the breach, and the history's revert record
// carries the gate's query and value.
func TestRolloutRevertsOnARealPrometheus(t *testing.T) {
	app := promtest.NewApp(t)
	prom := promtest.Start(t, app.Target())
	bin := buildBinary(t)
	srv := startServerProc(t, bin, "-memory", "-gate-allow", prom.URL)
	mustRun(t, "publish", "-server", srv.url(), "app", "v=1")
	r := startRelayProc(t, bin, srv.url())

	const n = 20
	nss := relayedClients(t, r.url(), "app", n)
	serving := func(v int) int {
		k := 0
		for _, ns := range nss {
			if ns.Int("v", 0) == v {
				k++
			}
		}
		return k
	}
	cc := controlClient(t, srv.url(), nil)
	// The stages are cut from the clients the server knows: all of them.
	waitClientsKnown(t, cc, "app", n)
	// The query reads the application's counter as Prometheus scraped it;
	// it passes from Prometheus's first scrape on.
	query := "sum(app_errors_total)"
	out := mustRun(t, "rollout", "start", "-server", srv.url(), "-stages", "10,50,100", "-bake", "10m", "-o", "json",
		"-gate", "prometheus="+prom.URL+",query="+query+",max=2,grace=1m", "-reason", "ticket 30", "app", "v=2")
	id, _ := startedRollout(t, out)
	testutil.Eventually(t, promtest.Wait, func() bool {
		rec, ok := readRollout(t, cc, "app", id)
		return ok && rec.Stage == 10 && rec.Baking && serving(2) > 0
	}, "the first stage bakes, served by its members")
	staged := serving(2)
	if staged > n/2 {
		t.Fatalf("%d of %d clients serve the 10%% stage", staged, n)
	}

	maxServed := staged
	app.Errors.Store(5)
	raised := time.Now()
	var rec controlapi.RolloutRecord
	testutil.Eventually(t, promtest.Wait, func() bool {
		maxServed = max(maxServed, serving(2))
		got, ok := readRollout(t, cc, "app", id)
		rec = got
		return ok && got.State != "running"
	}, "the rollout ends")
	if rec.State != "reverted" || rec.Stage != 10 {
		t.Fatalf("the rollout ended %s at stage %v (%s), want reverted at stage 10", rec.State, rec.Stage, rec.Reason)
	}
	var reverted time.Time
	for _, d := range rec.Decisions {
		if d.What == "revert" {
			reverted = d.At
		}
	}
	testutil.Eventually(t, 10*time.Second, func() bool {
		maxServed = max(maxServed, serving(2))
		return serving(1) == n
	}, "every client back on v=1 within 10 s of the revert")
	back := time.Now()
	if maxServed > n/2 {
		t.Errorf("%d clients served v=2 at once, beyond the 10%% stage", maxServed)
	}
	t.Logf("%d of %d clients in the stage; counter raised → revert %v, revert → all %d clients back on v=1 %v (the breach → back %v)",
		staged, n, reverted.Sub(raised).Round(time.Millisecond), n, back.Sub(reverted).Round(time.Millisecond), back.Sub(raised).Round(time.Millisecond))
	if hist := mustRun(t, "history", "-server", srv.url(), "app"); !strings.Contains(hist, "rollout-revert") ||
		!strings.Contains(hist, "value 5 above max 2") || !strings.Contains(hist, query) {
		t.Errorf("history without the gate's query and value:\n%s", hist)
	}
}

// TestRolloutRelayKilledMidStage: real processes — a holdfast server and
// a holdfast relay with 8 SDK clients behind it. The relay is killed
// (SIGKILL: what it held of the clients' acks is lost) as soon as a
// rollout's first stage is committed, and started again on the same
// address. The clients report again to the new relay, and the rollout
// completes on their acks: promoted, every bake on every member's report
// (none counted gone), every client serving the change.
func TestRolloutRelayKilledMidStage(t *testing.T) {
	bin := buildBinary(t)
	srv := startServerProc(t, bin, "-memory")
	mustRun(t, "publish", "-server", srv.url(), "app", "v=1")
	r := startRelayProc(t, bin, srv.url())
	const n = 8
	nss := relayedClients(t, r.url(), "app", n)
	cc := controlClient(t, srv.url(), nil)
	waitClientsKnown(t, cc, "app", n)

	id := startRollout(t, cc, controlapi.RolloutSpec{Stages: []float64{50, 100}, Bake: 500 * time.Millisecond, StageTimeout: 60 * time.Second}, "", "")
	r.kill()
	killed := time.Now()
	r.start()
	t.Logf("relay back %v after the kill", time.Since(killed).Round(time.Millisecond))

	var rec controlapi.RolloutRecord
	testutil.Eventually(t, 30*time.Second, func() bool {
		got, ok := readRollout(t, cc, "app", id)
		rec = got
		return ok && got.State != "running"
	}, "the rollout ends")
	if rec.State != "promoted" {
		t.Fatalf("the rollout ended %s: %s", rec.State, rec.Reason)
	}
	for _, d := range rec.Decisions {
		if d.What == "bake" && !strings.Contains(d.Reason, "(0 gone)") {
			t.Errorf("decision %q: %s; want every member reported, none gone", d.What, d.Reason)
		}
	}
	for i, ns := range nss {
		testutil.Eventually(t, waitLimit, func() bool { return ns.Int("v", 0) == 2 }, fmt.Sprintf("client %d serves v=2", i))
	}
	t.Logf("promoted %v after the kill", time.Since(killed).Round(time.Millisecond))
}

// TestRolloutGateOutsideAllowRefused: holdfast server queries only the
// Prometheus servers of its -gate-allow: a rollout whose gate names
// another URL is refused at its start with 400, saying so, and that URL
// is never fetched; without -gate-allow every gate is refused. An allowed
// URL that answers a page that is not Prometheus's refuses the start
// without the page in the error.
func TestRolloutGateOutsideAllowRefused(t *testing.T) {
	var fetched atomic.Int64
	target := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		fetched.Add(1)
		http.Error(w, "INTERNAL-SECRET-PAGE", http.StatusForbidden)
	}))
	defer target.Close()
	for _, tt := range []struct {
		allow []string
		want  string
	}{
		{[]string{"-gate-allow", "http://prometheus.example:9090,http://127.0.0.1:1/prom"}, "(-gate-allow: http://prometheus.example:9090,http://127.0.0.1:1/prom)"},
		{nil, "(-gate-allow: none: the server was started without -gate-allow)"},
	} {
		args := append([]string{"server", "-memory", "-addr", "127.0.0.1:0", "-log-format", "json"}, tt.allow...)
		s := start(t, args...)
		rec := s.stderr.waitFor(t, "serving", s.done)
		base, _ := rec["url"].(string)
		mustRun(t, "publish", "-server", base, "app", "v=1")
		body := `{"puts":{"v":2},"stages":[100],"bake":"1m","gates":[{"prometheus":"` + target.URL + `","query":"up","max":1}]}`
		resp, err := http.Post(base+"/control/namespaces/app/rollouts", "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		msg, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusBadRequest || !strings.Contains(string(msg), "is under no prefix this server queries") ||
			!strings.Contains(string(msg), tt.want) || strings.Contains(string(msg), "SECRET") {
			t.Errorf("%q: a gate outside the list: %d %s", tt.allow, resp.StatusCode, msg)
		}
		mustFail(t, exitFail, "is under no prefix this server queries", "rollout", "start", "-server", base, "-stages", "100", "-bake", "1m",
			"-gate", "prometheus="+target.URL+",query=up,max=1", "app", "v=2")
		s.stop(t)
	}
	if n := fetched.Load(); n != 0 {
		t.Errorf("the gate's URL was fetched %d times", n)
	}
	// Allowed, the URL is asked, and its page is not shown.
	s := start(t, "server", "-memory", "-addr", "127.0.0.1:0", "-log-format", "json", "-gate-allow", target.URL)
	rec := s.stderr.waitFor(t, "serving", s.done)
	base, _ := rec["url"].(string)
	mustRun(t, "publish", "-server", base, "app", "v=1")
	msg := mustFail(t, exitFail, "HTTP 403, a reply that is not Prometheus's query API (not shown)", "rollout", "start", "-server", base,
		"-stages", "100", "-bake", "1m", "-gate", "prometheus="+target.URL+",query=up,max=1", "app", "v=2")
	if strings.Contains(msg, "SECRET") || fetched.Load() == 0 {
		t.Errorf("a gate on an allowed URL that is not Prometheus (fetched %d times): %s", fetched.Load(), msg)
	}
}
