// Package memstat reads what this process holds in memory, for the
// benchmarks that report memory per connection or per client, and gives
// a server's idle heap back to the OS (ReleaseIdle).
package memstat

import (
	"context"
	"errors"
	"os"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"strconv"
	"strings"
	"time"
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
	n, _ := ProcessRSS("self")
	return n
}

// ProcessRSS reads the resident set of process pid ("self", or a
// number) from /proc.
func ProcessRSS(pid string) (uint64, error) {
	data, err := os.ReadFile("/proc/" + pid + "/status")
	if err != nil {
		return 0, err
	}
	for line := range strings.Lines(string(data)) {
		if rest, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, err := strconv.ParseUint(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			return kb << 10, err
		}
	}
	return 0, errors.New("memstat: no VmRSS in /proc/" + pid + "/status")
}

// ReleaseIdle returns the heap's free memory to the OS, every interval,
// whenever more than min bytes of it are kept: until ctx ends. The Go
// runtime keeps freed heap memory for reuse and gives it back slowly (it
// keeps about as much as the heap's goal), so a burst that grew the heap
// (a server taking hundreds of large publishes) would leave the process's
// resident set at the burst's peak long after. debug.FreeOSMemory costs a
// GC, hence min and interval.
func ReleaseIdle(ctx context.Context, interval time.Duration, min uint64) {
	t := time.NewTicker(interval)
	defer t.Stop()
	s := []metrics.Sample{{Name: "/memory/classes/heap/free:bytes"}}
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		metrics.Read(s)
		if s[0].Value.Kind() == metrics.KindUint64 && s[0].Value.Uint64() > min {
			debug.FreeOSMemory()
		}
	}
}
