package relay_test

import (
	"context"
	"encoding/json"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/holdfast-dev/holdfast/config"
	"github.com/holdfast-dev/holdfast/internal/testutil"
	"github.com/holdfast-dev/holdfast/transport"
)

// liar is an upstream that lies: after its snapshot (revision 5) its
// watch sends a good change (6), then a change of revision 4 (backwards),
// then a change of an unknown store, then it answers every new watch
// with a snapshot-less gap it cannot fill (the same store, revision 6).
type liar struct {
	mu      sync.Mutex
	watches int
}

func (l *liar) Snapshot(_ context.Context, req transport.SnapshotRequest) (*transport.Snapshot, error) {
	snap := &transport.Snapshot{Namespace: req.Namespace, StoreID: "s1", Revision: 6, Cursor: 6, Values: json.RawMessage(`{"k":"6"}`)}
	if req.KnownStoreID == "s1" && req.KnownRevision == 6 {
		return &transport.Snapshot{Namespace: req.Namespace, StoreID: "s1", Revision: 6, Cursor: 6}, transport.ErrNotModified
	}
	l.mu.Lock()
	first := l.watches == 0
	l.mu.Unlock()
	if first {
		snap = &transport.Snapshot{Namespace: req.Namespace, StoreID: "s1", Revision: 5, Cursor: 5, Values: json.RawMessage(`{"k":"5"}`)}
	}
	return snap, nil
}

func (l *liar) Watch(ctx context.Context, req transport.WatchRequest, handle func(transport.Event) error) error {
	l.mu.Lock()
	l.watches++
	n := l.watches
	l.mu.Unlock()
	if n == 1 {
		at := time.Now()
		for _, cs := range []transport.ChangeSet{
			{Namespace: req.Namespace, StoreID: "s1", Revision: 6, PrevRevision: 5, CommittedAt: at, Puts: map[string]json.RawMessage{"k": json.RawMessage(`"6"`)}},
			{Namespace: req.Namespace, StoreID: "s1", Revision: 4, PrevRevision: 3, CommittedAt: at, Puts: map[string]json.RawMessage{"k": json.RawMessage(`"4"`)}},
			{Namespace: req.Namespace, StoreID: "evil", Revision: 7, PrevRevision: 6, CommittedAt: at, Puts: map[string]json.RawMessage{"k": json.RawMessage(`"evil"`)}},
		} {
			if err := handle(transport.Event{Change: &cs}); err != nil {
				return err
			}
		}
	}
	<-ctx.Done()
	return ctx.Err()
}

// TestRelayUpstreamThatLies: revisions backwards and an unknown store id
// mid-stream get what the SDK does with them: the last good keeps
// serving, and downstream sees no backwards or foreign data.
func TestRelayUpstreamThatLies(t *testing.T) {
	up := &liar{}
	_, url := startRelay(t, "", withSource(up))
	c := newClient(t, url)
	ns := openNamespace(t, c, "app")
	var mu sync.Mutex
	var seen []string
	ns.OnChange("k", func(ch config.Change) {
		mu.Lock()
		seen = append(seen, ch.New.String())
		mu.Unlock()
	})
	testutil.Eventually(t, waitLimit, func() bool { return ns.Status().Revision == 6 }, "revision 6 through the relay")
	// The lies were refused once the relay watches again (the foreign
	// store id ended its first watch).
	testutil.Eventually(t, waitLimit, func() bool { up.mu.Lock(); defer up.mu.Unlock(); return up.watches >= 2 }, "a second watch")
	status, _, snap := getSnapshot(t, url, "app")
	if status != http.StatusOK || snap.StoreID != "s1" || snap.Revision != 6 || string(snap.Values) != `{"k":"6"}` {
		t.Fatalf("the relay serves %d %+v", status, snap)
	}
	if got := valueOf(ns, "k"); got != "6" {
		t.Fatalf("k = %s", got)
	}
	mu.Lock()
	defer mu.Unlock()
	for _, v := range seen {
		if v == "4" || v == "evil" {
			t.Fatalf("a client saw %s (changes seen %v)", v, seen)
		}
	}
}

// future is an upstream from a later protocol: its change sets carry a
// field this version does not know.
type future struct{}

