package snapshot

import (
	"cmp"
	"errors"
	"fmt"
	"hash/maphash"
	"math/bits"
	"math/rand/v2"
	"slices"
	"strings"
	"unsafe"
)

// index maps a snapshot's keys to their values. It is a hash table in two
// arrays rather than a Go map because, with tiny keys, a map's slots
// (24 bytes each, at a load of 7/16 to 7/8) cost more than the keys and
// values themselves: an entry here is 40 bytes and a bucket 4, at a load
// of 1/2 to 1 when built (1/4 to 1 after Apply), with no pointer but the
// entry's own. Entries are grouped by
// bucket: bucket b's are ents[start[b]:start[b+1]].
//
// An index is immutable once built, like the Snapshot that holds it.
type index struct {
	hash   keyHash      // random per index, so a server cannot choose colliding keys
	strong bool         // keys are hashed with seed instead (see maxBucket)
	seed   maphash.Seed // for strong
	shift  uint8        // a key's bucket is its hash >> shift, shift < 64
	start  []uint32     // len(start) is the bucket count + 1; nil when empty
	ents   []entry
	// text is the one copy of the values that BuildJSON made, which keys
	// and JSON texts are substrings of ("" for other indexes); inText is
	// how many of its bytes the entries take. with copies what they take
	// out of it once that is less than half of it (compact), so that a
	// snapshot that lost its biggest values to Apply does not keep them.
	text   string
	inText int
}

// entry is one key and its value; a Value points into it.
type entry struct {
	key string
	v   valueData
}

const entrySize = unsafe.Sizeof(entry{})

// maxBucket bounds the entries a bucket may hold before an index is laid
// out again with hash/maphash, so that no choice of keys makes lookups or
// the check for duplicates slow. With a random hash the fullest bucket of
// millions of keys holds about 10.
const maxBucket = 32

// errCrowded: a bucket holds more than maxBucket entries.
var errCrowded = errors.New("cache: crowded bucket")

func (x *index) hashOf(key string) uint64 {
	if x.strong {
		return maphash.String(x.seed, key)
	}
	return x.hash.sum(key)
}

// bucketsFor returns the shift that gives a table of at least n buckets
// and at least 2 (a power of two), so that a bucket holds one entry or
// fewer on average, and the shift is below 64.
func bucketsFor(n int) uint8 {
	return uint8(64 - bits.Len(uint(max(n, 2)-1)))
}

func (x *index) buckets() int { return len(x.start) - 1 }

// find returns the position of key in ents.
func (x *index) find(key string) (uint32, bool) {
	if len(x.ents) == 0 {
		return 0, false
	}
	h := x.hashOf(key)
	for i, end := x.start[h>>x.shift], x.start[h>>x.shift+1]; i < end; i++ {
		if x.ents[i].v.tag == uint16(h) && x.ents[i].key == key {
			return i, true
		}
	}
	return 0, false
}

// layout builds an index of n keys. fill runs two rounds over the same
// keys, in any order, on the builder it is given: count each key, then add
// each entry. If the keys crowd a bucket, it lays them out again, hashed
// with hash/maphash.
func layout(n int, fill func(*builder) error) (index, error) {
	b := newBuilder(n, false)
	if err := fill(b); err != nil {
		return index{}, err
	}
	x, err := b.finish()
	if !errors.Is(err, errCrowded) {
		return x, err
	}
	b = newBuilder(n, true)
	if err := fill(b); err != nil {
		return index{}, err
	}
	return b.finish()
}

// builder lays out a new index: entries are written once, where their
// bucket is, with no second array and no sort; a key is hashed once a
// round rather than kept.
type builder struct {
	x    index
	next []uint32 // where each bucket's next entry goes, while adding
	// mismatch: the adding round placed a key its counting round did not
	// count (fill broke its promise); finish fails rather than corrupt.
	mismatch bool
	spare    valueData // written instead, when mismatch
}

func newBuilder(n int, strong bool) *builder {
	b := &builder{x: index{hash: newKeyHash(), strong: strong, shift: bucketsFor(n)}}
	if strong {
		b.x.seed = maphash.MakeSeed()
	}
	if n > 0 {
		b.x.start = make([]uint32, 1<<(64-int(b.x.shift))+1)
		b.x.ents = make([]entry, n)
	}
	return b
}

// count counts key, in the first round.
func (b *builder) count(key string) { b.x.start[b.x.hashOf(key)>>b.x.shift+1]++ }

