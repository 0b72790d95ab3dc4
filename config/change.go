package config

import (
	"cmp"
	"encoding/json"
	"slices"

	"github.com/holdfast-dev/holdfast/internal/snapshot"
)

// Change is one key's change, as OnChange delivers it. Old is the zero Value
// (Kind() == KindInvalid) when the key was added, New when it was deleted.
type Change struct {
	Namespace string
	Key       string
	Old, New  Value
	// Revision is the revision that made the change.
	Revision int64
}

// ChangeSet is every key's change of one update, as OnAnyChange delivers
// it. When the callback queue overflowed, several updates are coalesced into
// one ChangeSet (Coalesced is true): each key keeps its newest value, and
// Changes stay in revision order.
type ChangeSet struct {
	Namespace string
	// Revision is the revision after the update; PrevRevision the one before.
	Revision, PrevRevision int64
	// Changes are sorted by revision, then key.
	Changes   []Change
	Coalesced bool
}

// diff lists what changed from old to new: every key whose value differs,
// sorted by key. old may be nil.
func diff(namespace string, old, new *snapshot.Snapshot) []Change {
	var changes []Change
	rev := new.Revision()
	new.Range(func(k string, v snapshot.Value) bool {
		var prev snapshot.Value
		if old != nil {
			prev, _ = old.Get(k)
		}
		if !prev.Equal(v) {
			changes = append(changes, Change{Namespace: namespace, Key: k, Old: Value{prev}, New: Value{v}, Revision: rev})
		}
		return true
	})
	if old != nil {
		old.Range(func(k string, v snapshot.Value) bool {
			if _, ok := new.Get(k); !ok {
				changes = append(changes, Change{Namespace: namespace, Key: k, Old: Value{v}, Revision: rev})
			}
			return true
		})
	}
	slices.SortFunc(changes, func(a, b Change) int { return cmp.Compare(a.Key, b.Key) })
	return changes
}

// changedKeys lists what changed from old to new for the keys of one change
// set: O(keys in the change), not O(namespace).
func changedKeys(namespace string, old, new *snapshot.Snapshot, puts map[string]json.RawMessage, deletes []string) []Change {
	changes := make([]Change, 0, len(puts)+len(deletes))
	rev := new.Revision()
	add := func(k string) {
		prev, _ := old.Get(k)
		next, _ := new.Get(k)
		if !prev.Equal(next) {
			changes = append(changes, Change{Namespace: namespace, Key: k, Old: Value{prev}, New: Value{next}, Revision: rev})
		}
	}
	for k := range puts {
		add(k)
	}
	for _, k := range deletes {
		if _, put := puts[k]; !put {
			add(k)
		}
	}
	slices.SortFunc(changes, func(a, b Change) int { return cmp.Compare(a.Key, b.Key) })
	// A key deleted twice in one change set appears twice: keep one.
	return slices.CompactFunc(changes, func(a, b Change) bool { return a.Key == b.Key })
}

// coalesce folds change sets into one: each key keeps its first Old and its
// last New; keys that end where they started drop out.
func coalesce(sets []ChangeSet) ChangeSet {
	first, last := sets[0], sets[len(sets)-1]
	byKey := make(map[string]Change)
	for _, cs := range sets {
		for _, ch := range cs.Changes {
			if prev, ok := byKey[ch.Key]; ok {
				prev.New, prev.Revision = ch.New, ch.Revision
				byKey[ch.Key] = prev
			} else {
				byKey[ch.Key] = ch
			}
		}
	}
	out := ChangeSet{Namespace: first.Namespace, Revision: last.Revision, PrevRevision: first.PrevRevision, Coalesced: true}
	for _, ch := range byKey {
		if !ch.Old.Equal(ch.New) {
			out.Changes = append(out.Changes, ch)
		}
	}
	slices.SortFunc(out.Changes, func(a, b Change) int {
		if c := cmp.Compare(a.Revision, b.Revision); c != 0 {
			return c
		}
		return cmp.Compare(a.Key, b.Key)
	})
	return out
}
