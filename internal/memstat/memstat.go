// Package memstat reads what this process holds in memory, for the
// benchmarks that report memory per connection or per client.
package memstat

import (
	"os"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"strconv"
	"strings"
)

// Sample is the process's memory at one moment.
type Sample struct {
	Heap       uint64 // the live heap
	Stacks     uint64 // goroutine stacks
	Goroutines uint64
	RSS        uint64 // resident set (0 where /proc is not)
}

// Now returns the process's memory after a GC, and after freed memory
// went back to the OS (for RSS).
func Now() Sample {
	runtime.GC()
	debug.FreeOSMemory()
	s := []metrics.Sample{
		{Name: "/gc/heap/live:bytes"},
		{Name: "/memory/classes/heap/stacks:bytes"},
		{Name: "/sched/goroutines:goroutines"},
	}
	metrics.Read(s)
	return Sample{Heap: s[0].Value.Uint64(), Stacks: s[1].Value.Uint64(), Goroutines: s[2].Value.Uint64(), RSS: vmRSS()}
}

func vmRSS() uint64 {
	data, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	for line := range strings.Lines(string(data)) {
		if rest, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, _ := strconv.ParseUint(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			return kb << 10
		}
	}
	return 0
}