// add places an entry for key, in the second round, and returns its value
// for the caller to fill with set or decode.
func (b *builder) add(key string) *valueData {
	if b.next == nil {
		for i := 1; i < len(b.x.start); i++ {
			b.x.start[i] += b.x.start[i-1]
		}
		b.next = slices.Clone(b.x.start[:len(b.x.start)-1])
	}
	h := b.x.hashOf(key)
	bk := h >> b.x.shift
	if b.next[bk] >= b.x.start[bk+1] {
		b.mismatch = true
		return &b.spare
	}
	e := &b.x.ents[b.next[bk]]
	b.next[bk]++
	e.key, e.v.tag = key, uint16(h)
	return &e.v
}

// addValue places key with a copy of v, in the second round.
func (b *builder) addValue(key string, v *valueData) {
	d := b.add(key)
	tag := d.tag
	*d = *v
	d.tag = tag
}

// finish returns the index once every entry is added. A key added twice
// fails it, and so does a bucket of more than maxBucket entries, unless the
// keys are hashed with hash/maphash.
func (b *builder) finish() (index, error) {
	x := b.x
	if len(x.ents) == 0 {
		x.start, x.ents = nil, nil
		return x, nil
	}
	if b.mismatch || b.next == nil || !slices.Equal(b.next, x.start[1:]) {
		return index{}, errors.New("cache: index rounds saw different keys")
	}
	for bk := range x.buckets() {
		group := x.ents[x.start[bk]:x.start[bk+1]]
		if len(group) > maxBucket && !x.strong {
			return index{}, errCrowded
		}
		// A duplicate shares its bucket.
		for i := 1; i < len(group); i++ {
			for j := range i {
				if group[i].key == group[j].key {
					return index{}, fmt.Errorf("cache: key %q appears twice", group[i].key)
				}
			}
		}
	}
	return x, nil
}

// with returns a new index: x without the entries at the sorted positions
// gone, and with added, whose keys are not in x but for those at gone, and
// whose texts are their own. x is unchanged.
func (x *index) with(gone []uint32, added []entry) (index, error) {
	nx, err := x.place(gone, added)
	if err != nil {
		return index{}, err
	}
	nx.text, nx.inText = x.text, x.inText
	for _, i := range gone {
		nx.inText -= x.ents[i].taken(x.text)
	}
	if nx.inText < len(nx.text)/2 {
		nx.compact()
	}
	return nx, nil
}

// place is with but for the text: while the bucket count suits the new
// size, the hash and the layout are kept, the entries are copied in runs,
// and no key is hashed but the added ones.
func (x *index) place(gone []uint32, added []entry) (index, error) {
	n := len(x.ents) - len(gone) + len(added)
	if len(x.ents) == 0 || n == 0 || n > x.buckets() || n < x.buckets()/4 {
		return x.relayout(n, gone, added)
	}
	type placed struct {
		b uint32
		e *entry
	}
	adds := make([]placed, len(added))
	for i := range added {
		h := x.hashOf(added[i].key)
		added[i].v.tag = uint16(h)
		adds[i] = placed{uint32(h >> x.shift), &added[i]}
	}
	slices.SortFunc(adds, func(a, b placed) int { return cmp.Compare(a.b, b.b) })
	nx := index{hash: x.hash, strong: x.strong, seed: x.seed, shift: x.shift,
		start: make([]uint32, len(x.start)), ents: make([]entry, 0, n)}
	// The entries, in runs: up to the next position that goes, or to the
	// end of the bucket that the next added entry joins.
	pos, g, a := uint32(0), 0, 0
	for g < len(gone) || a < len(adds) {
		at := uint32(len(x.ents))
		if a < len(adds) {
			at = x.start[adds[a].b+1]
		}
		if g < len(gone) && gone[g] < at {
			nx.ents = append(nx.ents, x.ents[pos:gone[g]]...)
			pos = gone[g] + 1
			g++
			continue
		}
		nx.ents = append(append(nx.ents, x.ents[pos:at]...), *adds[a].e)
		pos = at
		a++
	}
	nx.ents = append(nx.ents, x.ents[pos:]...)
	// Each bucket starts as many entries earlier as went before it, and as
	// many later as were added to the buckets before it.
	g, a = 0, 0
	for b := range nx.start {
		for g < len(gone) && gone[g] < x.start[b] {
			g++
		}
		for a < len(adds) && int(adds[a].b) < b {
			a++
		}
		nx.start[b] = x.start[b] - uint32(g) + uint32(a)
	}
	if !x.strong {
		for _, p := range adds {
			if nx.start[p.b+1]-nx.start[p.b] > maxBucket {
				return x.relayout(n, gone, added) // puts that crowd a bucket
			}
		}
	}
	return nx, nil
}

