//go:build amd64 || arm64

package snapshot

import "unsafe"

// These architectures load words from any address: keys are read in
// place, a word at a time. The reads are safe because every caller keeps
// them inside the string (i+8 <= len(s), i+4 <= len(s)), so none runs
// past its end into another page (TestKeyReadsStayInTheKey); and a word
// holds no pointer, so checkptr (under -race) does not ask it to be
// aligned.

// r8 is the 8 bytes of s at i, little-endian; i+8 <= len(s).
func r8(s string, i uint64) uint64 {
	return *(*uint64)(unsafe.Add(unsafe.Pointer(unsafe.StringData(s)), i))
}

// r4 is the 4 bytes of s at i, little-endian; i+4 <= len(s).
func r4(s string, i uint64) uint64 {
	return uint64(*(*uint32)(unsafe.Add(unsafe.Pointer(unsafe.StringData(s)), i)))
}

// sameKey is a == b for keys of the same length. Keys of 8 to 16 bytes,
// the common ones, are compared as two words that overlap, in place: a
// call to the runtime's comparison, with the registers it spills, costs
// as much again as the rest of a lookup.
func sameKey(a, b string) bool {
	if n := uint64(len(a)); n >= 8 && n <= 16 {
		return r8(a, 0) == r8(b, 0) && r8(a, n-8) == r8(b, n-8)
	}
	return a == b
}
