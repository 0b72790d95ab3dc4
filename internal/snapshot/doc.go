// Package snapshot holds what a holdfast client serves: immutable namespace
// snapshots with values decoded once, and the atomic holder readers load
// them from. Package config wraps it in its public Value and Snapshot.
//
// BuildJSON decodes a namespace's values as they come on the wire, one
// JSON object, into a *Snapshot: it walks the object in place, and keys
// and JSON texts stay substrings of one copy of it. Build does the same
// from a map of raw values, copying each. Apply makes a new Snapshot from an old one and
// one change set, leaving the old one untouched. A Snapshot never changes
// once built, so readers share it without locks: a Holder is an atomic
// pointer to the current one, and a read is a pointer load and a hash
// lookup as fast as a Go map's. Each Value is decoded when its Snapshot is
// built (its kind, and its string, integer, float, boolean or duration
// form), so that reading it never parses or allocates.
//
// A snapshot's memory is bounded by its size on the wire: 44 to 48 bytes
// a key besides the JSON text (a 40-byte entry and its share of the
// index's buckets; up to 56 after changes shrank it), so that even keys
// of a few bytes retain less than 8 times the text.
//
// Its error messages keep the "cache:" prefix they had when this was
// package cache: they reach users inside config's errors.
package snapshot
