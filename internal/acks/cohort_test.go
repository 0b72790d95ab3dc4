package acks

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/holdfast-dev/holdfast/internal/version"
	"github.com/holdfast-dev/holdfast/internal/wire"
	"github.com/holdfast-dev/holdfast/transport"
)

// cohortUp is an upstream that takes cohort reports the way a server
// does: it keeps each namespace's members by slot, refuses slots it does
// not know (ErrCohortUnknown), and records outcomes per client; the acks
// that go one by one it records apart.
type cohortUp struct {
	mu      sync.Mutex
	offered bool
	epoch   string
	members map[string][]string         // ns → slot → client
	state   map[string]map[string]int64 // ns → client → applied revision
	nacks   map[string]string           // client/ns → error
	one     []transport.Ack             // AckRelayed's
	reports []wire.CohortReport
	forget  bool // the next report finds the server knowing nothing
}

func newCohortUp() *cohortUp {
	return &cohortUp{offered: true, members: map[string][]string{}, state: map[string]map[string]int64{}, nacks: map[string]string{}}
}

func (u *cohortUp) Ack(ctx context.Context, a transport.Ack) error {
	return u.AckRelayed(ctx, "", []transport.Ack{a})
}

func (u *cohortUp) AckRelayed(_ context.Context, _ string, acks []transport.Ack) error {
	u.mu.Lock()
	defer u.mu.Unlock()
	u.one = append(u.one, acks...)
	return nil
}

func (u *cohortUp) CohortsOffered() bool {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.offered
}

func (u *cohortUp) AckCohort(_ context.Context, _ string, body json.RawMessage) error {
	var r wire.CohortReport
	if err := json.Unmarshal(body, &r); err != nil {
		return fmt.Errorf("%w: %v", transport.ErrBadRequest, err)
	}
	if err := wire.CheckCohortReport(&r); err != nil {
		return fmt.Errorf("%w: %v", transport.ErrBadRequest, err)
	}
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.forget || u.epoch != r.Epoch {
		u.forget, u.epoch, u.members = false, r.Epoch, map[string][]string{}
	}
	for _, n := range r.Namespaces { // check, as a server does, before recording
		known := len(u.members[n.Namespace])
		if len(n.Members) > 0 {
			if n.From > known {
				return transport.ErrCohortUnknown
			}
			known = max(known, n.From+len(n.Members))
		}
		for _, o := range n.Outcomes {
			if o.Runs[len(o.Runs)-2]+o.Runs[len(o.Runs)-1] > known {
				return transport.ErrCohortUnknown
			}
		}
	}
	u.reports = append(u.reports, r)
	for _, n := range r.Namespaces {
		m := u.members[n.Namespace]
		for i, id := range n.Members {
			if n.From+i == len(m) {
				m = append(m, id)
			}
		}
		u.members[n.Namespace] = m
		if u.state[n.Namespace] == nil {
			u.state[n.Namespace] = map[string]int64{}
		}
		for _, o := range n.Outcomes {
			o.Slots(func(slot int) {
				if o.Status == transport.AckApplied {
					u.state[n.Namespace][m[slot]] = o.Revision
				} else {
					u.nacks[m[slot]+"/"+n.Namespace] = o.Error
				}
			})
		}
	}
	return nil
}

func (u *cohortUp) applied(ns string) map[string]int64 {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.state[ns]
}

func applied(client, ns string, rev int64) transport.Ack {
	return transport.Ack{ClientID: client, Namespace: ns, Revision: rev, Status: transport.AckApplied}
}

// send runs one flush of acks through a Queue's cohorts, as run does.
func send(t *testing.T, q *Queue, acks ...transport.Ack) {
	t.Helper()
	if err := q.send(context.Background(), acks); err != nil {
		t.Fatal(err)
	}
}

// Outcomes shared by many clients travel as one outcome with runs of
// slots; each client is named once, in the first report that speaks of it.
func TestCohortReportsRunsOfSlots(t *testing.T) {
	up := newCohortUp()
	q := New(up, slog.New(slog.DiscardHandler), "relay-1")
	var acks []transport.Ack
	for i := range 1000 {
		acks = append(acks, applied("c"+strconv.Itoa(i), "app", 7))
	}
	send(t, q, acks...)
	send(t, q, slices.Clone(acks)...) // the same outcomes again: nobody new
	for i := range acks {
		acks[i].Revision = 8
	}
	acks[500] = transport.Ack{ClientID: "c500", Namespace: "app", Revision: 8, Status: transport.AckRejected, Error: "bad value"}
	send(t, q, acks...)

	if len(up.reports) != 3 {
		t.Fatalf("%d reports, want 3", len(up.reports))
	}
	if n := up.reports[0].Namespaces[0]; len(n.Members) != 1000 || len(n.Outcomes) != 1 || !slices.Equal(n.Outcomes[0].Runs, []int{0, 1000}) {
		t.Errorf("first report: %d members, outcomes %+v; want 1000 and one run [0 1000]", len(n.Members), n.Outcomes)
	}
	if n := up.reports[1].Namespaces[0]; len(n.Members) != 0 {
		t.Errorf("second report names %d members again", len(n.Members))
	}
	third := up.reports[2].Namespaces[0].Outcomes
	if len(third) != 2 {
		t.Fatalf("third report: %+v, want an applied and a rejected outcome", third)
	}
	for _, o := range third {
		switch o.Status {
		case transport.AckApplied:
			if len(o.Runs) != 4 {
				t.Errorf("applied runs %v, want two around slot 500", o.Runs)
			}
		case transport.AckRejected:
			if o.Error != "bad value" || len(o.Runs) != 2 {
				t.Errorf("rejected %+v", o)
			}
		}
	}
	got := up.applied("app")
	for i := range 1000 {
		want := int64(8)
		if i == 500 {
			want = 7
		}
		if got["c"+strconv.Itoa(i)] != want {
			t.Fatalf("c%d at %d, want %d", i, got["c"+strconv.Itoa(i)], want)
		}
	}
	if up.nacks["c500/app"] != "bad value" {
		t.Errorf("c500's nack: %q", up.nacks["c500/app"])
	}
}

