package transport

import (
	"context"
	"errors"
	"strings"
	"testing"
)

func TestValidateClientID(t *testing.T) {
	for _, tc := range []struct {
		id string
		ok bool
	}{
		{"host-1", true},
		{"host-1 pid 7 é", true},
		{strings.Repeat("h", MaxClientIDBytes), true},
		{"", false},
		{strings.Repeat("h", MaxClientIDBytes+1), false},
		{"host\n1", false},
		{"host\x7f", false},
	} {
		if err := ValidateClientID(tc.id); (err == nil) != tc.ok {
			t.Errorf("ValidateClientID(%q) = %v, want ok %v", tc.id, err, tc.ok)
		}
	}
}

// A report that fails the sender's own check is a bad request, sent to
// nobody: the queue drops it (with a warning) instead of retrying for ever.
func TestAckCohortRefusesABadReportAsABadRequest(t *testing.T) {
	s, err := NewHTTPSource("http://127.0.0.1:1")
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	s2, err := NewHTTPSource("http://127.0.0.1:2")
	if err != nil {
		t.Fatal(err)
	}
	f, err := NewFailoverSource([]*HTTPSource{s, s2})
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for _, r := range []CohortReport{
		{RelayID: "relay\n1", Epoch: "e"},
		{RelayID: "r", Epoch: ""},
		{RelayID: "r", Epoch: "e", Namespaces: []CohortNamespace{{Namespace: "a", Outcomes: []CohortOutcome{{Revision: 1, Status: "maybe", Runs: []int{0, 1}}}}}},
	} {
		for name, src := range map[string]CohortAcker{"http": s, "failover": f} {
			if err := src.AckCohort(context.Background(), r); !errors.Is(err, ErrBadRequest) {
				t.Errorf("%s: AckCohort(%+v) = %v, want ErrBadRequest", name, r, err)
			}
		}
	}
	if f.Endpoint() != "http://127.0.0.1:1" {
		t.Errorf("a bad report moved the failover to %s", f.Endpoint())
	}
}
