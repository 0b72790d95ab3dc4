package fakeserver

import (
	"encoding/json"
	"errors"
	"maps"
	"math/rand"
	"strconv"
	"testing"

	"github.com/holdfast-dev/holdfast/transport"
)

// modelRev is one revision of the model: a namespace's whole content.
type modelRev struct {
	rev     int64
	content map[string]json.RawMessage
}

// TestStoreProperties runs random publishes, deletes, rollbacks,
// compactions and restores (history rewound to a revision) against the
// store and a naive model that keeps every revision's full content, and
// checks after every step that:
//   - the content at every surviving revision equals the model's, and each
//     namespace's revision is that of its last change;
//   - the snapshot at the head equals the replay of every surviving change
//     set onto the content at the compaction point;
//   - the change sets since any surviving cursor, applied to the content at
//     that cursor, give the head, and chain by prev_revision.
func TestStoreProperties(t *testing.T) {
	for _, retention := range []int64{0, 25} {
		t.Run("retention="+strconv.FormatInt(retention, 10), func(t *testing.T) {
			rng := rand.New(rand.NewSource(20261129 + retention))
			st := newStore(retention)
			nss := []string{"a", "b.prod", "c-1"}
			model := map[string][]modelRev{}
			contentAtModel := func(ns string, rev int64) map[string]json.RawMessage {
				out := map[string]json.RawMessage{}
				for _, m := range model[ns] {
					if m.rev <= rev {
						out = m.content
					}
				}
				return out
			}
			for op := 0; op < 400; op++ {
				ns := nss[rng.Intn(len(nss))]
				_, head, compact := st.Info()
				switch r := rng.Intn(10); {
				case r < 6: // publish puts and deletes
					puts := map[string]json.RawMessage{}
					var dels []string
					for range rng.Intn(4) {
						puts["k"+strconv.Itoa(rng.Intn(8))] = json.RawMessage(strconv.Itoa(rng.Intn(1000)))
					}
					for range rng.Intn(3) {
						k := "k" + strconv.Itoa(rng.Intn(8))
						if _, ok := puts[k]; !ok {
							dels = append(dels, k)
						}
					}
					puts, dels, err := checkPublish(ns, puts, dels)
					if err != nil {
						t.Fatal(err)
					}
					c, err := st.publish(ns, puts, dels)
					if err != nil {
						t.Fatal(err)
					}
					prev := contentAtModel(ns, head)
					if c.CS.Revision != head+1 || c.CS.PrevRevision != lastRev(model[ns]) {
						t.Fatalf("publish got revision %d (prev %d), want %d (prev %d)", c.CS.Revision, c.CS.PrevRevision, head+1, lastRev(model[ns]))
					}
					model[ns] = append(model[ns], modelRev{c.CS.Revision, apply(prev, puts, dels)})
				case r < 8: // rollback
					if len(model[ns]) == 0 {
						continue
					}
					to := compact + rng.Int63n(head-compact+1)
					c, err := st.rollback(ns, to, commitMeta{}, nil)
					if err != nil {
						t.Fatalf("rollback to %d (compact %d head %d): %v", to, compact, head, err)
					}
					model[ns] = append(model[ns], modelRev{c.CS.Revision, contentAtModel(ns, to)})
				case r < 9: // compact somewhere in the middle
					if head == 0 {
						continue
					}
					to := compact + rng.Int63n(head-compact+1)
					if _, err := st.compactTo(to); err != nil {
						t.Fatal(err)
					}
				case r < 10 && rng.Intn(3) == 0: // restore from a backup at a revision in the window
					to := compact + rng.Int63n(head-compact+1)
					id := st.id
					if _, err := st.restore(to); err != nil {
						t.Fatalf("restore to %d (compact %d head %d): %v", to, compact, head, err)
					}
					if gotID, gotHead, gotCompact := st.Info(); gotID != id || gotHead != to || gotCompact != compact {
						t.Fatalf("after restore to %d: id %s head %d compact %d, want %s %d %d", to, gotID, gotHead, gotCompact, id, to, compact)
					}
					for ns, revs := range model {
						i := 0
						for i < len(revs) && revs[i].rev <= to {
							i++
						}
						if model[ns] = revs[:i]; i == 0 {
							delete(model, ns) // first published after the backup
							if _, err := st.Snapshot(ns); !errors.Is(err, ErrUnknownNamespace) {
								t.Fatalf("%s, first published after %d, after restore: %v", ns, to, err)
							}
						}
					}
					for ns := range model {
						if _, err := st.Subscribe(ns, to+1, nil); !errors.Is(err, transport.ErrCursorAhead) {
							t.Fatalf("subscribe past the restored head: %v", err)
						}
					}
				default: // a rollback below the compaction point fails
					if compact == 0 || len(model[ns]) == 0 {
						continue
					}
					_, err := st.rollback(ns, compact-1, commitMeta{}, nil)
					var ce *transport.CompactedError
					if !errors.As(err, &ce) || ce.CompactRevision != compact {
						t.Fatalf("rollback below compaction: err = %v, want compacted at %d", err, compact)
					}
				}
				checkStore(t, st, model, contentAtModel, rng)
			}
		})
	}
}

