package dataplane

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/holdfast-dev/holdfast/internal/wire"
	"github.com/holdfast-dev/holdfast/transport"
)

// postAckBody posts body to s's /sdk/ack and returns the status.
func postAckBody(t *testing.T, s *Server, body string) int {
	t.Helper()
	w := httptest.NewRecorder()
	s.Handler().ServeHTTP(w, httptest.NewRequest(http.MethodPost, transport.PathAck, strings.NewReader(body)))
	return w.Code
}

// TestAckSDKVersionReachesTheSink: an ack's sdk_version, single or in a
// batch, reaches the origin's ack observer and a relay's ack sink, and
// Clients keeps each client's last; one not of a version's form is
// refused (400).
func TestAckSDKVersionReachesTheSink(t *testing.T) {
	var mu sync.Mutex
	var got []transport.Ack
	keep := func(acks []transport.Ack) {
		mu.Lock()
		defer mu.Unlock()
		got = append(got, acks...)
	}
	be := newMemBackend()
	origin := be.start(t, WithAckObserver(keep, nil))
	be.publish("app", map[string]any{"v": 1})
	relayBE := newMemBackend()
	relay := relayBE.start(t, WithAckSink(func(acks []transport.Ack, _ bool) { keep(acks) }))
	relayBE.publish("app", map[string]any{"v": 1})

	for _, s := range []*Server{origin, relay} {
		for _, body := range []string{
			`{"client_id":"c1","ns":"app","revision":1,"status":"ack","sdk_version":"0.1.0"}`,
			`{"client_id":"c2","acks":[{"ns":"app","revision":1,"status":"ack","sdk_version":"1.2.0-rc.1"},{"client_id":"c3","ns":"app","revision":1,"status":"nack","error":"x"}]}`,
		} {
			if code := postAckBody(t, s, body); code/100 != 2 {
				t.Fatalf("%s: %d", body, code)
			}
		}
		if code := postAckBody(t, s, `{"client_id":"c4","ns":"app","revision":1,"status":"ack","sdk_version":"0.1 patched"}`); code != http.StatusBadRequest {
			t.Errorf("a malformed sdk_version: %d, want 400", code)
		}
	}
	mu.Lock()
	versions := make([]string, len(got))
	for i, a := range got {
		versions[i] = a.ClientID + "=" + a.SDKVersion
	}
	mu.Unlock()
	if want := "c1=0.1.0 c2=1.2.0-rc.1 c3= c1=0.1.0 c2=1.2.0-rc.1 c3="; strings.Join(versions, " ") != want {
		t.Errorf("the sink and the observer got %q, want %q", versions, want)
	}

	// A later report without a version keeps the one said; a later one
	// with another replaces it.
	postAckBody(t, origin, `{"client_id":"c1","ns":"app","revision":1,"status":"ack"}`)
	postAckBody(t, origin, `{"client_id":"c2","ns":"app","revision":1,"status":"ack","sdk_version":"1.3.0"}`)
	var clients []string
	for _, c := range origin.Clients() {
		clients = append(clients, c.ClientID+"="+c.SDKVersion)
	}
	if want := "c1=0.1.0 c2=1.3.0 c3="; strings.Join(clients, " ") != want {
		t.Errorf("Clients: %q, want %q", clients, want)
	}
}

// TestAckCohortCarriesSDKVersions: a cohort report's outcomes name their
// clients' SDK version: Clients keeps it per client, the expanded acks
// carry it, and a later report of another version replaces it (a client
// upgraded behind the relay).
func TestAckCohortCarriesSDKVersions(t *testing.T) {
	be := newMemBackend()
	s := be.start(t)
	be.publish("app", map[string]any{"v": 1})
	rep := &wire.CohortReport{RelayID: "r1", Epoch: "e1", Namespaces: []wire.CohortNamespace{{Namespace: "app", Members: []string{"a", "b", "c"},
		Outcomes: []wire.CohortOutcome{
			{Revision: 1, Status: transport.AckApplied, SDKVersion: "0.1.0", Runs: []int{0, 2}},
			{Revision: 1, Status: transport.AckApplied, Runs: []int{2, 1}},
		}}}}
	if err := wire.CheckCohortReport(rep); err != nil {
		t.Fatal(err)
	}
	acks, err := s.acks.recordCohort(rep, time.Now(), func(string, int64) bool { return true })
	if err != nil {
		t.Fatal(err)
	}
	var expanded []string
	for _, a := range acks {
		expanded = append(expanded, a.ClientID+"="+a.SDKVersion)
	}
	if want := "a=0.1.0 b=0.1.0 c="; strings.Join(expanded, " ") != want {
		t.Errorf("expanded %q, want %q", expanded, want)
	}
	rep.Namespaces[0].Members = nil
	rep.Namespaces[0].Outcomes = []wire.CohortOutcome{{Revision: 1, Status: transport.AckApplied, SDKVersion: "0.2.0", Runs: []int{1, 1}}}
	if _, err := s.acks.recordCohort(rep, time.Now(), func(string, int64) bool { return false }); err != nil {
		t.Fatal(err)
	}
	var clients []string
	for _, c := range s.Clients() {
		clients = append(clients, c.ClientID+"="+c.SDKVersion)
	}
	if want := "a=0.1.0 b=0.2.0 c="; strings.Join(clients, " ") != want {
		t.Errorf("Clients: %q, want %q", clients, want)
	}

	bad := &wire.CohortReport{RelayID: "r1", Epoch: "e1", Namespaces: []wire.CohortNamespace{{Namespace: "app",
		Outcomes: []wire.CohortOutcome{{Revision: 1, Status: transport.AckApplied, SDKVersion: "0.1 patched", Runs: []int{0, 1}}}}}}
	if err := wire.CheckCohortReport(bad); err == nil || !strings.Contains(err.Error(), "sdk_version") {
		t.Errorf("a malformed sdk_version in a cohort: %v", err)
	}
}

// TestNewerKeepsTheLaterSDKVersion: merging two records of one client
// (two relays' cohorts, a fold) keeps the version of the later report,
// or the one said when the later said none.
func TestNewerKeepsTheLaterSDKVersion(t *testing.T) {
	t0 := time.Now()
	old := ackState{acked: 1, at: t0, sdkVersion: "0.1.0"}
	for _, tc := range []struct {
		x, y ackState
		want string
	}{
		{old, ackState{acked: 2, at: t0.Add(time.Second), sdkVersion: "0.2.0"}, "0.2.0"},
		{ackState{acked: 2, at: t0.Add(time.Second), sdkVersion: "0.2.0"}, old, "0.2.0"},
		{old, ackState{acked: 2, at: t0.Add(time.Second)}, "0.1.0"},
		{ackState{acked: 2, at: t0.Add(time.Second)}, old, "0.1.0"},
	} {
		if got := newer(tc.x, tc.y).sdkVersion; got != tc.want {
			t.Errorf("newer(%+v, %+v).sdkVersion = %q, want %q", tc.x, tc.y, got, tc.want)
		}
	}
}
