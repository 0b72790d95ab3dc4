package syncer

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/holdfast-dev/holdfast/internal/rollout"
	"github.com/holdfast-dev/holdfast/internal/snapshot"
	"github.com/holdfast-dev/holdfast/schema"
	"github.com/holdfast-dev/holdfast/transport"
)

// events is a Sink that logs every report in order, in one line each.
type events struct {
	log     []string
	applied []Update
	errs    []error // of Rejected and WouldReject, in order
}

func (e *events) Applied(u Update) {
	e.applied = append(e.applied, u)
	e.log = append(e.log, fmt.Sprintf("applied %d", u.Snapshot.Revision()))
}
func (e *events) Confirmed(Position) {}
func (e *events) Failed(err error)   { e.log = append(e.log, "failed") }
func (e *events) Rejected(rev int64, err error) {
	e.errs = append(e.errs, err)
	e.log = append(e.log, fmt.Sprintf("rejected %d", rev))
}
func (e *events) WouldReject(rev int64, id string, err error) {
	e.errs = append(e.errs, err)
	e.log = append(e.log, fmt.Sprintf("would reject %d %s", rev, id))
}

const strictSchema = `{"type":"object","additionalProperties":{"type":"string","not":{"pattern":"new-field"}}}`

// rolloutSyncer is a Syncer of namespace "app" for client, seeded with
// {"a":"1"} at revision 1 of store "s"; schemaJSON may be empty.
func rolloutSyncer(t *testing.T, client, schemaJSON string) (*Syncer, *events) {
	t.Helper()
	var checks *schema.Schema
	if schemaJSON != "" {
		var err error
		if checks, err = schema.Compile([]byte(schemaJSON)); err != nil {
			t.Fatal(err)
		}
	}
	sink := &events{}
	s := New(Config{Namespace: "app", Sink: sink, Schema: checks, ClientID: client})
	seed, err := snapshot.Build("app", "s", 1, map[string]json.RawMessage{"a": json.RawMessage(`"1"`)})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Seed(seed, 1); err != nil {
		t.Fatal(err)
	}
	return s, sink
}

func staged(t *testing.T, s *rollout.Staged) json.RawMessage {
	t.Helper()
	raw, err := rollout.Encode(s)
	if err != nil {
		t.Fatal(err)
	}
	return raw
}

// change is the change set of revision rev on rev-1.
func change(rev int64, puts map[string]json.RawMessage, deletes ...string) transport.Event {
	return transport.Event{Change: &transport.ChangeSet{Namespace: "app", StoreID: "s", Revision: rev, PrevRevision: rev - 1,
		CommittedAt: time.Now(), Puts: puts, Deletes: deletes}}
}

func str(t *testing.T, snap *snapshot.Snapshot, key string) string {
	t.Helper()
	v, ok := snap.Get(key)
	if !ok {
		return "<none>"
	}
	return v.String()
}

// TestRolloutServedViewOnTheWireFloor: a member serves the staged change
// (without the key), the wire keeps it and changes chain on the wire; a
// change set is handed on only while the view is the wire.
func TestRolloutServedViewOnTheWireFloor(t *testing.T) {
	s, sink := rolloutSyncer(t, "c1", "")
	r := staged(t, &rollout.Staged{ID: "r1", Stage: 10, Cut: math.MaxUint64, Puts: map[string]json.RawMessage{"a": json.RawMessage(`"2"`)}})
	for _, ev := range []transport.Event{
		change(2, map[string]json.RawMessage{rollout.Key: r}),
		change(3, nil, rollout.Key), // the revert: chains on the wire's revision 2
		change(4, map[string]json.RawMessage{"b": json.RawMessage(`"x"`)}),
	} {
		if err := s.Handle(ev); err != nil {
			t.Fatal(err)
		}
	}
	if got := strings.Join(sink.log, ", "); got != "applied 2, applied 3, applied 4" {
		t.Fatalf("reports: %s", got)
	}
	u2, u3, u4 := sink.applied[0], sink.applied[1], sink.applied[2]
	if str(t, u2.Snapshot, "a") != "2" || str(t, u2.Snapshot, rollout.Key) != "<none>" || u2.Snapshot.Len() != 1 {
		t.Errorf("member serves %v, a=%s", u2.Snapshot.Keys(), str(t, u2.Snapshot, "a"))
	}
	if _, ok := u2.Wire.Get(rollout.Key); !ok || str(t, u2.Wire, "a") != "1" {
		t.Errorf("wire of 2: %v", u2.Wire.Keys())
	}
	if u2.Change != nil || u2.Rollout != (Rollout{ID: "r1", Stage: 10, Member: true}) || u2.Prev.Revision() != 1 {
		t.Errorf("update 2: change %v, rollout %+v", u2.Change, u2.Rollout)
	}
	if str(t, u3.Snapshot, "a") != "1" || u3.Snapshot != u3.Wire || u3.Change != nil || u3.Rollout != (Rollout{}) || u3.Prev != u2.Snapshot {
		t.Errorf("update 3 (the revert): a=%s, change %v, rollout %+v", str(t, u3.Snapshot, "a"), u3.Change, u3.Rollout)
	}
	if u4.Change == nil || u4.Snapshot != u4.Wire {
		t.Errorf("update 4, no rollout either side: change %v", u4.Change)
	}
}

