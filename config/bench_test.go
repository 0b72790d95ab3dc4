package config

import (
	"encoding/json"
	"log/slog"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/holdfast-dev/holdfast/cache"
	"github.com/holdfast-dev/holdfast/transport"
)

func benchNamespace(b *testing.B, keys int) (*Namespace, []string) {
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
	n := &Namespace{name: "bench", disp: newDispatcher(slog.New(slog.DiscardHandler), 1024), revWait: make(chan struct{}), ready: make(chan struct{})}
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
				if err := n.handle(ev); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
