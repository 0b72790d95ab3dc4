package cachedir

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"strings"
	"time"

	"github.com/holdfast-dev/holdfast/internal/snapshot"
)

// The last-good file format, version 1. All integers are little-endian;
// "uvarint" is encoding/binary's unsigned varint.
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
// Why binary and not JSON: loading a namespace is reading the file, one
// CRC-32C pass (hardware-accelerated, tens of GB/s) and slicing keys and
// values out by their lengths; the JSON text of each value is then validated
// and decoded once by NewValue, as for any snapshot. A JSON envelope would
// scan and validate every value twice (once to find its end inside the
// envelope, once in NewValue) and unescape every key. The magic (PNG-style:
// a high byte, CR LF, ^Z, LF) catches text-mode mangling and foreign files;
// the version lets a later format be told apart.

const (
	formatMagic   = "\x89HFC\r\n\x1a\n"
	formatVersion = 1

	// MaxFileSize is the largest last-good file Encode writes and Decode
	// reads (1 GiB).
	MaxFileSize = 1 << 30

	maxStoreIDLen = 1 << 10
	// fixedHeaderLen is magic, version and flags.
	fixedHeaderLen = len(formatMagic) + 2 + 2
	checksumLen    = 4
	// minFileLen is the smallest well-formed file: fixed header, a
	// one-byte namespace, an empty store id, the three int64s, a zero
	// count and the checksum.
	minFileLen = fixedHeaderLen + 2 + 1 + 3*8 + 1 + checksumLen
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// Encode returns the last-good file contents for rec: its header fields and
// every value of rec.Snapshot. rec.Namespace must be a valid namespace name;
// rec.Snapshot must not be nil, and its namespace, store id and revision, when
// set, must equal the record's.
func Encode(rec *Record) ([]byte, error) {
	if rec == nil {
		return nil, errors.New("cache: encode of a nil record")
	}
	if err := checkNamespace(rec.Namespace); err != nil {
		return nil, err
	}
	s := rec.Snapshot
	if s == nil {
		return nil, fmt.Errorf("cache: record of namespace %q has no snapshot", rec.Namespace)
	}
	if s.Namespace() != "" && s.Namespace() != rec.Namespace {
		return nil, fmt.Errorf("cache: record of namespace %q holds a snapshot of %q", rec.Namespace, s.Namespace())
	}
	if s.StoreID() != "" && s.StoreID() != rec.StoreID {
		return nil, fmt.Errorf("cache: record store id %q differs from its snapshot's %q", rec.StoreID, s.StoreID())
	}
	if s.Revision() != 0 && s.Revision() != rec.Revision {
		return nil, fmt.Errorf("cache: record revision %d differs from its snapshot's %d", rec.Revision, s.Revision())
	}
	if len(rec.StoreID) > maxStoreIDLen {
		return nil, fmt.Errorf("cache: store id longer than %d bytes", maxStoreIDLen)
	}

	// First pass: the exact size, so the buffer is allocated once.
	size := fixedHeaderLen +
		uvarintLen(len(rec.Namespace)) + len(rec.Namespace) +
		uvarintLen(len(rec.StoreID)) + len(rec.StoreID) +
		3*8 + uvarintLen(s.Len()) + checksumLen
	var bad string
	var hasBad bool
	s.Range(func(k string, v snapshot.Value) bool {
		if len(v.Raw()) == 0 {
			bad, hasBad = k, true
			return false
		}
		size += uvarintLen(len(k)) + len(k) + uvarintLen(len(v.Raw())) + len(v.Raw())
		return true
	})
	if hasBad {
		return nil, fmt.Errorf("cache: key %q holds no value", bad)
	}
	if size > MaxFileSize {
		return nil, fmt.Errorf("cache: namespace %q encodes to %d bytes, more than the %d limit", rec.Namespace, size, MaxFileSize)
	}

	// Second pass: write. The snapshot is immutable, so it holds the same
	// entries as in the first pass (in whatever order Range gives).
	b := make([]byte, 0, size)
	b = append(b, formatMagic...)
	b = binary.LittleEndian.AppendUint16(b, formatVersion)
	b = binary.LittleEndian.AppendUint16(b, 0)
	b = appendBytes(b, rec.Namespace)
	b = appendBytes(b, rec.StoreID)
	b = binary.LittleEndian.AppendUint64(b, uint64(rec.Revision))
	b = binary.LittleEndian.AppendUint64(b, uint64(rec.Cursor))
	var confirmed int64
	if !rec.ConfirmedAt.IsZero() {
		confirmed = rec.ConfirmedAt.UnixNano()
	}
	b = binary.LittleEndian.AppendUint64(b, uint64(confirmed))
	b = binary.AppendUvarint(b, uint64(s.Len()))
	s.Range(func(k string, v snapshot.Value) bool {
		b = appendBytes(b, k)
		b = binary.AppendUvarint(b, uint64(len(v.Raw())))
		b = append(b, v.Raw()...)
		return true
	})
	b = binary.LittleEndian.AppendUint32(b, crc32.Checksum(b, castagnoli))
	if len(b) != size {
		// Cannot happen with an immutable snapshot; refuse rather than
		// write something unexpected.
		return nil, fmt.Errorf("cache: internal error: encoded %d bytes, expected %d", len(b), size)
	}
	return b, nil
}

func appendBytes(b []byte, s string) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

func uvarintLen(n int) int {
	l := 1
	for ; n >= 0x80; n >>= 7 {
		l++
	}
	return l
}

// Decode parses a last-good file and builds its snapshot, validating every
// value as JSON. Any defect (wrong magic, unknown version or flags, bad
// checksum, a length running past the end, trailing bytes, an invalid
// namespace name, a duplicate key, a value that is not JSON) gives an error
// that wraps ErrCorrupt, and no record. Decode never allocates more than a
// small multiple of len(data): every length is checked against the bytes
// that remain before anything is allocated for it. data is not retained.
func Decode(data []byte) (*Record, error) {
	if len(data) > MaxFileSize {
		return nil, corruptf("file of %d bytes exceeds the %d limit", len(data), MaxFileSize)
	}
	if err := checkPreamble(data); err != nil {
		return nil, err
	}
	if len(data) < minFileLen {
		return nil, corruptf("truncated: %d bytes", len(data))
	}
	body := data[:len(data)-checksumLen]
	want := binary.LittleEndian.Uint32(data[len(body):])
	if got := crc32.Checksum(body, castagnoli); got != want {
		return nil, corruptf("checksum mismatch (file %08x, computed %08x)", want, got)
	}

	h, r := decodeHeader(body)
	count := r.uvarint("count")
	if r.err != nil {
		return nil, r.err
	}
	if err := checkNamespace(h.namespace); err != nil {
		return nil, corruptf("namespace name %q in file is invalid", h.namespace)
	}
	// Each entry takes at least two bytes (two zero lengths), so count is
	// bounded by what remains before the map is sized by it.
	if count > uint64(len(r.b)/2) {
		return nil, corruptf("%d values cannot fit in %d bytes", count, len(r.b))
	}
	// The values alias data until Build copies each, once, as it decodes
	// it: data is not retained.
	raws := make(map[string]json.RawMessage, int(count))
	for i := uint64(0); i < count; i++ {
		k := r.bytes("key")
		raw := r.bytes("value")
		if r.err != nil {
			return nil, r.err
		}
		if _, dup := raws[string(k)]; dup {
			return nil, corruptf("duplicate key %.64q", k)
		}
		raws[string(k)] = raw
	}
	if len(r.b) != 0 {
		return nil, corruptf("%d unexpected bytes after the values", len(r.b))
	}
	snap, err := snapshot.Build(h.namespace, h.storeID, h.revision, raws)
	if err != nil {
		return nil, corruptf("%s", strings.TrimPrefix(err.Error(), "cache: "))
	}
	return &Record{
		Namespace:   h.namespace,
		StoreID:     h.storeID,
		Revision:    h.revision,
		Cursor:      h.cursor,
		ConfirmedAt: h.confirmedAt(),
		Snapshot:    snap,
	}, nil
}

// header is the fixed part of a record, before its values.
type header struct {
	namespace string
	storeID   string
	revision  int64
	cursor    int64
	confirmed int64 // Unix nanoseconds; 0 = unknown
}

func (h header) confirmedAt() time.Time {
	if h.confirmed == 0 {
		return time.Time{}
	}
	return time.Unix(0, h.confirmed)
}

// maxHeaderLen bounds the bytes of a well-formed file before its count:
// the fixed header, the longest namespace and store id, and three int64s.
const maxHeaderLen = fixedHeaderLen + 2 + maxNamespaceLen + 2 + maxStoreIDLen + 3*8

// checkPreamble checks the magic, version and flags at the start of data (a
// whole file, or at least its first fixedHeaderLen bytes).
func checkPreamble(data []byte) error {
	if len(data) < len(formatMagic) || string(data[:len(formatMagic)]) != formatMagic {
		if len(data) == 0 {
			return corruptf("empty file")
		}
		return corruptf("not a holdfast cache file (bad magic)")
	}
	if len(data) < fixedHeaderLen {
		return corruptf("truncated header")
	}
	if v := binary.LittleEndian.Uint16(data[len(formatMagic):]); v != formatVersion {
		return corruptf("unsupported format version %d (want %d)", v, formatVersion)
	}
	if f := binary.LittleEndian.Uint16(data[len(formatMagic)+2:]); f != 0 {
		return corruptf("unsupported format flags %#x", f)
	}
	return nil
}

// decodeHeader reads the header fields of body (a file's bytes before the
// checksum, or their first maxHeaderLen or more), whose preamble has been
// checked. It returns the reader positioned at the count; a defect is in
// the reader's err.
func decodeHeader(body []byte) (header, *reader) {
	r := &reader{b: body[fixedHeaderLen:]}
	h := header{
		namespace: r.str("namespace", maxNamespaceLen),
		storeID:   r.str("store id", maxStoreIDLen),
		revision:  int64(r.u64("revision")),
		cursor:    int64(r.u64("cursor")),
		confirmed: int64(r.u64("confirmed-at")),
	}
	return h, r
}

// readHeader reads the header of the file open as f, of size bytes, and
// checks the whole file's checksum, streaming it through a small buffer: a
// Save compares headers without holding a second copy of a large file. A
// defect gives an error wrapping ErrCorrupt; a read error is returned as is.
func readHeader(f io.Reader, size int64) (header, error) {
	if size > MaxFileSize {
		return header{}, corruptf("file of %d bytes exceeds the %d limit", size, MaxFileSize)
	}
	if size < int64(minFileLen) {
		return header{}, corruptf("truncated: %d bytes", size)
	}
	body := size - checksumLen
	head := make([]byte, min(body, int64(maxHeaderLen)))
	if _, err := io.ReadFull(f, head); err != nil {
		return header{}, shortRead(err)
	}
	if err := checkPreamble(head); err != nil {
		return header{}, err
	}
	crc := crc32.New(castagnoli)
	crc.Write(head)
	if _, err := io.CopyN(crc, f, body-int64(len(head))); err != nil {
		return header{}, shortRead(err)
	}
	// The checksum, and one byte more to see a file that grew.
	var tail [checksumLen + 1]byte
	switch n, err := io.ReadFull(f, tail[:]); {
	case n < checksumLen:
		return header{}, shortRead(err)
	case n > checksumLen:
		return header{}, corruptf("file grew while being read")
	case err != io.ErrUnexpectedEOF:
		return header{}, err
	}
	if want, got := binary.LittleEndian.Uint32(tail[:]), crc.Sum32(); got != want {
		return header{}, corruptf("checksum mismatch (file %08x, computed %08x)", want, got)
	}
	h, r := decodeHeader(head)
	if r.err != nil {
		return header{}, r.err
	}
	return h, nil
}

// shortRead makes a file that ended before its size (it is replaced by
// rename, never written in place, so it should not) a defect.
func shortRead(err error) error {
	if err == io.EOF || err == io.ErrUnexpectedEOF {
		return corruptf("file shrank while being read")
	}
	return err
}

func corruptf(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrCorrupt}, args...)...)
}