// TestRolloutNotEvaluatedWithoutClientID: a relay's syncer serves the
// content as it came, the key and all, and hands the change set on.
func TestRolloutNotEvaluatedWithoutClientID(t *testing.T) {
	s, sink := rolloutSyncer(t, "", "")
	r := staged(t, &rollout.Staged{ID: "r1", Stage: 10, Cut: math.MaxUint64, Puts: map[string]json.RawMessage{"a": json.RawMessage(`"2"`)}})
	if err := s.Handle(change(2, map[string]json.RawMessage{rollout.Key: r})); err != nil {
		t.Fatal(err)
	}
	u := sink.applied[0]
	if u.Snapshot != u.Wire || u.Change == nil || u.Rollout != (Rollout{}) || str(t, u.Snapshot, "a") != "1" {
		t.Fatalf("relay's update: change %v, rollout %+v, a=%s", u.Change, u.Rollout, str(t, u.Snapshot, "a"))
	}
	if _, ok := u.Snapshot.Get(rollout.Key); !ok {
		t.Fatal("the relay's data lost the rollout key")
	}
	// Even a malformed value is the upstream's to judge, not the relay's.
	if err := s.Handle(change(3, map[string]json.RawMessage{rollout.Key: json.RawMessage(`{"id":"r"}`)})); err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(sink.log, ", "); got != "applied 2, applied 3" {
		t.Fatalf("reports: %s", got)
	}
}

// TestRolloutMalformedRejects: a rollout value that does not decode
// rejects its revision; the last good stays the floor, so the next change
// is a gap.
func TestRolloutMalformedRejects(t *testing.T) {
	s, sink := rolloutSyncer(t, "c1", "")
	if err := s.Handle(change(2, map[string]json.RawMessage{rollout.Key: json.RawMessage(`{"id":"r"}`)})); err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(sink.log, ", "); got != "rejected 2" || !errors.Is(sink.errs[0], rollout.ErrMalformed) {
		t.Fatalf("reports: %s (%v)", got, sink.errs)
	}
	if served, _ := s.Served(); served.Revision() != 1 {
		t.Fatalf("serving %d after the rejection", served.Revision())
	}
	if err := s.Handle(change(3, map[string]json.RawMessage{"b": json.RawMessage(`"x"`)})); !errors.Is(err, ErrGap) {
		t.Fatalf("a change on the rejected revision: %v, want a gap", err)
	}
}

