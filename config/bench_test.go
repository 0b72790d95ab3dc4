package config

import (
	"encoding/json"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/holdfast-dev/holdfast/internal/snapshot"
	"github.com/holdfast-dev/holdfast/internal/syncer"
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
	snap, err := snapshot.Build("bench", "store", 1, raw)
	if err != nil {
		b.Fatal(err)
	}
	c := &Client{opts: defaultOptions()}
	n := newNamespace(c, "bench", nsOptions{}, c.opts.logger)
	n.syncer = syncer.New(syncer.Config{Namespace: "bench", Sink: nsSink{n}, ClientID: "bench-client"}) // as a real client: rollouts evaluated
	if err := n.syncer.Seed(snap, 1); err != nil {
		b.Fatal(err)
	}
	n.applied = snap
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
				if err := n.syncer.Handle(ev); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// ratioRig is what the ratio benchmarks share: a 1,000-key namespace and
// the baseline, an atomic.Pointer[map[string]string] of the same keys.
type ratioRig struct {
	n        *Namespace
	names    []string
	baseline atomic.Pointer[map[string]string]
}

func newRatioRig(b *testing.B) *ratioRig {
	n, names := benchNamespace(b, 1000)
	base := make(map[string]string, len(names))
	for i, k := range names {
		base[k] = strconv.Itoa(i)
	}
	r := &ratioRig{n: n, names: names}
	r.baseline.Store(&base)
	return r
}

// blocks times one block of 1,000 lookups of each kind, back to back, so
// that the machine's noise hits all three alike.
func (r *ratioRig) blocks(sink *int) (base, get, intGet time.Duration) {
	t0 := time.Now()
	for _, k := range r.names {
		*sink += len((*r.baseline.Load())[k])
	}
	t1 := time.Now()
	for _, k := range r.names {
		v, _ := r.n.Get(k)
		*sink += int(v.Kind())
	}
	t2 := time.Now()
	for _, k := range r.names {
		*sink += r.n.Int(k, -1)
	}
	t3 := time.Now()
	return t1.Sub(t0), t2.Sub(t1), t3.Sub(t2)
}

// fastest keeps the fastest block of each kind: the estimate least
// disturbed by other work on a shared machine.
type fastest struct{ base, get, intGet time.Duration }

func newFastest() fastest { return fastest{1 << 62, 1 << 62, 1 << 62} }

func (f *fastest) add(base, get, intGet time.Duration) {
	f.base, f.get, f.intGet = min(f.base, base), min(f.get, get), min(f.intGet, intGet)
}

func (f fastest) report(b *testing.B) {
	b.ReportMetric(float64(f.get)/float64(f.base), "get/base")
	b.ReportMetric(float64(f.intGet)/float64(f.base), "int/base")
	b.ReportMetric(float64(f.base)/1000, "base-ns/lookup")
}

// BenchmarkGetRatio reports Get and Int as ratios to the baseline
// (get/base, int/base), from the fastest of many interleaved blocks.
func BenchmarkGetRatio(b *testing.B) {
	r := newRatioRig(b)
	f := newFastest()
	var sink int
	b.ReportAllocs()
	for b.Loop() {
		f.add(r.blocks(&sink))
	}
	f.report(b)
}

// BenchmarkGetRatioParallel is BenchmarkGetRatio with every core reading at
// once (RunParallel); each goroutine keeps its fastest blocks.
func BenchmarkGetRatioParallel(b *testing.B) {
	r := newRatioRig(b)
	var mu sync.Mutex
	f := newFastest()
	b.ReportAllocs()
	b.ResetTimer() // the rig's setup is no part of a read
	b.RunParallel(func(pb *testing.PB) {
		local := newFastest()
		var sink int
		for pb.Next() {
			local.add(r.blocks(&sink))
		}
		mu.Lock()
		f.add(local.base, local.get, local.intGet)
		mu.Unlock()
	})
	f.report(b)
}
