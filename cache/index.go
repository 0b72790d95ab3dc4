package cache

import (
	"fmt"
	"hash/maphash"
	"math/bits"
	"slices"
)

// index maps a snapshot's keys to their values. It is a hash table in two
// arrays rather than a Go map because, with tiny keys, a map's slots
// (24 bytes each, at a load of 7/16 to 7/8) cost more than the keys and
// values themselves: an entry here is 40 bytes and a bucket 4, at a load
// of 1/2 to 1, with no pointer but the entry's own. Entries are grouped by
// bucket: bucket b's are ents[start[b]:start[b+1]].
type index struct {
	seed  maphash.Seed // random per index, so a server cannot choose colliding keys
	shift uint8        // a key's bucket is its hash >> shift
	start []uint32     // len(start) is the bucket count + 1; nil when empty
	ents  []entry
}

// entry is one key and its value; a Value points into it.
type entry struct {
	key string
	v   valueData
}

// bucketsFor returns the shift that gives a table of at least n buckets
// (a power of two), so that a bucket holds one entry or fewer on average.
func bucketsFor(n int) uint8 {
	if n <= 1 {
		return 64 // one bucket: every hash >> 64 is 0
	}
	return uint8(64 - bits.Len(uint(n-1)))
}

func (x *index) buckets() int { return len(x.start) - 1 }

// find returns the position of key in ents.
func (x *index) find(key string) (uint32, bool) {
	if len(x.ents) == 0 {
		return 0, false
	}
	b := maphash.String(x.seed, key) >> x.shift
	for i, end := x.start[b], x.start[b+1]; i < end; i++ {
		if x.ents[i].key == key {
			return i, true
		}
	}
	return 0, false
}

// newIndex makes the index of ents, which it reorders in place (grouped by
// bucket) and keeps. A key that appears twice fails it.
func newIndex(ents []entry) (index, error) {
	x := index{seed: maphash.MakeSeed(), shift: bucketsFor(len(ents)), ents: ents}
	if len(ents) == 0 {
		x.ents = nil
		return x, nil
	}
	nb := 1 << (64 - int(x.shift))
	x.start = make([]uint32, nb+1)
	bucket := make([]uint32, len(ents)) // each entry's bucket, while they move
	for i := range ents {
		b := uint32(maphash.String(x.seed, ents[i].key) >> x.shift)
		bucket[i] = b
		x.start[b+1]++
	}
	for b := 1; b <= nb; b++ {
		x.start[b] += x.start[b-1]
	}
	// Counting sort in place: each swap puts one entry where it belongs.
	next := slices.Clone(x.start[:nb])
	for b := range nb {
		for next[b] < x.start[b+1] {
			i := next[b]
			tb := bucket[i]
			if int(tb) == b {
				next[b]++
				continue
			}
			j := next[tb]
			next[tb]++
			ents[i], ents[j] = ents[j], ents[i]
			bucket[i], bucket[j] = bucket[j], bucket[i]
		}
	}
	// A duplicate shares its bucket; buckets are short (the seed is random).
	for b := range nb {
		group := ents[x.start[b]:x.start[b+1]]
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
// gone, and with added, whose keys are not in x but for those at gone. x
// is unchanged. The seed is kept, so while the bucket count suits the new
// size no key is hashed again but the added ones.
func (x *index) with(gone []uint32, added []entry) (index, error) {
	n := len(x.ents) - len(gone) + len(added)
	if len(x.ents) == 0 || n == 0 || n > x.buckets() || n < x.buckets()/4 {
		ents := make([]entry, 0, n)
		g := 0
		for i := range x.ents {
			if g < len(gone) && gone[g] == uint32(i) {
				g++
				continue
			}
			ents = append(ents, x.ents[i])
		}
		return newIndex(append(ents, added...))
	}
	type placed struct {
		b uint32
		e *entry
	}
	adds := make([]placed, len(added))
	for i := range added {
		adds[i] = placed{uint32(maphash.String(x.seed, added[i].key) >> x.shift), &added[i]}
	}
	slices.SortFunc(adds, func(a, b placed) int { return int(a.b) - int(b.b) })
	nx := index{seed: x.seed, shift: x.shift, start: make([]uint32, len(x.start)), ents: make([]entry, 0, n)}
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
	return nx, nil
}
