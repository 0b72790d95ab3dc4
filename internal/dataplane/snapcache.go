package dataplane

import (
	"bytes"
	"compress/flate"
	"container/list"
	"encoding/binary"
	"encoding/json"
	"hash/crc32"
	"io"
	"reflect"
	"strconv"
	"sync"
	"unsafe"

	"github.com/holdfast-dev/holdfast/internal/wire"
)

// DefaultSnapshotCacheBytes bounds the encoded snapshots a data plane
// keeps: 64 namespaces of 1 MiB with their gzip forms.
const DefaultSnapshotCacheBytes = 64 << 20

// snapCache keeps the encoded values of the newest snapshot of each
// namespace and representation (with or without reserved keys), shared by
// every reader of that revision: encoding a 1 MiB namespace costs
// milliseconds of CPU, gzipping it tens, and a client that asks again and
// again (or resets its streams) must not make the others wait for that
// CPU (the attack suite's rapid reset and never-reading snapshot readers,
// docs/SECURITY.md). The
// reply's first fields (cursor, compaction point) and last (the data's
// age) change between readers of one revision; they are written around
// the shared bytes, and the reply is byte for byte what encoding it whole
// gives (TestSnapshotBodyIsTheEncodedWhole).
//
// An entry is the values of one content: a backend's values map is never
// changed once handed out (a change makes a new one), so the map itself
// names the content, whatever a restore does to revision numbers. Least
// recently used entries go past the byte bound.
type snapCache struct {
	mu      sync.Mutex
	max     int64
	size    int64
	entries map[snapKey]*list.Element // of *encodedValues, most recent at the front
	lru     list.List
}

type snapKey struct {
	ns   string
	base bool // the representation without reserved keys
}

// encodedValues is one content's values object, encoded once, and its
// gzip form's middle once a reader asks for it.
type encodedValues struct {
	key  snapKey
	src  unsafe.Pointer // the values map it encodes
	size int64          // what the cache counts of it (under snapCache.mu)

	once  sync.Once
	plain []byte
	err   error

	zonce    sync.Once
	deflated []byte // plain as raw DEFLATE, sync-flushed: byte aligned, not final
}

func newSnapCache(max int64) *snapCache {
	return &snapCache{max: max, entries: make(map[snapKey]*list.Element)}
}

// values returns the encoded values map of ns (base: its base view),
// encoding it once whoever asks first.
func (c *snapCache) values(ns string, base bool, values map[string]json.RawMessage) ([]byte, *encodedValues, error) {
	src := reflect.ValueOf(values).UnsafePointer()
	key := snapKey{ns, base}
	c.mu.Lock()
	var e *encodedValues
	if el, ok := c.entries[key]; ok && el.Value.(*encodedValues).src == src {
		c.lru.MoveToFront(el)
		e = el.Value.(*encodedValues)
	} else {
		if ok {
			c.removeLocked(el)
		}
		e = &encodedValues{key: key, src: src}
		c.entries[key] = c.lru.PushFront(e)
	}
	c.mu.Unlock()
	e.once.Do(func() {
		var encoded json.RawMessage
		if encoded, e.err = wire.EncodeValues(values); e.err == nil {
			// As encoding/json writes a RawMessage field: compacted,
			// HTML characters escaped.
			e.plain, e.err = json.Marshal(encoded)
		}
		c.account(e, int64(len(e.plain)))
	})
	return e.plain, e, e.err
}

// gzipped returns e's values as raw DEFLATE ending in a sync flush,
// compressing them once.
func (c *snapCache) gzipped(e *encodedValues) []byte {
	e.zonce.Do(func() {
		var buf bytes.Buffer
		fw, _ := flate.NewWriter(&buf, flate.DefaultCompression) // a valid level: no error
		_, _ = fw.Write(e.plain)
		_ = fw.Flush()
		e.deflated = buf.Bytes()
		c.account(e, int64(len(e.deflated)))
	})
	return e.deflated
}

