// Package cachedir is the on-disk store of each namespace's last good data
// (config.WithCacheDir): the directory, its locks, the writer that keeps it
// off the apply path, and the codec of the file format that package cache
// documents and exposes to tools.
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
package cachedir
