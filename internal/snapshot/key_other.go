//go:build !amd64 && !arm64

package snapshot

import "encoding/binary"

// Elsewhere a word is read byte by byte (see key_fast.go).

func r8(s string, i uint64) uint64 {
	return binary.LittleEndian.Uint64([]byte(s[i : i+8]))
}

func r4(s string, i uint64) uint64 {
	return uint64(binary.LittleEndian.Uint32([]byte(s[i : i+4])))
}

func sameKey(a, b string) bool { return a == b }