func (future) Snapshot(_ context.Context, req transport.SnapshotRequest) (*transport.Snapshot, error) {
	return &transport.Snapshot{Namespace: req.Namespace, StoreID: "s1", Revision: 1, Cursor: 1, Values: json.RawMessage(`{"k":1}`)}, nil
}

func (future) Watch(ctx context.Context, req transport.WatchRequest, handle func(transport.Event) error) error {
	raw := `{"ns":"` + req.Namespace + `","revision":2,"prev_revision":1,"store_id":"s1","committed_at":"2026-01-01T00:00:00Z","puts":{"k":2},"rollout":{"id":"r1","stage":10}}`
	var cs transport.ChangeSet
	if err := json.Unmarshal([]byte(raw), &cs); err != nil {
		return err
	}
	cs.Raw = json.RawMessage(raw)
	if err := handle(transport.Event{Change: &cs}); err != nil {
		return err
	}
	<-ctx.Done()
	return ctx.Err()
}

// TestRelayPassesUnknownFieldsThrough: what the relay does not understand
// in a change set reaches its clients unchanged.
func TestRelayPassesUnknownFieldsThrough(t *testing.T) {
	_, url := startRelay(t, "", withSource(future{}))
	if status, _, _ := getSnapshot(t, url, "app"); status != http.StatusOK {
		t.Fatalf("snapshot: %d", status)
	}
	testutil.Eventually(t, waitLimit, func() bool {
		resp, err := http.Get(url + transport.PathEvents + "?ns=app&since=1&wait=0s")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var body struct {
			Changes []json.RawMessage `json:"changes"`
		}
		if err := json.NewDecoder(resp.Body).Decode(&body); err != nil || len(body.Changes) == 0 {
			return false
		}
		var got map[string]json.RawMessage
		_ = json.Unmarshal(body.Changes[0], &got)
		if string(got["rollout"]) != `{"id":"r1","stage":10}` {
			t.Fatalf("the change as relayed: %s", body.Changes[0])
		}
		return true
	}, "the change in the relay's window")
}

// reportSink is the future upstream's ack side: it records what the
// relay forwards.
type reportSink struct {
	future
	mu   sync.Mutex
	acks []transport.Ack
}

func (r *reportSink) Ack(_ context.Context, a transport.Ack) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.acks = append(r.acks, a)
	return nil
}

func (r *reportSink) AckRelayed(_ context.Context, _ string, acks []transport.Ack) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.acks = append(r.acks, acks...)
	return nil
}

// TestRelayForwardsReportsItDoesNotKnow: a client's report of a later
// protocol (a status and a field this version does not know) reaches the
// upstream as it was sent, beside the ordinary acks.
func TestRelayForwardsReportsItDoesNotKnow(t *testing.T) {
	up := &reportSink{}
	_, url := startRelay(t, "", withSource(up))
	if status, _, _ := getSnapshot(t, url, "app"); status != http.StatusOK {
		t.Fatalf("snapshot: %d", status)
	}
	body := `{"client_id":"c1","acks":[{"ns":"app","revision":1,"status":"ack"},{"ns":"app","revision":2,"status":"would_nack","error":"strict","rollout":"r1","canary":{"ring":2}}]}`
	resp, err := http.Post(url+transport.PathAck, "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNoContent {
		t.Fatalf("ack: %d", resp.StatusCode)
	}
	testutil.Eventually(t, waitLimit, func() bool { up.mu.Lock(); defer up.mu.Unlock(); return len(up.acks) == 2 }, "both reports upstream")
	up.mu.Lock()
	defer up.mu.Unlock()
	slices.SortFunc(up.acks, func(a, b transport.Ack) int { return strings.Compare(a.Status, b.Status) })
	if a := up.acks[0]; a.ClientID != "c1" || a.Status != "ack" || a.Revision != 1 || a.Extra != "" {
		t.Errorf("the ack forwarded as %+v", a)
	}
	w := up.acks[1]
	if w.ClientID != "c1" || w.Status != "would_nack" || w.Error != "strict" || w.Rollout != "r1" || w.Extra != `"canary":{"ring":2}` {
		t.Errorf("the report forwarded as %+v", w)
	}
	if data, _ := json.Marshal(w); string(data) != `{"client_id":"c1","ns":"app","revision":2,"status":"would_nack","error":"strict","rollout":"r1","canary":{"ring":2}}` {
		t.Errorf("encoded upstream as %s", data)
	}
}
