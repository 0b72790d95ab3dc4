package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/holdfast-dev/holdfast/controlapi"
	"github.com/holdfast-dev/holdfast/holdfasttest"
	"github.com/holdfast-dev/holdfast/transport"
)

// report posts one client report to srv's /sdk/ack.
func report(t *testing.T, srv *holdfasttest.Server, a transport.Ack) {
	t.Helper()
	body, _ := json.Marshal(a)
	tr := &http.Transport{}
	defer tr.CloseIdleConnections()
	resp, err := (&http.Client{Transport: tr, Timeout: 10 * time.Second}).Post(srv.URL()+transport.PathAck, "application/json", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	data, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		t.Fatalf("ack %s: %s %s", body, resp.Status, data)
	}
}

func startedRollout(t *testing.T, out string) (id string, rev int64) {
	t.Helper()
	var r map[string]json.RawMessage
	if err := json.Unmarshal([]byte(out), &r); err != nil || len(r) != 2 {
		t.Fatalf("rollout start -o json printed %q: want id and revision", out)
	}
	if err := json.Unmarshal(r["id"], &id); err != nil || id == "" {
		t.Fatalf("rollout start -o json printed %q", out)
	}
	if err := json.Unmarshal(r["revision"], &rev); err != nil || rev == 0 {
		t.Fatalf("rollout start -o json printed %q", out)
	}
	return id, rev
}

func waitRolloutEnd(t *testing.T, srv *holdfasttest.Server, ns, id string) holdfasttest.RolloutRecord {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	rec, err := srv.WaitRollout(ctx, ns, id)
	if err != nil {
		t.Fatalf("rollout %s: %v", id, err)
	}
	return rec
}