func checkStore(t *testing.T, st *store, model map[string][]modelRev, contentAtModel func(string, int64) map[string]json.RawMessage, rng *rand.Rand) {
	t.Helper()
	_, head, compact := st.Info()
	for ns := range model {
		snap, err := st.Snapshot(ns)
		if err != nil {
			t.Fatal(err)
		}
		if want := contentAtModel(ns, head); !equalContent(snap.Values, want) {
			t.Fatalf("%s head snapshot = %s, want %s", ns, js(snap.Values), js(want))
		}
		if snap.Cursor != head || snap.Rev != lastRev(model[ns]) {
			t.Fatalf("%s snapshot revision %d cursor %d, want revision %d cursor %d", ns, snap.Rev, snap.Cursor, lastRev(model[ns]), head)
		}
		// Every surviving revision matches the model.
		for rev := compact; rev <= head; rev++ {
			got, err := st.snapshotAt(ns, rev)
			if err != nil {
				t.Fatal(err)
			}
			if want := contentAtModel(ns, rev); !equalContent(got, want) {
				t.Fatalf("%s at %d = %s, want %s", ns, rev, js(got), js(want))
			}
		}
		// Replay from the compaction point, and from a random cursor.
		for _, cursor := range []int64{compact, compact + rng.Int63n(head-compact+1)} {
			base, err := st.snapshotAt(ns, cursor)
			if err != nil {
				t.Fatal(err)
			}
			sub, err := st.Subscribe(ns, cursor, nil)
			if err != nil {
				t.Fatal(err)
			}
			prev := int64(-1)
			for _, c := range sub.Backlog {
				if c.CS.Revision <= cursor || (prev >= 0 && c.CS.PrevRevision != prev) {
					t.Fatalf("%s since %d: change %d (prev %d) after %d", ns, cursor, c.CS.Revision, c.CS.PrevRevision, prev)
				}
				prev = c.CS.Revision
				base = apply(base, c.CS.Puts, c.CS.Deletes)
			}
			if !equalContent(base, snap.Values) {
				t.Fatalf("%s: snapshot at %d + changes = %s, want head %s", ns, cursor, js(base), js(snap.Values))
			}
			if len(sub.Backlog) > 0 && sub.Backlog[len(sub.Backlog)-1].CS.Revision != snap.Rev {
				t.Fatalf("%s: last change %d, namespace revision %d", ns, sub.Backlog[len(sub.Backlog)-1].CS.Revision, snap.Rev)
			}
		}
		// A cursor below the compaction point is refused.
		if compact > 0 {
			var ce *transport.CompactedError
			if _, err := st.Subscribe(ns, compact-1, nil); !errors.As(err, &ce) {
				t.Fatalf("subscribe below compaction: %v", err)
			}
		}
	}
}

// lastRev is the revision of a namespace's last change in the model.
func lastRev(revs []modelRev) int64 {
	if len(revs) == 0 {
		return 0
	}
	return revs[len(revs)-1].rev
}

func equalContent(a, b map[string]json.RawMessage) bool {
	return maps.EqualFunc(a, b, func(x, y json.RawMessage) bool { return string(x) == string(y) })
}

func js(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

func TestStoreResetAndRetention(t *testing.T) {
	st := newStore(3)
	id := st.id
	for i := range 10 {
		if _, err := st.publish("ns", map[string]json.RawMessage{"k": json.RawMessage(strconv.Itoa(i))}, nil); err != nil {
			t.Fatal(err)
		}
	}
	if _, head, compact := st.Info(); head != 10 || compact != 7 {
		t.Fatalf("head %d compact %d, want 10 and 7", head, compact)
	}
	if newID, _ := st.reset(); newID == id || newID == "" {
		t.Fatalf("reset kept id %q", newID)
	}
	if _, head, _ := st.Info(); head != 0 {
		t.Fatalf("head after reset = %d", head)
	}
	if _, err := st.Snapshot("ns"); !errors.Is(err, ErrUnknownNamespace) {
		t.Fatalf("snapshot after reset: %v", err)
	}
}
