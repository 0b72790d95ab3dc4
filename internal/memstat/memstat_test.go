package memstat

import (
	"runtime"
	"runtime/debug"
	"testing"
)

var sink []byte

// TestIdleHeapCountsGarbage: garbage the last GC has not seen is idle, so
// a burst's leftovers are returned even when no GC runs after it; once
// returned, nothing is idle.
func TestIdleHeapCountsGarbage(t *testing.T) {
	defer debug.SetGCPercent(debug.SetGCPercent(-1)) // no GC but ours
	runtime.GC()
	for range 64 {
		sink = make([]byte, 1<<20)
	}
	sink = nil
	if got := idleHeap(); got < 60<<20 {
		t.Fatalf("idle heap %d MiB after dropping 64 MiB, want at least 60", got>>20)
	}
	debug.FreeOSMemory()
	if got := idleHeap(); got > 16<<20 {
		t.Fatalf("idle heap %d MiB after FreeOSMemory, want under 16", got>>20)
	}
}
