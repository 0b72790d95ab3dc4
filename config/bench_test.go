package config

import (
	"encoding/json"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/holdfast-dev/holdfast/cache"
	"github.com/holdfast-dev/holdfast/transport"
)

func benchNamespace(b testing.TB, keys int) (*Namespace, []string) {
	b.Helper()
	raw := make(map[string]json.RawMessage, keys)
	names := make([]string, keys)
	for i := range keys {
		names[i] = "service/key-" + strconv.Itoa(i)
		raw[names[i]] = json.RawMessage(strconv.Itoa(i))
	}
	snap, err := cache.Build("bench", "store", 1, raw)
	if err != nil {
		b.Fatal(err)
	}
	c := &Client{opts: defaultOptions()}
	n := newNamespace(c, "bench", nsOptions{}, c.opts.logger)
	n.applied, n.storeID = snap, "store"
	n.serving.Store(snap)
	return n, names
}

// BenchmarkGet compares Namespace.Get and Namespace.Int on a 1,000-key
// namespace with the least a lock-free read can cost: an
// atomic.Pointer[map[string]string] load and lookup ("Baseline").
func BenchmarkGet(b *testing.B) {
	n, names := benchNamespace(b, 1000)
	base := make(map[string]string, len(names))
	for i, k := range names {
		base[k] = strconv.Itoa(i)
	}
	var baseline atomic.Pointer[map[string]string]
	baseline.Store(&base)

	b.Run("Baseline", func(b *testing.B) {
		b.ReportAllocs()
		var sink int
		for i := 0; b.Loop(); i++ {
			v := (*baseline.Load())[names[i%len(names)]]
			sink += len(v)
		}
		_ = sink
	})
	b.Run("Get", func(b *testing.B) {
		b.ReportAllocs()
		var sink int
		for i := 0; b.Loop(); i++ {
			v, _ := n.Get(names[i%len(names)])
			sink += int(v.Kind())
		}
		_ = sink
	})
	b.Run("Int", func(b *testing.B) {
		b.ReportAllocs()
		var sink int
		for i := 0; b.Loop(); i++ {
			sink += n.Int(names[i%len(names)], -1)
		}
		_ = sink
	})
	b.Run("BaselineParallel", func(b *testing.B) {
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			var sink, i int
			for ; pb.Next(); i++ {
				sink += len((*baseline.Load())[names[i%len(names)]])
			}
			_ = sink
		})
	})
	b.Run("GetParallel", func(b *testing.B) {
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			var sink, i int
			for ; pb.Next(); i++ {
				v, _ := n.Get(names[i%len(names)])
				sink += int(v.Kind())
			}
			_ = sink
		})
	})
	b.Run("IntParallel", func(b *testing.B) {
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			var sink, i int
			for ; pb.Next(); i++ {
				sink += n.Int(names[i%len(names)], -1)
			}
			_ = sink
		})
	})
}

// BenchmarkApplyOneKey applies a one-key change set through the sync loop's
// handler (decode, copy, swap, queue the callback item) to namespaces of
// 1,000 and 100,000 keys.
func BenchmarkApplyOneKey(b *testing.B) {
	for _, keys := range []int{1000, 100000} {
		b.Run(strconv.Itoa(keys), func(b *testing.B) {
			n, names := benchNamespace(b, keys)
			b.ReportAllocs()
			rev := int64(1)
			for b.Loop() {
				rev++
				ev := transport.Event{Change: &transport.ChangeSet{
					Namespace: "bench", StoreID: "store", Revision: rev, PrevRevision: rev - 1, CommittedAt: time.Now(),
					Puts: map[string]json.RawMessage{names[int(rev)%keys]: json.RawMessage(strconv.FormatInt(rev, 10))},
				}}
				if err := n.handle(ev); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkGetRatio times blocks of 1,000 baseline lookups and 1,000 Get
// and Int calls alternately in one loop, so that the machine's noise hits
// all three alike, and reports the fastest block of each as a ratio to the
// fastest baseline block (get/base, int/base): the minimum is the estimate
// least disturbed by other work on a shared machine.
func BenchmarkGetRatio(b *testing.B) {
	n, names := benchNamespace(b, 1000)
	base := make(map[string]string, len(names))
	for i, k := range names {
		base[k] = strconv.Itoa(i)
	}
	var baseline atomic.Pointer[map[string]string]
	baseline.Store(&base)
	minBase, minGet, minInt := time.Duration(1<<62), time.Duration(1<<62), time.Duration(1<<62)
	var sink int
	b.ReportAllocs()
	for b.Loop() {
		t0 := time.Now()
		for _, k := range names {
			sink += len((*baseline.Load())[k])
		}
		t1 := time.Now()
		for _, k := range names {
			v, _ := n.Get(k)
			sink += int(v.Kind())
		}
		t2 := time.Now()
		for _, k := range names {
			sink += n.Int(k, -1)
		}
		t3 := time.Now()
		minBase, minGet, minInt = min(minBase, t1.Sub(t0)), min(minGet, t2.Sub(t1)), min(minInt, t3.Sub(t2))
	}
	_ = sink
	b.ReportMetric(float64(minGet)/float64(minBase), "get/base")
	b.ReportMetric(float64(minInt)/float64(minBase), "int/base")
	b.ReportMetric(float64(minBase)/float64(len(names)), "base-ns/lookup")
}

// BenchmarkGetRatioParallel is BenchmarkGetRatio with every core reading at
// once (RunParallel); each goroutine keeps its fastest blocks.
func BenchmarkGetRatioParallel(b *testing.B) {
	n, names := benchNamespace(b, 1000)
	base := make(map[string]string, len(names))
	for i, k := range names {
		base[k] = strconv.Itoa(i)
	}
	var baseline atomic.Pointer[map[string]string]
	baseline.Store(&base)
	var mu sync.Mutex
	minBase, minGet, minInt := time.Duration(1<<62), time.Duration(1<<62), time.Duration(1<<62)
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		lBase, lGet, lInt := time.Duration(1<<62), time.Duration(1<<62), time.Duration(1<<62)
		var sink int
		for pb.Next() {
			t0 := time.Now()
			for _, k := range names {
				sink += len((*baseline.Load())[k])
			}
			t1 := time.Now()
			for _, k := range names {
				v, _ := n.Get(k)
				sink += int(v.Kind())
			}
			t2 := time.Now()
			for _, k := range names {
				sink += n.Int(k, -1)
			}
			t3 := time.Now()
			lBase, lGet, lInt = min(lBase, t1.Sub(t0)), min(lGet, t2.Sub(t1)), min(lInt, t3.Sub(t2))
		}
		_ = sink
		mu.Lock()
		minBase, minGet, minInt = min(minBase, lBase), min(minGet, lGet), min(minInt, lInt)
		mu.Unlock()
	})
	b.ReportMetric(float64(minGet)/float64(minBase), "get/base")
	b.ReportMetric(float64(minInt)/float64(minBase), "int/base")
}