// More new members than one report holds go in reports of their own
// first; a server that forgot the cohort hears every member again.
func TestCohortNamesManyMembersAndResendsToAServerThatForgot(t *testing.T) {
	up := newCohortUp()
	q := New(up, slog.New(slog.DiscardHandler), "relay-1")
	n := 2*wire.MaxCohortMembers + 10
	var acks []transport.Ack
	for i := range n {
		acks = append(acks, applied("c"+strconv.Itoa(i), "a", 3), applied("c"+strconv.Itoa(i), "b", 4))
	}
	send(t, q, acks...)
	for _, r := range up.reports {
		names := 0
		for _, p := range r.Namespaces {
			names += len(p.Members)
		}
		if names > wire.MaxCohortMembers {
			t.Fatalf("a report names %d members", names)
		}
	}
	if len(up.applied("a")) != n || len(up.applied("b")) != n {
		t.Fatalf("applied: %d of a, %d of b; want %d each", len(up.applied("a")), len(up.applied("b")), n)
	}

	up.mu.Lock()
	up.forget, up.state = true, map[string]map[string]int64{}
	up.mu.Unlock()
	send(t, q, applied("c1", "a", 5), applied("c2", "b", 6))
	if got := up.applied("a"); got["c1"] != 5 {
		t.Errorf("after the server forgot: c1 of a at %d, want 5", got["c1"])
	}
	if got := up.applied("b"); got["c2"] != 6 {
		t.Errorf("after the server forgot: c2 of b at %d, want 6", got["c2"])
	}
	up.mu.Lock()
	defer up.mu.Unlock()
	if len(up.members["a"]) != n || len(up.members["b"]) != n {
		t.Errorf("members told again: %d of a, %d of b; want %d", len(up.members["a"]), len(up.members["b"]), n)
	}
}

// Reports a cohort does not carry (about a rollout, of an unknown kind,
// with unknown fields) go one by one, as their clients made them; all go
// one by one to a server without cohorts.
func TestCohortLeavesOtherReportsToGoOneByOne(t *testing.T) {
	up := newCohortUp()
	q := New(up, slog.New(slog.DiscardHandler), "relay-1")
	staged := transport.Ack{ClientID: "c2", Namespace: "app", Revision: 9, Status: transport.AckApplied, Rollout: "r1"}
	later := transport.Ack{ClientID: "c3", Namespace: "app", Revision: 9, Status: "quarantined"}
	extra := transport.Ack{ClientID: "c4", Namespace: "app", Revision: 9, Status: transport.AckApplied, Extra: `"stage":2`}
	would := transport.Ack{ClientID: "c5", Namespace: "app", Revision: 9, Status: transport.AckWouldReject, Rollout: "r1"}
	send(t, q, applied("c1", "app", 9), staged, later, extra, would)
	if got := up.applied("app"); len(got) != 1 || got["c1"] != 9 {
		t.Errorf("cohort: %v, want c1 only", got)
	}
	if want := []transport.Ack{staged, later, extra, would}; !sameAcks(up.one, want) {
		t.Errorf("one by one: %+v, want %+v", up.one, want)
	}

	up.mu.Lock()
	up.offered, up.one = false, nil
	up.mu.Unlock()
	send(t, q, applied("c6", "app", 10))
	if len(up.one) != 1 || up.one[0].ClientID != "c6" {
		t.Errorf("to a server without cohorts: %+v", up.one)
	}
}

func sameAcks(x, y []transport.Ack) bool {
	key := func(a transport.Ack) string { return a.ClientID + "/" + a.Status }
	kx, ky := make([]string, 0, len(x)), make([]string, 0, len(y))
	for _, a := range x {
		kx = append(kx, key(a))
	}
	for _, a := range y {
		ky = append(ky, key(a))
	}
	slices.Sort(kx)
	slices.Sort(ky)
	return slices.Equal(kx, ky)
}

