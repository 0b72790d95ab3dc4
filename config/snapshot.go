package config

import (
	"time"

	"github.com/holdfast-dev/holdfast/internal/snapshot"
)

// Snapshot is a namespace's content at one revision. It never changes:
// reading several keys from one Snapshot gives values of one revision, which
// reading them one by one from the Namespace does not promise. A Snapshot is
// a small value; copying it is cheap.
type Snapshot struct {
	s  *snapshot.Snapshot
	ns *Namespace // counts type mismatches; nil for the zero Snapshot
}

// Revision is the revision of the snapshot's last change (0 for Defaults
// served before any data).
func (s Snapshot) Revision() int64 {
	if s.s == nil {
		return 0
	}
	return s.s.Revision()
}

// Get returns key's value. It does not allocate.
func (s Snapshot) Get(key string) (v Value, ok bool) {
	// Written to stay within the inliner's budget: Get is every getter's
	// first step, and inlined it costs nothing over the snapshot's own.
	if s.s != nil {
		v.v, ok = s.s.Get(key)
	}
	return v, ok
}

// Len is the number of keys.
func (s Snapshot) Len() int {
	if s.s == nil {
		return 0
	}
	return s.s.Len()
}

// Keys returns the keys, sorted, in a new slice.
func (s Snapshot) Keys() []string {
	if s.s == nil {
		return nil
	}
	return s.s.Keys()
}

// String returns key's string value, or def when the key is absent or not a
// string (a type mismatch, counted).
func (s Snapshot) String(key, def string) string {
	v, ok := s.Get(key)
	if !ok {
		return def
	}
	if x, ok := v.Str(); ok {
		return x
	}
	s.mismatch()
	return def
}

// Int returns key's value as an int, or def when the key is absent or not an
// integer that fits an int (a type mismatch, counted).
func (s Snapshot) Int(key string, def int) int {
	v, ok := s.Get(key)
	if !ok {
		return def
	}
	if x, ok := v.Int(); ok {
		return x
	}
	s.mismatch()
	return def
}

// Float returns key's number, or def when the key is absent or not a number
// (a type mismatch, counted).
func (s Snapshot) Float(key string, def float64) float64 {
	v, ok := s.Get(key)
	if !ok {
		return def
	}
	if x, ok := v.Float(); ok {
		return x
	}
	s.mismatch()
	return def
}

// Bool returns key's boolean, or def when the key is absent or not a boolean
// (a type mismatch, counted).
func (s Snapshot) Bool(key string, def bool) bool {
	v, ok := s.Get(key)
	if !ok {
		return def
	}
	if x, ok := v.Bool(); ok {
		return x
	}
	s.mismatch()
	return def
}

// Duration returns key's duration, written as a string in
// time.ParseDuration's format ("250ms"), or def when the key is absent or is
// not such a string (a type mismatch, counted).
func (s Snapshot) Duration(key string, def time.Duration) time.Duration {
	v, ok := s.Get(key)
	if !ok {
		return def
	}
	if x, ok := v.Duration(); ok {
		return x
	}
	s.mismatch()
	return def
}

func (s Snapshot) mismatch() {
	if s.ns != nil {
		s.ns.mismatches.Add(1)
	}
}
