package fakeserver

import (
	"encoding/json"
	"errors"
	"net/http"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/holdfast-dev/holdfast/internal/testutil"
	"github.com/holdfast-dev/holdfast/internal/testutil/ssetest"
	"github.com/holdfast-dev/holdfast/internal/wire"
	"github.com/holdfast-dev/holdfast/transport"
)

// A store restored from a backup: the same id, history after the backup's
// revision gone, the revision counter back there, every stream and held
// long-poll cut as on a restart. What a client held past that revision is
// now unknown to the server: its cursor is ahead, and the next publishes
// reuse its revision numbers with other content.
func TestRestoreTo(t *testing.T) {
	s := start(t, WithHeartbeat(time.Hour))
	c := newClient(t)
	u := s.URL()
	id := s.StoreID()
	r1, _ := s.Publish("app", map[string]any{"a": 1})
	s.Publish("other", map[string]any{"x": 1})          // 2
	s.Publish("app", map[string]any{"a": 3, "b": true}) // 3
	r4, _ := s.Publish("late", map[string]any{"l": 1})  // 4: a namespace born after the backup
	do(t, c, "POST", u+"/sdk/ack", `{"client_id":"c1","ns":"app","revision":3,"status":"ack"}`)
	do(t, c, "POST", u+"/sdk/ack", `{"client_id":"c2","ns":"app","revision":1,"status":"ack"}`)

	st := ssetest.Open(t, c, u+"/sdk/watch?ns=app&since="+strconv.FormatInt(r4, 10), "")
	st.MustNext(t) // the progress at the head: the stream is up
	poll := make(chan error, 1)
	go func() {
		req, _ := http.NewRequest("GET", u+"/sdk/events?ns=app&since=4&wait=10s", nil)
		resp, err := c.Do(req)
		if err == nil {
			var er transport.EventsResponse
			_ = json.NewDecoder(resp.Body).Decode(&er)
			resp.Body.Close()
			err = errors.New("answered " + resp.Status + " with cursor " + strconv.FormatInt(er.Cursor, 10))
		}
		poll <- err
	}()
	testutil.Eventually(t, waitLimit, func() bool {
		return s.Watchers("app") == 2
	}, "a held long-poll")

	if err := s.RestoreTo(2); err != nil {
		t.Fatal(err)
	}
	if s.StoreID() != id || s.Head() != 2 {
		t.Fatalf("after restore: store %s head %d, want %s and 2", s.StoreID(), s.Head(), id)
	}
	st.Ended(t)
	// A held long-poll is cut, not answered: a cursor from before the
	// restore would tell the client it had seen history the store no
	// longer has.
	if err := <-poll; err == nil || err.Error()[:8] == "answered" {
		t.Fatalf("held long-poll across a restore: %v, want the connection cut", err)
	}

	// The content and revision at the backup; the later namespace is gone.
	resp, body := do(t, c, "GET", u+"/sdk/snapshot?ns=app", "")
	snap := decode[transport.Snapshot](t, body)
	if resp.StatusCode != 200 || snap.StoreID != id || snap.Revision != r1 || snap.Cursor != 2 ||
		string(snap.Values) != `{"a":1}` || resp.Header.Get(transport.HeaderStoreID) != id {
		t.Fatalf("snapshot after restore: %d %s", resp.StatusCode, body)
	}
	if resp, _ := do(t, c, "GET", u+"/sdk/snapshot?ns=late", ""); resp.StatusCode != 404 {
		t.Fatalf("namespace born after the backup: %d", resp.StatusCode)
	}
	// The client's cursor is ahead of the restored head: 400 cursor_ahead,
	// naming the same store.
	for _, path := range []string{"/sdk/watch", "/sdk/events"} {
		resp, body := do(t, c, "GET", u+path+"?ns=app&since=4", "")
		if eb := decode[transport.ErrorBody](t, body); resp.StatusCode != 400 || eb.Error != transport.CodeCursorAhead || eb.StoreID != id {
			t.Fatalf("%s from a cursor of the lost history: %d %s", path, resp.StatusCode, body)
		}
	}
	// Acks of lost revisions are forgotten; the others stay.
	for _, cs := range s.Clients() {
		if want := map[string]int64{"c1": 0, "c2": r1}[cs.ClientID]; cs.AckedRevision != want {
			t.Fatalf("client %s acked %d after restore, want %d", cs.ClientID, cs.AckedRevision, want)
		}
	}

	// Late acks of the lost history (a client or a relay held them across
	// the restore) are not recorded, whichever way they come: one ack, a
	// batch, a cohort report. Those of revisions the store has still are.
	do(t, c, "POST", u+"/sdk/ack", `{"client_id":"c3","ns":"app","revision":3,"status":"ack"}`)
	do(t, c, "POST", u+"/sdk/ack", `{"client_id":"c4","acks":[{"ns":"app","revision":3,"status":"ack"},{"ns":"other","revision":2,"status":"ack"}]}`)
	do(t, c, "POST", u+transport.PathAckCohort, cohortBody(t, wire.CohortReport{RelayID: "r1", Epoch: "e1",
		Namespaces: []wire.CohortNamespace{{Namespace: "app", Members: []string{"c5", "c6"}, Outcomes: []wire.CohortOutcome{
			{Revision: 3, Status: transport.AckApplied, Runs: []int{0, 1}},
			{Revision: r1, Status: transport.AckApplied, Runs: []int{1, 1}},
		}}}}))
	if got, want := states(s, "app"), []string{"c2=1/0", "c6=1/0"}; !slices.Equal(got, want) {
		t.Fatalf("app's clients after late acks of the lost history: %v, want %v", got, want)
	}
	if got, want := states(s, "other"), []string{"c4=2/0"}; !slices.Equal(got, want) {
		t.Fatalf("other's clients: %v, want %v", got, want)
	}

	// History goes on from the backup: revision 3 again, with other content.
	r3, err := s.Publish("app", map[string]any{"a": "new"})
	if err != nil || r3 != 3 {
		t.Fatalf("publish after restore: %d, %v; want revision 3", r3, err)
	}
	resp, body = do(t, c, "GET", u+"/sdk/events?ns=app&since=2", "")
	er := decode[transport.EventsResponse](t, body)
	if resp.StatusCode != 200 || len(er.Changes) != 1 || er.Changes[0].Revision != 3 || er.Changes[0].PrevRevision != r1 ||
		string(er.Changes[0].Puts["a"]) != `"new"` || er.StoreID != id {
		t.Fatalf("events after restore: %d %s", resp.StatusCode, body)
	}
	st = ssetest.Open(t, c, u+"/sdk/watch?ns=app&since="+strconv.FormatInt(r1, 10), "")
	if cs, _ := ssetest.Checked(t, st.MustNext(t)); cs == nil || cs.Revision != 3 || cs.PrevRevision != r1 {
		t.Fatalf("watch after restore: %+v", cs)
	}
}