// relayout is place for another bucket count: a new index of x's entries
// but those at gone, and added.
func (x *index) relayout(n int, gone []uint32, added []entry) (index, error) {
	return layout(n, func(b *builder) error {
		for round := range 2 {
			g := 0
			for i := range x.ents {
				if g < len(gone) && gone[g] == uint32(i) {
					g++
					continue
				}
				if round == 0 {
					b.count(x.ents[i].key)
				} else {
					b.addValue(x.ents[i].key, &x.ents[i].v)
				}
			}
			for i := range added {
				if round == 0 {
					b.count(added[i].key)
				} else {
					b.addValue(added[i].key, &added[i].v)
				}
			}
		}
		return nil
	})
}

// keep records that x's keys and texts are substrings of text.
func (x *index) keep(text string) {
	x.text, x.inText = text, 0
	for i := range x.ents {
		x.inText += x.ents[i].taken(text)
	}
	if x.inText == 0 {
		x.text = ""
	}
}

// taken is how many bytes of text e's key and JSON text take.
func (e *entry) taken(text string) int {
	n := 0
	if within(e.key, text) {
		n += len(e.key)
	}
	if t := e.v.text(); within(t, text) {
		n += len(t)
	}
	return n
}

// within reports whether s is a substring of text: whether its bytes are
// text's own, by address, not whether text holds the same bytes. The
// addresses are only compared, never made pointers again, and heap
// memory does not move, so this is safe wherever s and text came from.
func within(s, text string) bool {
	off := uintptr(unsafe.Pointer(unsafe.StringData(s))) - uintptr(unsafe.Pointer(unsafe.StringData(text)))
	return len(s) > 0 && off < uintptr(len(text))
}

// compact copies the keys and JSON texts that x's entries take from
// x.text into a new text of just them, and points the entries there. The
// entries must be x's own (with's copies): older snapshots share x.text.
func (x *index) compact() {
	var b strings.Builder
	b.Grow(x.inText)
	for i := range x.ents {
		e := &x.ents[i]
		if within(e.key, x.text) {
			b.WriteString(e.key)
		}
		if t := e.v.text(); within(t, x.text) {
			b.WriteString(t)
		}
	}
	text := b.String()
	next := func(n int) string {
		s := text[:n]
		text = text[n:]
		return s
	}
	for i := range x.ents {
		e := &x.ents[i]
		if within(e.key, x.text) {
			e.key = next(len(e.key))
		}
		if t := e.v.text(); within(t, x.text) {
			e.v.moveText(next(len(t)))
		}
	}
	x.keep(b.String())
}

// keyHash is a seeded hash of keys: the one Go's own maps use where the
// CPU has no AES instructions (runtime/hash64.go, after wyhash), with a
// random key per index. It is here because Get's cost is mostly hashing,
// and for the short keys of a namespace this costs a third of
// hash/maphash's, whose call does more than hash; it keeps Get as fast as
// a Go map's lookup. maxBucket guards against keys it would crowd.
type keyHash [4]uint64

func newKeyHash() keyHash {
	return keyHash{rand.Uint64(), rand.Uint64(), rand.Uint64(), rand.Uint64()}
}

const m5 = 0x1d8e4e27c47d124f

func mix(a, b uint64) uint64 {
	hi, lo := bits.Mul64(a, b)
	return hi ^ lo
}

// sum hashes s.
func (k *keyHash) sum(s string) uint64 {
	n := uint64(len(s))
	seed := k[0]
	var a, b uint64
	switch {
	case n == 0:
		return seed
	case n < 4:
		a = uint64(s[0]) | uint64(s[n>>1])<<8 | uint64(s[n-1])<<16
	case n < 8:
		a, b = r4(s, 0), r4(s, n-4)
	case n <= 16:
		a, b = r8(s, 0), r8(s, n-8)
	default:
		p, l := uint64(0), n
		if l > 48 {
			seed1, seed2 := seed, seed
			for ; l > 48; l -= 48 {
				seed = mix(r8(s, p)^k[1], r8(s, p+8)^seed)
				seed1 = mix(r8(s, p+16)^k[2], r8(s, p+24)^seed1)
				seed2 = mix(r8(s, p+32)^k[3], r8(s, p+40)^seed2)
				p += 48
			}
			seed ^= seed1 ^ seed2
		}
		for ; l > 16; l -= 16 {
			seed = mix(r8(s, p)^k[1], r8(s, p+8)^seed)
			p += 16
		}
		a, b = r8(s, p+l-16), r8(s, p+l-8)
	}
	return mix(m5^n, mix(a^k[1], b^seed))
}