// TestRolloutCommands: rollout start, status, abort and promote against
// the reference server's rollout controller, with clients' reports over
// HTTP: a nack reverts, promote and abort end it, a publish during one is
// refused unless it aborts it, and the errors are exit status 1.
func TestRolloutCommands(t *testing.T) {
	srv := holdfasttest.NewServer(t)
	u := srv.URL()
	r0, err := srv.Publish("app", map[string]any{"a": 1, "b": 1})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []string{"c1", "c2"} { // the clients the server knows
		report(t, srv, transport.Ack{ClientID: c, Namespace: "app", Revision: r0, Status: transport.AckApplied})
	}

	// A nack reverts the rollout (max_nacks 0).
	id, rev := startedRollout(t, mustRun(t, "rollout", "start", "-server", u, "-o", "json", "-stages", "100", "-actor", "alice", "-reason", "ticket 12", "app", "a=2"))
	if rev != srv.Head() {
		t.Errorf("the first stage's revision %d, head %d", rev, srv.Head())
	}
	mustFail(t, exitFail, "conflict (HTTP 409)", "rollout", "start", "-server", u, "-stages", "100", "app", "a=3")
	mustFail(t, exitFail, "conflict (HTTP 409)", "publish", "-server", u, "app", "a=3")
	out := mustRun(t, "rollout", "status", "-server", u, "-id", id, "app")
	for _, w := range []string{"rollout     " + id + "\n", "state       running\n", "stage       100% of 100%\n", "clients     2\n"} {
		if !strings.Contains(out, w) {
			t.Errorf("rollout status does not say %q:\n%s", w, out)
		}
	}
	// Without -id, the rollout running on the namespace.
	if noID := mustRun(t, "rollout", "status", "-server", u, "app"); noID != out {
		t.Errorf("rollout status without -id printed\n%s\nwith -id\n%s", noID, out)
	}
	report(t, srv, transport.Ack{ClientID: "c1", Namespace: "app", Revision: rev, Status: transport.AckRejected, Error: "a: too big", Rollout: id})
	if rec := waitRolloutEnd(t, srv, "app", id); rec.State != holdfasttest.RolloutReverted {
		t.Fatalf("after a nack: %+v", rec)
	}
	out = mustRun(t, "rollout", "status", "-server", u, "-id", id, "app")
	for _, w := range []string{"state       reverted\n", "nacked      1\n", "a: too big", "started by  alice\n", "decisions:\n", " start ", "ticket 12", " revert ", " 1/2 reported, 1 nacked, 0 gone "} {
		if !strings.Contains(out, w) {
			t.Errorf("rollout status does not say %q:\n%s", w, out)
		}
	}
	// -o json is the API's record as sent.
	jsonOut := mustRun(t, "rollout", "status", "-server", u, "-o", "json", "-id", id, "app")
	if code, body, _ := get(t, u+"/control/namespaces/app/rollouts/"+id); code != http.StatusOK || body != jsonOut {
		t.Errorf("rollout status -o json printed\n%s\nthe API answered %d\n%s", jsonOut, code, body)
	}
	mustFail(t, exitFail, "conflict (HTTP 409)", "rollout", "abort", "-server", u, "-id", id, "app")
	mustFail(t, exitFail, "conflict (HTTP 409)", "rollout", "promote", "-server", u, "-id", id, "app")
	mustFail(t, exitFail, "not_found (HTTP 404)", "rollout", "status", "-server", u, "-id", "no-such-id", "app")
	mustFail(t, exitFail, "not_found (HTTP 404)", "rollout", "start", "-server", u, "-stages", "100", "no.such", "a=1")
	mustFail(t, exitFail, "bad_request (HTTP 400)", "rollout", "start", "-server", u, "-stages", "10,5", "app", "a=1")

	// Promote: the change becomes the base; the flags of start as sent.
	file := writeFile(t, `{"puts":{"a":3},"deletes":["b"]}`)
	id2, _ := startedRollout(t, mustRun(t, "rollout", "start", "-server", u, "-o", "json", "-stages", "50,100", "-bake", "1h",
		"-max-nacks", "1", "-prevalidate", "-report-timeout", "10s", "-stage-timeout", "5m", "-on-timeout", "hold", "-f", file, "app"))
	rec, err := srv.Rollout("app", id2)
	if err != nil || rec.MaxNacks != 1 || !rec.Prevalidate || fmt.Sprint(rec.Stages) != "[50 100]" {
		t.Fatalf("the rollout started: %+v, %v", rec, err)
	}
	out = mustRun(t, "rollout", "promote", "-server", u, "app") // -id: the one running
	if !strings.Contains(out, "state       promoted\n") || !strings.Contains(out, "rollout     "+id2+"\n") {
		t.Errorf("rollout promote printed:\n%s", out)
	}
	if v, err := srv.ValuesAt("app", srv.Head()); err != nil || string(v.Values["a"]) != "3" || v.Values["b"] != nil {
		t.Errorf("after the promotion: %+v, %v", v, err)
	}

	// Abort, and a publish that aborts.
	id3, _ := startedRollout(t, mustRun(t, "rollout", "start", "-server", u, "-o", "json", "-stages", "100", "app", "a=4"))
	if out := mustRun(t, "rollout", "abort", "-server", u, "app"); !strings.Contains(out, "state       reverted\n") || !strings.Contains(out, "rollout     "+id3+"\n") {
		t.Errorf("rollout abort printed:\n%s", out)
	}
	id4, _ := startedRollout(t, mustRun(t, "rollout", "start", "-server", u, "-o", "json", "-stages", "100", "app", "a=5"))
	mustRun(t, "publish", "-server", u, "-abort-rollout", "app", "a=6")
	if rec, err := srv.Rollout("app", id4); err != nil || rec.State != holdfasttest.RolloutReverted {
		t.Errorf("after a publish -abort-rollout: %+v, %v", rec, err)
	}
	if out := mustRun(t, "get", "-server", u, "app", "a"); out != "6\n" {
		t.Errorf("a = %q after the publish", out)
	}
	// None runs: without -id, status, abort and promote say so, and
	// what to do.
	for _, cmd := range []string{"status", "abort", "promote"} {
		mustFail(t, exitFail, "no rollout runs on app: 'holdfast rollout list app' lists the last that ended; give one with -id", "rollout", cmd, "-server", u, "app")
	}
	mustFail(t, exitFail, "no rollout runs on app", "rollout", "status", "-watch", "-server", u, "app")
	// rollout list: the namespace's rollouts, newest first.
	out = mustRun(t, "rollout", "list", "-server", u, "app")
	if lines := strings.Split(strings.TrimSpace(out), "\n"); len(lines) != 5 || !strings.HasPrefix(lines[0], "ROLLOUT") ||
		!strings.HasPrefix(lines[1], id4+" ") || !strings.Contains(lines[3], "promoted") || !strings.HasPrefix(lines[4], id+" ") || !strings.Contains(lines[4], "rejected the change") {
		t.Errorf("rollout list:\n%s", out)
	}
	jsonOut = mustRun(t, "rollout", "list", "-server", u, "-o", "json", "app")
	if code, body, _ := get(t, u+"/control/namespaces/app/rollouts"); code != http.StatusOK || body != jsonOut {
		t.Errorf("rollout list -o json printed\n%s\nthe API answered %d\n%s", jsonOut, code, body)
	}
	if out := mustRun(t, "rollout", "list", "-server", u, "other"); out != "no rollouts of other\n" {
		t.Errorf("rollout list of a namespace without rollouts: %q", out)
	}

	// The history tells the rollouts' story.
	out = mustRun(t, "history", "-server", u, "app")
	for _, k := range []string{"rollout-stage", "rollout-revert", "rollout-promote"} {
		if !strings.Contains(out, k) {
			t.Errorf("history does not show %s:\n%s", k, out)
		}
	}
	if out := mustRun(t, "rollout", "start", "-server", u, "-stages", "100", "app", "a=7"); !strings.HasPrefix(out, "rollout ") || !strings.Contains(out, " of app started: stage 100% at revision ") {
		t.Errorf("rollout start printed %q", out)
	}
}

