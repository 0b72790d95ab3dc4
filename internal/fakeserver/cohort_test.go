package fakeserver

import (
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/holdfast-dev/holdfast/internal/wire"
	"github.com/holdfast-dev/holdfast/transport"
)

func cohortBody(t testing.TB, r wire.CohortReport) string {
	t.Helper()
	b, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// states lists what s says of ns's clients, "id=acked/nacked".
func states(s *Server, ns string) []string {
	var out []string
	for _, c := range s.Clients() {
		if c.Namespace == ns {
			out = append(out, fmt.Sprintf("%s=%d/%d", c.ClientID, c.AckedRevision, c.NackedRevision))
		}
	}
	return out
}

// TestAckCohortEndpoint posts reports as a relay would, and bad ones, and
// checks what the server lists after each.
func TestAckCohortEndpoint(t *testing.T) {
	s := start(t)
	c := newClient(t)
	rev, _ := s.Publish("app", map[string]any{"v": 1})
	rev2, _ := s.Publish("app", map[string]any{"v": 2})
	s.Publish("other", map[string]any{"v": 1})
	url := s.URL() + transport.PathAckCohort
	applied := func(rev int64, runs ...int) wire.CohortOutcome {
		return wire.CohortOutcome{Revision: rev, Status: transport.AckApplied, Runs: runs}
	}
	steps := []struct {
		name   string
		body   string
		status int
		code   string
		want   []string // of app, after the step
	}{
		{"members and an outcome", cohortBody(t, wire.CohortReport{RelayID: "r1", Epoch: "e1", Namespaces: []wire.CohortNamespace{
			{Namespace: "app", Members: []string{"a", "b", "c"}, Outcomes: []wire.CohortOutcome{applied(rev, 0, 3)}},
		}}), http.StatusNoContent, "", []string{"a=1/0", "b=1/0", "c=1/0"}},
		{"an outcome of known slots, and a nack", cohortBody(t, wire.CohortReport{RelayID: "r1", Epoch: "e1", Namespaces: []wire.CohortNamespace{
			{Namespace: "app", Outcomes: []wire.CohortOutcome{applied(rev2, 0, 1, 2, 1), {Revision: rev2, Status: transport.AckRejected, Error: "no", Runs: []int{1, 1}}}},
		}}), http.StatusNoContent, "", []string{"a=2/0", "b=1/2", "c=2/0"}},
		{"a slot it does not know", cohortBody(t, wire.CohortReport{RelayID: "r1", Epoch: "e1", Namespaces: []wire.CohortNamespace{
			{Namespace: "app", Outcomes: []wire.CohortOutcome{applied(rev, 0, 4)}},
		}}), http.StatusConflict, transport.CodeCohortUnknown, []string{"a=2/0", "b=1/2", "c=2/0"}},
		{"members after a gap", cohortBody(t, wire.CohortReport{RelayID: "r1", Epoch: "e1", Namespaces: []wire.CohortNamespace{
			{Namespace: "app", From: 5, Members: []string{"f"}},
		}}), http.StatusConflict, transport.CodeCohortUnknown, []string{"a=2/0", "b=1/2", "c=2/0"}},
		{"one part refused refuses the report whole", cohortBody(t, wire.CohortReport{RelayID: "r1", Epoch: "e1", Namespaces: []wire.CohortNamespace{
			{Namespace: "app", From: 3, Members: []string{"d"}, Outcomes: []wire.CohortOutcome{applied(rev2, 3, 1)}},
			{Namespace: "other", Outcomes: []wire.CohortOutcome{applied(3, 0, 1)}},
		}}), http.StatusConflict, transport.CodeCohortUnknown, []string{"a=2/0", "b=1/2", "c=2/0"}},
		{"a namespace that does not exist is dropped, the others kept", cohortBody(t, wire.CohortReport{RelayID: "r1", Epoch: "e1", Namespaces: []wire.CohortNamespace{
			{Namespace: "nowhere", Members: []string{"x"}, Outcomes: []wire.CohortOutcome{applied(1, 0, 1)}},
			{Namespace: "app", From: 3, Members: []string{"d"}, Outcomes: []wire.CohortOutcome{applied(rev2, 3, 1)}},
		}}), http.StatusNoContent, "", []string{"a=2/0", "b=1/2", "c=2/0", "d=2/0"}},
		{"members sent again", cohortBody(t, wire.CohortReport{RelayID: "r1", Epoch: "e1", Namespaces: []wire.CohortNamespace{
			{Namespace: "app", Members: []string{"a", "b"}},
		}}), http.StatusNoContent, "", []string{"a=2/0", "b=1/2", "c=2/0", "d=2/0"}},
		{"malformed JSON", `{"relay_id":"r1","epoch":`, http.StatusBadRequest, transport.CodeBadRequest, nil},
		{"no relay id", `{"epoch":"e1","namespaces":[]}`, http.StatusBadRequest, transport.CodeBadRequest, nil},
		{"an invalid name", cohortBody(t, wire.CohortReport{RelayID: "r1", Epoch: "e1", Namespaces: []wire.CohortNamespace{{Namespace: "../x"}}}), http.StatusBadRequest, transport.CodeBadRequest, nil},
		{"a namespace twice", cohortBody(t, wire.CohortReport{RelayID: "r1", Epoch: "e1", Namespaces: []wire.CohortNamespace{{Namespace: "app"}, {Namespace: "app"}}}), http.StatusBadRequest, transport.CodeBadRequest, nil},
		{"an unknown status", `{"relay_id":"r1","epoch":"e1","namespaces":[{"ns":"app","outcomes":[{"revision":1,"status":"maybe","runs":[0,1]}]}]}`, http.StatusBadRequest, transport.CodeBadRequest, nil},
		{"runs out of order", `{"relay_id":"r1","epoch":"e1","namespaces":[{"ns":"app","outcomes":[{"revision":1,"status":"ack","runs":[2,1,0,1]}]}]}`, http.StatusBadRequest, transport.CodeBadRequest, nil},
		{"a run of none", `{"relay_id":"r1","epoch":"e1","namespaces":[{"ns":"app","outcomes":[{"revision":1,"status":"ack","runs":[0,0]}]}]}`, http.StatusBadRequest, transport.CodeBadRequest, nil},
		{"a negative slot", `{"relay_id":"r1","epoch":"e1","namespaces":[{"ns":"app","outcomes":[{"revision":1,"status":"ack","runs":[-1,2]}]}]}`, http.StatusBadRequest, transport.CodeBadRequest, nil},
		{"a run past the limit", `{"relay_id":"r1","epoch":"e1","namespaces":[{"ns":"app","outcomes":[{"revision":1,"status":"ack","runs":[1,9223372036854775807]}]}]}`, http.StatusBadRequest, transport.CodeBadRequest, nil},
		{"half a run", `{"relay_id":"r1","epoch":"e1","namespaces":[{"ns":"app","outcomes":[{"revision":1,"status":"ack","runs":[0]}]}]}`, http.StatusBadRequest, transport.CodeBadRequest, nil},
		{"an empty member", `{"relay_id":"r1","epoch":"e1","namespaces":[{"ns":"app","members":[""]}]}`, http.StatusBadRequest, transport.CodeBadRequest, nil},
		{"too many members", cohortBody(t, wire.CohortReport{RelayID: "r1", Epoch: "e1", Namespaces: []wire.CohortNamespace{
			{Namespace: "app", From: 4, Members: slices.Repeat([]string{"m"}, wire.MaxCohortMembers+1)},
		}}), http.StatusBadRequest, transport.CodeBadRequest, nil},
		{"a new epoch folds the old one in", cohortBody(t, wire.CohortReport{RelayID: "r1", Epoch: "e2", Namespaces: []wire.CohortNamespace{
			{Namespace: "app", Members: []string{"c", "e"}, Outcomes: []wire.CohortOutcome{applied(rev, 1, 1)}},
		}}), http.StatusNoContent, "", []string{"a=2/0", "b=1/2", "c=2/0", "d=2/0", "e=1/0"}},
	}
	for _, st := range steps {
		resp, body := do(t, c, http.MethodPost, url, st.body, "Content-Type", "application/json")
		if resp.StatusCode != st.status {
			t.Fatalf("%s: status %d %s, want %d", st.name, resp.StatusCode, body, st.status)
		}
		if st.code != "" {
			var eb transport.ErrorBody
			if err := json.Unmarshal(body, &eb); err != nil || eb.Error != st.code {
				t.Errorf("%s: body %s, want code %q", st.name, body, st.code)
			}
		}
		if st.want != nil {
			if got := states(s, "app"); !slices.Equal(got, st.want) {
				t.Errorf("%s: clients %v, want %v", st.name, got, st.want)
			}
		}
	}
	if got := states(s, "other"); len(got) != 0 {
		t.Errorf("a refused report recorded %v", got)
	}

	// Status counts the cohort's clients (live: the relay reports them
	// connected); a rollback forgets what they reported past it; a reset
	// forgets them.
	reportPresence(t, c, s.URL(), "r1", "a", "b", "c", "d", "e")
	ns, err := s.Status("app")
	if err != nil {
		t.Fatal(err)
	}
	if ns.Clients != 5 || ns.Acked != 3 || ns.Nacked != 1 {
		t.Errorf("status %+v, want 5 clients, 3 acked, 1 nacked", ns)
	}
	s.dp.RewindAcks(rev)
	if got, want := states(s, "app"), []string{"b=1/0", "e=1/0"}; !slices.Equal(got, want) {
		t.Errorf("after a rewind to %d: %v, want %v", rev, got, want)
	}
	s.ResetStore()
	if got := s.Clients(); len(got) != 0 {
		t.Errorf("after a reset: %v", got)
	}
}

// Without the capability the endpoint is not there, as at a server that
// predates it.
func TestAckCohortNotOffered(t *testing.T) {
	s := start(t, WithoutCapability(transport.CapabilityAckCohort))
	s.Publish("app", map[string]any{"v": 1})
	resp, body := do(t, newClient(t), http.MethodPost, s.URL()+transport.PathAckCohort, `{"relay_id":"r1","epoch":"e1","namespaces":[]}`)
	if resp.StatusCode != http.StatusNotFound {
		t.Errorf("status %d %s, want 404", resp.StatusCode, body)
	}
	if strings.Contains(resp.Header.Get(transport.HeaderCapabilities), transport.CapabilityAckCohort) {
		t.Errorf("capabilities %q", resp.Header.Get(transport.HeaderCapabilities))
	}
}

// A cohort's outcomes count in a running rollout as its clients' acks
// would: the origin expands them only then (the data plane's
// TestAckCohortExpandsWhatIsAsked), and with no rollout it asks none.
func TestAckCohortCountsInARollout(t *testing.T) {
	s := start(t)
	s.Publish("app", map[string]any{"v": 1})
	if s.rollouts.wants("app", 1) {
		t.Error("wants reports with no rollout")
	}
}

// A relay's sink hears whether acks came in a cohort report (held by the
// relay downstream already) or from a client.
func TestAckSinkSaysWhatWasHeld(t *testing.T) {
	var mu sync.Mutex
	var held []bool
	s := start(t, WithAckSink(func(acks []transport.Ack, h bool) {
		mu.Lock()
		defer mu.Unlock()
		held = append(held, h)
	}))
	s.Publish("app", map[string]any{"v": 1})
	c := newClient(t)
	body := cohortBody(t, wire.CohortReport{RelayID: "r1", Epoch: "e1", Namespaces: []wire.CohortNamespace{
		{Namespace: "app", Members: []string{"a"}, Outcomes: []wire.CohortOutcome{{Revision: 1, Status: transport.AckApplied, Runs: []int{0, 1}}}}}})
	if resp, b := do(t, c, http.MethodPost, s.URL()+transport.PathAckCohort, body); resp.StatusCode != http.StatusNoContent {
		t.Fatalf("cohort: %d %s", resp.StatusCode, b)
	}
	if resp, b := do(t, c, http.MethodPost, s.URL()+transport.PathAck, `{"client_id":"b","ns":"app","revision":1,"status":"ack"}`); resp.StatusCode != http.StatusNoContent {
		t.Fatalf("ack: %d %s", resp.StatusCode, b)
	}
	mu.Lock()
	defer mu.Unlock()
	if !slices.Equal(held, []bool{true, false}) {
		t.Errorf("held %v, want [true false]", held)
	}
}