// TestRolloutChecks: the checks run on what the client serves; a member
// that rejects the staged change rejects the revision with a StagedError;
// with prevalidation, a non-member applies the base and reports a
// would-reject after it, and a member (checked once) reports the
// would-reject after its rejection: every client whose checks fail a
// prevalidated change says so, in the stage or not.
func TestRolloutChecks(t *testing.T) {
	bad := map[string]json.RawMessage{"a": json.RawMessage(`"new-field"`)}
	for _, tc := range []struct {
		name        string
		cut         uint64
		prevalidate bool
		want        string
	}{
		{"member", math.MaxUint64, false, "rejected 2"},
		{"member prevalidating", math.MaxUint64, true, "rejected 2, would reject 2 r1"},
		{"not a member", 0, false, "applied 2"},
		{"not a member prevalidating", 0, true, "applied 2, would reject 2 r1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			client := "c1"
			if tc.cut == 0 && rollout.Hash("r1", client) == 0 {
				t.Fatal("the client's hash is 0: pick another id")
			}
			s, sink := rolloutSyncer(t, client, strictSchema)
			r := staged(t, &rollout.Staged{ID: "r1", Stage: 10, Cut: tc.cut, Puts: bad, Prevalidate: tc.prevalidate})
			if err := s.Handle(change(2, map[string]json.RawMessage{rollout.Key: r})); err != nil {
				t.Fatal(err)
			}
			if got := strings.Join(sink.log, ", "); got != tc.want {
				t.Fatalf("reports: %s, want %s", got, tc.want)
			}
			var se *StagedError
			switch {
			case tc.cut != 0 && (!errors.As(sink.errs[0], &se) || se.Rollout != "r1" || se.Stage != 10 || se.Err == nil):
				t.Errorf("member's rejection: %v", sink.errs[0])
			case tc.cut == 0 && len(sink.applied) == 1 && str(t, sink.applied[0].Snapshot, "a") != "1":
				t.Errorf("non-member serves a=%s", str(t, sink.applied[0].Snapshot, "a"))
			case tc.cut == 0 && tc.prevalidate && errors.As(sink.errs[0], &se):
				t.Errorf("a would-reject is no StagedError: %v", sink.errs[0])
			}
		})
	}
}

// TestRolloutSeedEvaluatesAfresh: a seed (a last-good file) holding a
// staged change serves what this client's membership says; a malformed
// one fails the seed but stays the floor.
func TestRolloutSeedEvaluatesAfresh(t *testing.T) {
	const id = "r1"
	in, out := "c1", "c2"
	if rollout.Hash(id, in) > rollout.Hash(id, out) {
		in, out = out, in
	}
	r := staged(t, &rollout.Staged{ID: id, Stage: 50, Cut: rollout.Hash(id, in), Puts: map[string]json.RawMessage{"a": json.RawMessage(`"2"`)}})
	wire, err := snapshot.Build("app", "s", 5, map[string]json.RawMessage{"a": json.RawMessage(`"1"`), rollout.Key: r})
	if err != nil {
		t.Fatal(err)
	}
	for client, want := range map[string]string{in: "2", out: "1"} {
		s := New(Config{Namespace: "app", Sink: &events{}, ClientID: client})
		if err := s.Seed(wire, 5); err != nil {
			t.Fatal(err)
		}
		served, ro := s.Served()
		if str(t, served, "a") != want || ro.ID != id || ro.Member != (client == in) || served.Revision() != 5 {
			t.Errorf("client %s serves a=%s, rollout %+v; want a=%s", client, str(t, served, "a"), ro, want)
		}
	}
	bad, err := snapshot.Build("app", "s", 6, map[string]json.RawMessage{rollout.Key: json.RawMessage(`[]`)})
	if err != nil {
		t.Fatal(err)
	}
	s := New(Config{Namespace: "app", Sink: &events{}, ClientID: in})
	if err := s.Seed(bad, 6); !errors.Is(err, rollout.ErrMalformed) {
		t.Fatalf("malformed seed: %v", err)
	}
	if st, rev := s.floor(); st != "s" || rev != 6 {
		t.Fatalf("floor after a malformed seed: %s %d", st, rev)
	}
}

// snapOnly serves one snapshot and watches until the context ends.
type snapOnly struct{ snap *transport.Snapshot }

func (s snapOnly) Snapshot(context.Context, transport.SnapshotRequest) (*transport.Snapshot, error) {
	c := *s.snap
	return &c, nil
}

func (snapOnly) Watch(ctx context.Context, _ transport.WatchRequest, _ func(transport.Event) error) error {
	<-ctx.Done()
	return ctx.Err()
}

