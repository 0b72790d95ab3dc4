package syncer

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/holdfast-dev/holdfast/telemetry"
	"github.com/holdfast-dev/holdfast/transport"
)

// positions is a Sink that keeps the Position of every Applied and
// Confirmed, in order.
type positions struct{ got []Position }

func (p *positions) Applied(u Update)       { p.got = append(p.got, u.Position) }
func (p *positions) Confirmed(pos Position) { p.got = append(p.got, pos) }
func (p *positions) Failed(error)           {}
func (p *positions) Rejected(int64, error)  {}

func (p *positions) WouldReject(int64, string, error) {}

// snapshotSource answers every snapshot with the next of its scripted
// answers (the last one again when they run out).
type snapshotSource struct {
	answers []*transport.Snapshot
	n       int
}

func (s *snapshotSource) Snapshot(_ context.Context, req transport.SnapshotRequest) (*transport.Snapshot, error) {
	a := *s.answers[min(s.n, len(s.answers)-1)]
	s.n++
	if req.KnownStoreID == a.StoreID && req.KnownRevision == a.Revision {
		a.Values = nil
		return &a, transport.ErrNotModified
	}
	return &a, nil
}

func (s *snapshotSource) Watch(ctx context.Context, _ transport.WatchRequest, _ func(transport.Event) error) error {
	<-ctx.Done()
	return ctx.Err()
}

// Every report carries the age its server gave it, and the unconfirmed
// flag of the last snapshot, 304 or progress: a change has no age of its
// own and keeps the flag; a report without the flag clears it.
func TestPositionCarriesTheAgeOfRelayedData(t *testing.T) {
	src := &snapshotSource{answers: []*transport.Snapshot{
		{Namespace: "ns", StoreID: "s1", Revision: 1, Cursor: 1, Values: []byte(`{"k":1}`), AgeMillis: 4000, Unconfirmed: true},
		{Namespace: "ns", StoreID: "s1", Revision: 2, Cursor: 5, AgeMillis: 250}, // a 304 once revision 2 is held
	}}
	sink := &positions{}
	s := New(Config{Namespace: "ns", Source: src, Sink: sink, FetchTimeout: time.Second})
	ctx := context.Background()
	if err := s.resnapshot(ctx, telemetry.ResnapshotInitial); err != nil {
		t.Fatal(err)
	}
	events := []transport.Event{
		{Change: &transport.ChangeSet{Namespace: "ns", StoreID: "s1", Revision: 2, PrevRevision: 1, Puts: map[string]json.RawMessage{"k": json.RawMessage("2")}}},
		{Change: &transport.ChangeSet{Namespace: "ns", StoreID: "s1", Revision: 2, PrevRevision: 1}}, // a duplicate
		{Progress: &transport.Progress{Namespace: "ns", StoreID: "s1", Revision: 2, Cursor: 3, AgeMillis: 9000, Unconfirmed: true}},
		{Progress: &transport.Progress{Namespace: "ns", StoreID: "s1", Revision: 2, Cursor: 4, AgeMillis: -5}},
		{Progress: &transport.Progress{Namespace: "ns", StoreID: "s1", Revision: 2, Cursor: 4, AgeMillis: 1 << 62, Unconfirmed: true}},
	}
	for _, ev := range events {
		if err := s.Handle(ev); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.resnapshot(ctx, telemetry.ResnapshotBackstop); err != nil { // the 304
		t.Fatal(err)
	}
	want := []Position{
		{Cursor: 1, Head: 1, Age: 4 * time.Second, Unconfirmed: true}, // the first snapshot
		{Cursor: 2, Head: 2, Unconfirmed: true},                       // the change: no age, the flag kept
		{Cursor: 2, Head: 2, Unconfirmed: true},                       // the duplicate
		{Cursor: 3, Head: 2, Age: 9 * time.Second, Unconfirmed: true},
		{Cursor: 4, Head: 2},                                           // a negative age is none; no flag clears it
		{Cursor: 4, Head: 2, Age: transport.MaxAge, Unconfirmed: true}, // absurd: very old
		{Cursor: 5, Head: 2, Age: 250 * time.Millisecond},              // the 304's, flag cleared
	}
	if len(sink.got) != len(want) {
		t.Fatalf("%d reports %+v; want %d", len(sink.got), sink.got, len(want))
	}
	for i := range want {
		if sink.got[i] != want[i] {
			t.Errorf("report %d: %+v; want %+v", i, sink.got[i], want[i])
		}
	}
}
