package snapshot

import (
	"strings"
	"syscall"
	"testing"
	"unsafe"
)

// TestKeyReadsStayInTheKey: a key that ends where a page ends, with an
// unreadable page after it, is hashed and compared without a fault, at
// every length the word reads change at: no read goes past a key's end.
func TestKeyReadsStayInTheKey(t *testing.T) {
	page := syscall.Getpagesize()
	mem, err := syscall.Mmap(-1, 0, 2*page, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_ANON|syscall.MAP_PRIVATE)
	if err != nil {
		t.Skip("mmap:", err)
	}
	t.Cleanup(func() { syscall.Munmap(mem) })
	for i := range page {
		mem[i] = byte('a' + i%26)
	}
	if err := syscall.Mprotect(mem[page:], syscall.PROT_NONE); err != nil {
		t.Skip("mprotect:", err)
	}
	atEnd := func(n int) string { return unsafe.String(&mem[page-n], n) } // the last n bytes before the guard
	for _, n := range append(keyLengths, 128, 200) {
		key := atEnd(n)
		b := newBuilder(1, false)
		b.count(key)
		b.add(key).set(`1`)
		x, err := b.finish()
		if err != nil {
			t.Fatal(err)
		}
		s := &Snapshot{index: x}
		if _, ok := s.Get(key); !ok {
			t.Errorf("length %d: Get of the key at a page's end failed", n)
		}
		if _, ok := s.Get(strings.Clone(key)); !ok { // a copy against the key at the end
			t.Errorf("length %d: Get of a copy failed", n)
		}
	}
}