// TestRolloutResnapshotServesTheView: a snapshot carrying a rollout is
// served as the client's view, as a change is.
func TestRolloutResnapshotServesTheView(t *testing.T) {
	r := staged(t, &rollout.Staged{ID: "r1", Stage: 100, Cut: math.MaxUint64, Puts: map[string]json.RawMessage{"a": json.RawMessage(`"2"`)}})
	values, err := json.Marshal(map[string]json.RawMessage{"a": json.RawMessage(`"1"`), rollout.Key: r})
	if err != nil {
		t.Fatal(err)
	}
	rec := newRecorder()
	s := New(Config{Namespace: "app", ClientID: "c1", Sink: rec, FetchTimeout: time.Second, Backstop: time.Hour,
		Source: snapOnly{&transport.Snapshot{Namespace: "app", StoreID: "s", Revision: 3, Cursor: 3, Values: values}}})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); s.Run(ctx) }()
	defer func() { cancel(); <-done }()
	select {
	case <-rec.notify:
	case <-time.After(10 * time.Second):
		t.Fatal("nothing applied")
	}
	rec.mu.Lock()
	defer rec.mu.Unlock()
	u := rec.applied[0]
	if str(t, u.Snapshot, "a") != "2" || u.Snapshot.Len() != 1 || u.Wire.Len() != 2 || !u.Rollout.Member || u.Change != nil {
		t.Fatalf("snapshot's update: serves %v (a=%s), wire %v, rollout %+v", u.Snapshot.Keys(), str(t, u.Snapshot, "a"), u.Wire.Keys(), u.Rollout)
	}
}

// BenchmarkHandleOneKey applies a one-key change set to a 1,000-key
// namespace without a rollout: as a relay (no ClientID, nothing
// evaluated) and as a client (rollout.Serve finds no key). The two must
// cost alike: the client pays one lookup.
func BenchmarkHandleOneKey(b *testing.B) {
	raw := make(map[string]json.RawMessage, 1000)
	names := make([]string, 1000)
	for i := range names {
		names[i] = fmt.Sprintf("service/key-%d", i)
		raw[names[i]] = json.RawMessage(fmt.Sprint(i))
	}
	seed, err := snapshot.Build("app", "s", 1, raw)
	if err != nil {
		b.Fatal(err)
	}
	for _, client := range []string{"", "client-1"} {
		name := map[string]string{"": "relay", "client-1": "client"}[client]
		b.Run(name, func(b *testing.B) {
			s := New(Config{Namespace: "app", Sink: discard{}, ClientID: client})
			if err := s.Seed(seed, 1); err != nil {
				b.Fatal(err)
			}
			puts := map[string]json.RawMessage{"": nil}
			b.ReportAllocs()
			rev := int64(1)
			for b.Loop() {
				rev++
				clear(puts)
				puts[names[int(rev)%len(names)]] = json.RawMessage(`1`)
				if err := s.Handle(change(rev, puts)); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkAdmitNoRollout is what a client adds to each revision without
// a rollout, beside a relay: looking for the rollout key.
func BenchmarkAdmitNoRollout(b *testing.B) {
	raw := make(map[string]json.RawMessage, 1000)
	for i := range 1000 {
		raw[fmt.Sprintf("service/key-%d", i)] = json.RawMessage(fmt.Sprint(i))
	}
	wire, err := snapshot.Build("app", "s", 1, raw)
	if err != nil {
		b.Fatal(err)
	}
	for _, client := range []string{"", "client-1"} {
		name := map[string]string{"": "relay", "client-1": "client"}[client]
		b.Run(name, func(b *testing.B) {
			s := New(Config{Namespace: "app", Sink: discard{}, ClientID: client})
			b.ReportAllocs()
			for b.Loop() {
				if v, _, err := s.admit(wire, true); err != nil || v.Served != wire {
					b.Fatal(err)
				}
			}
		})
	}
}

type discard struct{}

func (discard) Applied(Update)                   {}
func (discard) Confirmed(Position)               {}
func (discard) Failed(error)                     {}
func (discard) Rejected(int64, error)            {}
func (discard) WouldReject(int64, string, error) {}
