package cache

import (
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"sync/atomic"
	"time"
)

// Snapshot is one namespace's content at one revision. It is immutable once
// built: readers share it without locks, and a change makes a new Snapshot.
type Snapshot struct {
	namespace string
	storeID   string
	revision  int64
	// committedAt is when the server committed this revision (zero when
	// unknown, as for a full snapshot).
	committedAt time.Time
	values      map[string]Value
}

// Build decodes raw values into a new Snapshot. Every value is decoded here,
// once. A value that is not valid JSON fails the whole build.
func Build(namespace, storeID string, revision int64, raw map[string]json.RawMessage) (*Snapshot, error) {
	values := make(map[string]Value, len(raw))
	data := make([]valueData, len(raw)) // one allocation for every value
	i := 0
	for k, r := range raw {
		if err := data[i].decode(r); err != nil {
			return nil, fmt.Errorf("cache: key %q: %w", k, err)
		}
		values[k] = Value{&data[i]}
		i++
	}
	return &Snapshot{namespace: namespace, storeID: storeID, revision: revision, values: values}, nil
}

// FromValues makes a Snapshot of already decoded values. The map is owned by
// the Snapshot afterwards.
func FromValues(namespace, storeID string, revision int64, values map[string]Value) *Snapshot {
	if values == nil {
		values = map[string]Value{}
	}
	return &Snapshot{namespace: namespace, storeID: storeID, revision: revision, values: values}
}

// Apply returns a new Snapshot: s with puts and deletes applied, at revision.
// s is unchanged. Every put is decoded before anything is built, so a bad
// value fails the whole change.
func (s *Snapshot) Apply(revision int64, committedAt time.Time, puts map[string]json.RawMessage, deletes []string) (*Snapshot, error) {
	decoded := make(map[string]Value, len(puts))
	data := make([]valueData, len(puts)) // one allocation for every value, as in Build
	i := 0
	for k, r := range puts {
		if err := data[i].decode(r); err != nil {
			return nil, fmt.Errorf("cache: key %q: %w", k, err)
		}
		decoded[k] = Value{&data[i]}
		i++
	}
	values := maps.Clone(s.values)
	if values == nil {
		values = make(map[string]Value, len(decoded))
	}
	for _, k := range deletes {
		delete(values, k)
	}
	maps.Copy(values, decoded)
	return &Snapshot{namespace: s.namespace, storeID: s.storeID, revision: revision, committedAt: committedAt, values: values}, nil
}

// Namespace is the namespace's name.
func (s *Snapshot) Namespace() string { return s.namespace }

// StoreID is the id of the store history this snapshot came from.
func (s *Snapshot) StoreID() string { return s.storeID }

// Revision is the revision of the namespace's last change in this snapshot.
func (s *Snapshot) Revision() int64 { return s.revision }

// CommittedAt is when the server committed the change that made this
// snapshot, or the zero time when unknown.
func (s *Snapshot) CommittedAt() time.Time { return s.committedAt }

// Get returns the value of key. It does not allocate.
func (s *Snapshot) Get(key string) (Value, bool) {
	v, ok := s.values[key]
	return v, ok
}

// Len is the number of keys.
func (s *Snapshot) Len() int { return len(s.values) }

// Keys returns the keys in sorted order, in a new slice.
func (s *Snapshot) Keys() []string {
	return slices.Sorted(maps.Keys(s.values))
}

// Range calls fn for each key and value, in no particular order, until fn
// returns false.
func (s *Snapshot) Range(fn func(key string, v Value) bool) {
	for k, v := range s.values {
		if !fn(k, v) {
			return
		}
	}
}

// RawValues returns a new map of every key to its JSON text.
func (s *Snapshot) RawValues() map[string]json.RawMessage {
	out := make(map[string]json.RawMessage, len(s.values))
	for k, v := range s.values {
		out[k] = v.Raw()
	}
	return out
}

// Holder holds the current Snapshot of a namespace. Load is one atomic load;
// Store is one atomic store. The zero Holder holds nil.
type Holder struct {
	p atomic.Pointer[Snapshot]
}

// Load returns the current snapshot, or nil.
func (h *Holder) Load() *Snapshot { return h.p.Load() }

// Store makes s current.
func (h *Holder) Store(s *Snapshot) { h.p.Store(s) }