func TestRestoreToErrors(t *testing.T) {
	s := start(t)
	for i := range 5 {
		s.Publish("app", map[string]any{"a": i})
	}
	if _, err := s.Compact(3); err != nil {
		t.Fatal(err)
	}
	var ce *transport.CompactedError
	if err := s.RestoreTo(2); !errors.As(err, &ce) || ce.CompactRevision != 3 {
		t.Fatalf("restore below the compaction point: %v", err)
	}
	for _, rev := range []int64{-1, 6} {
		if err := s.RestoreTo(rev); !errors.Is(err, ErrInvalid) {
			t.Fatalf("restore to %d: %v, want ErrInvalid", rev, err)
		}
	}
	if s.Head() != 5 {
		t.Fatalf("a refused restore changed the head to %d", s.Head())
	}
	// The compaction point itself is a backup the store can restore.
	if err := s.RestoreTo(3); err != nil || s.Head() != 3 || s.CompactRevision() != 3 {
		t.Fatalf("restore to the compaction point: %v, head %d, compact %d", err, s.Head(), s.CompactRevision())
	}
}

// The same fault over POST /control/faults.
func TestRestoreFaultOverHTTP(t *testing.T) {
	s := start(t)
	c := newClient(t)
	u := s.URL()
	id := s.StoreID()
	for i := range 4 {
		s.Publish("app", map[string]any{"a": i})
	}
	s.Compact(1)
	for _, tc := range []struct {
		body   string
		status int
		code   string
	}{
		{`{"restore_to":-1}`, 400, transport.CodeBadRequest},
		{`{"restore_to":9}`, 400, transport.CodeBadRequest},
		{`{"restore_to":0}`, 410, transport.CodeCompacted},
		{`{"restore_to":2,"reset_store":true}`, 400, transport.CodeBadRequest},
		{`{"restore_to":2,"latency":"slow"}`, 400, transport.CodeBadRequest},
	} {
		resp, body := do(t, c, "POST", u+"/control/faults", tc.body)
		if eb := decode[transport.ErrorBody](t, body); resp.StatusCode != tc.status || eb.Error != tc.code {
			t.Fatalf("%s: %d %s, want %d %s", tc.body, resp.StatusCode, body, tc.status, tc.code)
		}
		if s.Head() != 4 || s.StoreID() != id {
			t.Fatalf("%s changed the store: head %d", tc.body, s.Head())
		}
	}
	resp, body := do(t, c, "POST", u+"/control/faults", `{"restore_to":2}`)
	got := decode[struct {
		StoreID string `json:"store_id"`
	}](t, body)
	if resp.StatusCode != 200 || got.StoreID != id || s.Head() != 2 {
		t.Fatalf("restore over HTTP: %d %s, head %d", resp.StatusCode, body, s.Head())
	}
	if rev, _ := s.Publish("app", map[string]any{"a": "after"}); rev != 3 {
		t.Fatalf("first revision after restore %d, want 3", rev)
	}
}

// A namespace whose every change is at or below the compaction point keeps
// its revision through a restore (compaction dropped its change sets, not
// what they did), and one that only has a schema stays.
func TestStoreRestoreAfterCompaction(t *testing.T) {
	st := newStore(0)
	pub := func(ns string, v int) int64 {
		t.Helper()
		c, err := st.publish(ns, map[string]json.RawMessage{"k": json.RawMessage(strconv.Itoa(v))}, nil)
		if err != nil {
			t.Fatal(err)
		}
		return c.CS.Revision
	}
	pub("x", 1)
	x2 := pub("x", 2)
	y3 := pub("y", 3)
	st.setSchema("s", &checker{check: func(map[string]json.RawMessage) error { return nil }}, true)
	if _, err := st.compactTo(3); err != nil {
		t.Fatal(err)
	}
	pub("y", 4)
	pub("x", 5)
	if _, err := st.restore(3); err != nil {
		t.Fatal(err)
	}
	for ns, want := range map[string]struct {
		rev int64
		k   string
	}{"x": {x2, "2"}, "y": {y3, "3"}, "s": {0, ""}} {
		snap, err := st.Snapshot(ns)
		if err != nil || snap.Rev != want.rev || string(snap.Values["k"]) != want.k {
			t.Fatalf("%s after restore: revision %d values %s, %v; want %d %q", ns, snap.Rev, js(snap.Values), err, want.rev, want.k)
		}
	}
	c, err := st.publish("x", nil, nil)
	if err != nil || c.CS.Revision != 4 || c.CS.PrevRevision != x2 {
		t.Fatalf("publish after restore: %+v, %v", c.CS, err)
	}
}
