// Package cache holds what a holdfast client serves: immutable namespace
// snapshots with values decoded once, the atomic holder readers load them
// from, and the on-disk store of each namespace's last good data.
//
// Package config uses it; an application normally does not, except through
// the type aliases config.Value and config.Kind.
//
// # Snapshots
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
// # Last-good files
//
// OpenDir opens (creating it 0700 if needed) a directory of last-good
// files, one per namespace, "<namespace>.hfc" (0600). Save writes a Record
// (the snapshot, its store id, revision, cursor and confirmation time)
// atomically: a temporary file, fsync, rename over the old file, fsync of
// the directory. Load reads one back and checks it whole (magic, version,
// CRC-32C, name, every value); a file that fails is moved aside to
// "<name>.hfc.corrupt" and reported as a *CorruptError (errors.Is
// ErrCorrupt), and is never served. The format is described in
// disk_format.go.
//
// Processes may share a directory. Save never replaces a newer record of
// the same store id (a higher revision, or the same one confirmed later)
// with an older one: it compares under a lock of the namespace across
// processes ("<name>.hfc.lock", flock where the platform has it) and
// returns a *SupersededError (errors.Is ErrSuperseded) instead, which is not
// a write error. Another store id replaces the file: the store was reset.
//
// A Persister writes records off the apply path, on one goroutine of its
// own, coalescing a burst of records of one namespace into one write.
// Close flushes what is pending and stops it.
package cache
