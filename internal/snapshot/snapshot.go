package snapshot

import (
	"bytes"
	"encoding/json"
	"fmt"
	"hash/maphash"
	"iter"
	"slices"
	"sync/atomic"
	"time"
	"unsafe"
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
	index
}

// BuildJSON decodes values, one JSON object of key to value (the form of
// transport.Snapshot.Values), into a new Snapshot. It walks the object
// three times and allocates nothing per key: to check it and count its
// members, to count the keys of each bucket of the index, and to decode
// each value where its bucket is. Keys and JSON texts are substrings of
// one copy of values, which the caller may reuse. Empty values are an
// empty namespace. Text that is not one JSON object, or an object with a
// key twice (the wire never has one; which would win is not defined),
// fails the build.
//
// What it retains is bounded by the size of values: the text, 44 to 48
// bytes a key, and for the strings with escapes or bytes that are not
// UTF-8, their content and their text again. The snapshots
// that Apply makes from it share the text while their entries take at
// least half of it, and then copy what they take: deleted values are not
// kept.
func BuildJSON(namespace, storeID string, revision int64, values json.RawMessage) (*Snapshot, error) {
	var (
		obj string
		n   int
	)
	if len(bytes.TrimLeft(values, " \t\r\n")) > 0 {
		obj = string(values)
		var err error
		if n, err = eachMember(obj, nil); err != nil { // all checked before anything is sized by it
			return nil, fmt.Errorf("cache: values: %w", err)
		}
	}
	x, err := layout(n, func(b *builder) error {
		if n == 0 {
			return nil
		}
		if _, err := eachMember(obj, func(key, _ string) error {
			b.count(key)
			return nil
		}); err != nil {
			return fmt.Errorf("cache: values: %w", err)
		}
		_, err := eachMember(obj, func(key, raw string) error {
			if err := b.add(key).set(raw); err != nil {
				return fmt.Errorf("cache: key %q: %w", key, err)
			}
			return nil
		})
		return err
	})
	if err != nil {
		return nil, err
	}
	x.keep(obj)
	return &Snapshot{namespace: namespace, storeID: storeID, revision: revision, index: x}, nil
}

// Build decodes raw values into a new Snapshot. Every value is decoded here,
// once. A value that is not valid JSON fails the whole build. BuildJSON
// decodes the wire's form with less memory.
func Build(namespace, storeID string, revision int64, raw map[string]json.RawMessage) (*Snapshot, error) {
	x, err := layout(len(raw), func(b *builder) error {
		for k := range raw {
			b.count(k)
		}
		for k, r := range raw {
			if err := b.add(k).decode(r); err != nil {
				return fmt.Errorf("cache: key %q: %w", k, err)
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return &Snapshot{namespace: namespace, storeID: storeID, revision: revision, index: x}, nil
}

// decodeAll decodes every value of raw into entries.
func decodeAll(raw map[string]json.RawMessage) ([]entry, error) {
	ents := make([]entry, len(raw))
	i := 0
	for k, r := range raw {
		ents[i].key = k
		if err := ents[i].v.decode(r); err != nil {
			return nil, fmt.Errorf("cache: key %q: %w", k, err)
		}
		i++
	}
	return ents, nil
}

// Apply returns a new Snapshot: s with puts and deletes applied, at revision
// (a key both put and deleted is put). s is unchanged. Every put is decoded
// before anything is built, so a bad value fails the whole change.
func (s *Snapshot) Apply(revision int64, committedAt time.Time, puts map[string]json.RawMessage, deletes []string) (*Snapshot, error) {
	added, err := decodeAll(puts)
	if err != nil {
		return nil, err
	}
	gone := make([]uint32, 0, len(deletes)+len(puts))
	for _, k := range deletes {
		if i, ok := s.find(k); ok {
			gone = append(gone, i)
		}
	}
	for k := range puts {
		if i, ok := s.find(k); ok {
			gone = append(gone, i)
		}
	}
	slices.Sort(gone)
	x, err := s.with(slices.Compact(gone), added)
	if err != nil {
		return nil, err
	}
	return &Snapshot{namespace: s.namespace, storeID: s.storeID, revision: revision, committedAt: committedAt, index: x}, nil
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
//
// It is the read path of every getter, and as fast as a Go map's lookup:
// the hash's top bits pick the bucket, its low bits (the tag) skip the
// other keys in it, the one key left is compared in place (sameKey), and
// the arrays are read without bounds checks (a tenth of a lookup). They
// cannot fail: the builder and place make start one longer than the
// bucket count 1<<(64-shift), so h>>shift and h>>shift+1 index it, and
// its offsets never decrease and end at len(ents). Each address is made
// from an index in range, never one past the end (checkptr refuses that).
func (s *Snapshot) Get(key string) (Value, bool) {
	if len(s.ents) == 0 {
		return Value{}, false
	}
	var h uint64
	if s.strong {
		h = maphash.String(s.seed, key)
	} else {
		h = s.hash.sum(key)
	}
	start := unsafe.Add(unsafe.Pointer(unsafe.SliceData(s.start)), (h>>(s.shift&63))*4)
	ents := unsafe.Pointer(unsafe.SliceData(s.ents))
	for i, end := *(*uint32)(start), *(*uint32)(unsafe.Add(start, 4)); i < end; i++ {
		if e := (*entry)(unsafe.Add(ents, uintptr(i)*entrySize)); e.v.tag == uint16(h) && len(e.key) == len(key) && sameKey(e.key, key) {
			return Value{&e.v}, true
		}
	}
	return Value{}, false
}

// Len is the number of keys.
func (s *Snapshot) Len() int { return len(s.ents) }

// Keys returns the keys in sorted order, in a new slice.
func (s *Snapshot) Keys() []string {
	keys := make([]string, len(s.ents))
	for i := range s.ents {
		keys[i] = s.ents[i].key
	}
	slices.Sort(keys)
	return keys
}

// Range calls fn for each key and value, in no particular order, until fn
// returns false.
func (s *Snapshot) Range(fn func(key string, v Value) bool) {
	for i := range s.ents {
		if !fn(s.ents[i].key, Value{&s.ents[i].v}) {
			return
		}
	}
}

// RawAll yields each key and its JSON text, in no particular order. The
// texts are the snapshot's own memory: the caller must not modify them.
func (s *Snapshot) RawAll() iter.Seq2[string, json.RawMessage] {
	return func(yield func(string, json.RawMessage) bool) {
		for i := range s.ents {
			if !yield(s.ents[i].key, Value{&s.ents[i].v}.Raw()) {
				return
			}
		}
	}
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