// reader walks a checksummed body; the first error sticks and later reads
// return zero values.
type reader struct {
	b   []byte
	err error
}

func (r *reader) fail(what, why string) {
	if r.err == nil {
		r.err = corruptf("%s: %s", what, why)
	}
	r.b = nil
}

func (r *reader) uvarint(what string) uint64 {
	if r.err != nil {
		return 0
	}
	v, n := binary.Uvarint(r.b)
	if n <= 0 {
		r.fail(what, "bad length")
		return 0
	}
	r.b = r.b[n:]
	return v
}

func (r *reader) u64(what string) uint64 {
	if r.err != nil {
		return 0
	}
	if len(r.b) < 8 {
		r.fail(what, "truncated")
		return 0
	}
	v := binary.LittleEndian.Uint64(r.b)
	r.b = r.b[8:]
	return v
}

// bytes returns the next length-prefixed field, aliasing the input.
func (r *reader) bytes(what string) []byte {
	n := r.uvarint(what)
	if r.err != nil {
		return nil
	}
	if n > uint64(len(r.b)) {
		r.fail(what, fmt.Sprintf("length %d runs past the end (%d bytes left)", n, len(r.b)))
		return nil
	}
	v := r.b[:n:n]
	r.b = r.b[n:]
	return v
}

func (r *reader) str(what string, max int) string {
	b := r.bytes(what)
	if r.err == nil && len(b) > max {
		r.fail(what, fmt.Sprintf("%d bytes, more than %d", len(b), max))
	}
	return string(b)
}