// A relay holds a plain ack for a cohort report long enough to gather a
// publish's acks from all its clients; one of a namespace in a rollout,
// or of any other kind, goes in the narrow window, and takes what waits
// with it.
func TestCohortHoldsPlainAcksForOneReport(t *testing.T) {
	cases := []struct {
		name     string
		up       transport.Acker
		ack      transport.Ack
		staged   bool
		min, max time.Duration
	}{
		{"plain", newCohortUp(), applied("c1", "app", 1), false, relayPlainDelay, relayPlainDelay},
		{"in a rollout", newCohortUp(), applied("c1", "app", 1), true, ackDelayMin, ackDelayMax},
		{"a nack", newCohortUp(), transport.Ack{ClientID: "c1", Namespace: "app", Revision: 1, Status: transport.AckRejected}, false, ackDelayMin, ackDelayMax},
		{"of a rollout", newCohortUp(), transport.Ack{ClientID: "c1", Namespace: "app", Revision: 1, Status: transport.AckApplied, Rollout: "r1"}, false, ackDelayMin, ackDelayMax},
		{"without cohorts", &picky{}, applied("c1", "app", 1), false, ackDelayMin, ackDelayMax},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			q := New(tc.up, slog.New(slog.DiscardHandler), "relay-1")
			before := time.Now()
			q.Forward(tc.ack, tc.staged)
			after := time.Now()
			q.mu.Lock()
			due := q.due
			q.mu.Unlock()
			if due.Before(before.Add(tc.min)) || due.After(after.Add(tc.max)) {
				t.Errorf("due in %v, want %v..%v", due.Sub(before), tc.min, tc.max)
			}
		})
	}
	// A prompt one brings forward the plain one waiting.
	q := New(newCohortUp(), slog.New(slog.DiscardHandler), "relay-1")
	q.Forward(applied("c1", "app", 1), false)
	q.Forward(applied("c2", "app", 1), true)
	q.mu.Lock()
	defer q.mu.Unlock()
	if wait := time.Until(q.due); wait > ackDelayMax {
		t.Errorf("due in %v after a prompt ack", wait)
	}
}

// Clients' SDK versions travel with their outcomes: one outcome per
// version in a cohort report (a client that upgraded is heard at its new
// version with its next report), and as they came in the acks that go
// one by one.
func TestCohortCarriesSDKVersions(t *testing.T) {
	up := newCohortUp()
	q := New(up, slog.New(slog.DiscardHandler), "relay-1")
	versioned := func(client string, rev int64, v string) transport.Ack {
		a := applied(client, "app", rev)
		a.SDKVersion = v
		return a
	}
	send(t, q, versioned("a", 7, "0.1.0"), versioned("b", 7, "0.1.0"), versioned("c", 7, "0.2.0"), applied("d", "app", 7),
		transport.Ack{ClientID: "e", Namespace: "app", Revision: 7, Status: transport.AckApplied, Rollout: "r1", SDKVersion: "0.2.0"})
	send(t, q, versioned("a", 8, "0.2.0"))
	if len(up.reports) != 2 {
		t.Fatalf("%d reports, want 2", len(up.reports))
	}
	versionsOf := func(r wire.CohortReport) map[string]string { // client → version
		out := map[string]string{}
		n := r.Namespaces[0]
		for _, o := range n.Outcomes {
			o.Slots(func(slot int) { out[up.members["app"][slot]] = o.SDKVersion })
		}
		return out
	}
	if got, want := versionsOf(up.reports[0]), map[string]string{"a": "0.1.0", "b": "0.1.0", "c": "0.2.0", "d": ""}; !maps.Equal(got, want) {
		t.Errorf("first report's versions %v, want %v", got, want)
	}
	if n := len(up.reports[0].Namespaces[0].Outcomes); n != 3 {
		t.Errorf("first report: %d outcomes, want one per version", n)
	}
	if got, want := versionsOf(up.reports[1]), map[string]string{"a": "0.2.0"}; !maps.Equal(got, want) {
		t.Errorf("second report's versions %v, want %v", got, want)
	}
	if len(up.one) != 1 || up.one[0].ClientID != "e" || up.one[0].SDKVersion != "0.2.0" {
		t.Errorf("one by one: %+v, want e's rollout report at 0.2.0", up.one)
	}
}

// A client's own reports carry this SDK's version.
func TestReportCarriesTheSDKVersion(t *testing.T) {
	q := New(&cohortUp{}, slog.New(slog.DiscardHandler), "")
	q.Report("c1", "app", 3, "", false, nil)
	q.Report("c1", "app", 4, "", false, errors.New("bad"))
	acks := q.take()
	if len(acks) != 2 {
		t.Fatalf("%d acks waiting, want 2", len(acks))
	}
	for _, a := range acks {
		if a.SDKVersion != version.SDK {
			t.Errorf("%+v: want sdk_version %q", a, version.SDK)
		}
	}
}