// TestRolloutStartBody: rollout start sends the change and every flag in
// the API's body, and leaves what is not given to the server.
func TestRolloutStartBody(t *testing.T) {
	var mu sync.Mutex
	var bodies []string
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		data, _ := io.ReadAll(r.Body)
		mu.Lock()
		bodies = append(bodies, r.Method+" "+r.URL.Path+" "+string(data))
		mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		fmt.Fprintln(w, `{"id":"r1","revision":7}`)
	}))
	defer hs.Close()
	mustRun(t, "rollout", "start", "-server", hs.URL, "-stages", "1,10,100", "app", "a=2", "s=text")
	mustRun(t, "rollout", "start", "-server", hs.URL, "-stages", "0.5,100%", "-bake", "2s", "-max-nacks", "3", "-prevalidate",
		"-report-timeout", "10s", "-stage-timeout", "5m", "-on-timeout", "hold", "-f", writeFile(t, `{"deletes":["b"]}`), "app")
	want := []string{
		`POST /control/namespaces/app/rollouts {"puts":{"a":2,"s":"text"},"stages":[1,10,100],"max_nacks":0,"on_timeout":"revert"}`,
		`POST /control/namespaces/app/rollouts {"deletes":["b"],"stages":[0.5,100],"bake":"2s","max_nacks":3,"prevalidate":true,"report_timeout":"10s","stage_timeout":"5m0s","on_timeout":"hold"}`,
	}
	mu.Lock()
	defer mu.Unlock()
	if strings.Join(bodies, "\n") != strings.Join(want, "\n") {
		t.Errorf("requests:\n%s\nwant:\n%s", strings.Join(bodies, "\n"), strings.Join(want, "\n"))
	}
}

// TestRolloutStatusWatchOutlivesTheRequestTimeout: rollout status -watch,
// without -id (the running rollout's), follows a rollout that runs longer
// than requestTimeout, which bounds each request but not the watch, and
// exits 0 when it ends. It takes requestTimeout and a little more.
func TestRolloutStatusWatchOutlivesTheRequestTimeout(t *testing.T) {
	if testing.Short() {
		t.Skip("runs past the request timeout, 30 s")
	}
	t.Parallel()
	ends := time.Now().Add(requestTimeout + 2*time.Second)
	var mu sync.Mutex
	var paths []string
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		paths = append(paths, r.URL.Path)
		mu.Unlock()
		rec := controlapi.RolloutRecord{ID: "r1", Namespace: "app", State: controlapi.RolloutRunning, Stage: 10, Stages: []float64{10, 100}}
		if time.Now().After(ends) {
			rec.State, rec.Stage = controlapi.RolloutPromoted, 100
		}
		var body any = rec
		if r.URL.Path == "/control/namespaces/app/rollouts" {
			body = controlapi.RolloutList{Rollouts: []controlapi.RolloutRecord{rec,
				{ID: "r0", Namespace: "app", State: controlapi.RolloutReverted, Stage: 100, Stages: []float64{100}}}}
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(body)
	}))
	defer hs.Close()
	out := mustRun(t, "rollout", "status", "-watch", "-o", "json", "-server", hs.URL, "app")
	if time.Now().Before(ends) {
		t.Fatalf("rollout status -watch returned before the rollout ended:\n%s", out)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 2 || !strings.Contains(lines[0], `"state":"running"`) || !strings.Contains(lines[1], `"state":"promoted"`) {
		t.Errorf("rollout status -watch printed:\n%s", out)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(paths) < 3 || paths[0] != "/control/namespaces/app/rollouts" || paths[1] != "/control/namespaces/app/rollouts/r1" {
		t.Errorf("requests: %q", paths)
	}
}