// account adds n bytes of e to the cache's size, if e is still in it, and
// makes room past the bound.
func (c *snapCache) account(e *encodedValues, n int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	el, ok := c.entries[e.key]
	if !ok || el.Value != e {
		return // replaced already: its bytes go with its last reader
	}
	e.size += n
	c.size += n
	for c.size > c.max && c.lru.Len() > 0 {
		c.removeLocked(c.lru.Back())
	}
}

func (c *snapCache) removeLocked(el *list.Element) {
	e := el.Value.(*encodedValues)
	c.lru.Remove(el)
	delete(c.entries, e.key)
	c.size -= e.size
}

// snapshotHead is a snapshot reply's body up to its values: the fields
// of transport.Snapshot before Values, as encoding/json writes them.
func snapshotHead(ns, storeID string, rev, cursor, compact int64) []byte {
	b := make([]byte, 0, 96+len(ns)+len(storeID))
	b = append(b, `{"ns":`...)
	b = appendJSONString(b, ns)
	b = append(b, `,"store_id":`...)
	b = appendJSONString(b, storeID)
	b = append(b, `,"revision":`...)
	b = strconv.AppendInt(b, rev, 10)
	b = append(b, `,"cursor":`...)
	b = strconv.AppendInt(b, cursor, 10)
	b = append(b, `,"compact_revision":`...)
	b = strconv.AppendInt(b, compact, 10)
	return append(b, `,"values":`...)
}

// snapshotTail is the rest of the body after the values: the data's age
// (both fields omitted when zero), the object's end and a newline.
func snapshotTail(ageMillis int64, unconfirmed bool) []byte {
	b := make([]byte, 0, 48)
	if ageMillis != 0 {
		b = append(b, `,"age_ms":`...)
		b = strconv.AppendInt(b, ageMillis, 10)
	}
	if unconfirmed {
		b = append(b, `,"unconfirmed":true`...)
	}
	return append(b, "}\n"...)
}

func appendJSONString(b []byte, s string) []byte {
	q, _ := json.Marshal(s) // a string always encodes
	return append(b, q...)
}

// writeGzip writes head, plain and tail as one gzip member (RFC 1952):
// head and tail as stored DEFLATE blocks around plain's shared compressed
// blocks (deflated), which a sync flush left byte aligned. Every gzip
// reader reads it as it reads any other member. The CRC goes through
// plain again (crc32 has no combine in the standard library): a fraction
// of a millisecond a MiB, next to tens for DEFLATE.
func writeGzip(w io.Writer, head, plain, deflated, tail []byte) error {
	crc := crc32.Update(crc32.Update(crc32.ChecksumIEEE(head), crc32.IEEETable, plain), crc32.IEEETable, tail)
	var b bytes.Buffer
	b.Grow(len(head) + len(tail) + 40)
	b.Write([]byte{0x1f, 0x8b, 8, 0, 0, 0, 0, 0, 0, 0xff}) // gzip, DEFLATE, no flags, no time, unknown OS
	storedBlock(&b, head, false)
	if _, err := w.Write(b.Bytes()); err != nil {
		return err
	}
	if _, err := w.Write(deflated); err != nil {
		return err
	}
	b.Reset()
	storedBlock(&b, tail, true)
	var trailer [8]byte
	binary.LittleEndian.PutUint32(trailer[:4], crc)
	binary.LittleEndian.PutUint32(trailer[4:], uint32(len(head)+len(plain)+len(tail)))
	b.Write(trailer[:])
	_, err := w.Write(b.Bytes())
	return err
}

// storedBlock appends p as one stored DEFLATE block (p under 64 KiB),
// starting at a byte boundary.
func storedBlock(b *bytes.Buffer, p []byte, final bool) {
	hdr := byte(0) // BFINAL 0, BTYPE 00, then padding to the byte
	if final {
		hdr = 1
	}
	b.WriteByte(hdr)
	var n [4]byte
	binary.LittleEndian.PutUint16(n[:2], uint16(len(p)))
	binary.LittleEndian.PutUint16(n[2:], ^uint16(len(p)))
	b.Write(n[:])
	b.Write(p)
}
