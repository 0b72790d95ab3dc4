// Package cache reads and writes the last-good files a holdfast client
// keeps in its cache directory (config.WithCacheDir), for tools that
// inspect or prepare one: an operator's dump of what a host would serve
// after a restart, a file baked into an image. Applications do not need
// it: package config reads and writes these files itself.
//
// # The directory
//
// The directory (mode 0700) holds one file per namespace,
// "<namespace>.hfc" (mode 0600), replaced atomically by rename on every
// write. Beside them: "<namespace>.hfc.lock", an empty file the client
// locks (flock) across processes sharing the directory; and
// "<namespace>.hfc.corrupt", a file that failed its checks, moved aside
// and never served. Temporary files start with ".".
//
// # The format, version 1
//
// All integers are little-endian; "uvarint" is encoding/binary's unsigned
// varint.
//
//	magic        8 bytes  "\x89HFC\r\n\x1a\n"
//	version      uint16   1
//	flags        uint16   0 (any other value is a foreign format)
//	namespace    uvarint length, bytes (a valid namespace name)
//	store id     uvarint length, bytes (at most 1 KiB)
//	revision     int64
//	cursor       int64
//	confirmed-at int64    Unix nanoseconds, wall clock; 0 = unknown
//	count        uvarint  number of values
//	count × {key: uvarint length, bytes; value: uvarint length, JSON text}
//	checksum     uint32   CRC-32C (Castagnoli) of every byte before it
//
// A file is served only whole: Decode checks every byte of it (magic,
// version, checksum, lengths, the namespace name, each value as JSON) and
// returns an error wrapping ErrCorrupt for any defect. The client moves
// such a file aside rather than serve it.
package cache
