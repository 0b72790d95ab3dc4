package config

import (
	"context"
	"log/slog"
	"strconv"
	"sync"
	"testing"
	"time"
)

func TestDispatcherOrderPanicAndStop(t *testing.T) {
	d := newDispatcher(slog.New(slog.DiscardHandler), 1024)
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); d.run(ctx) }()
	defer func() { cancel(); wg.Wait() }()

	var mu sync.Mutex
	var got []int64
	done := make(chan struct{})
	d.subscribe(&subscription{key: "k", onChange: func(ch Change) { panic("boom") }})
	stopped := d.subscribe(&subscription{key: "k", onChange: func(ch Change) { t.Error("stopped callback called") }})
	stopped()
	stopped() // idempotent
	d.subscribe(&subscription{key: "k", onChange: func(ch Change) {
		mu.Lock()
		got = append(got, ch.Revision)
		n := len(got)
		mu.Unlock()
		if n == 100 {
			close(done)
		}
	}})
	for rev := int64(1); rev <= 100; rev++ {
		d.enqueue(item{changes: &ChangeSet{Revision: rev, Changes: []Change{{Key: "k", Revision: rev}}}})
	}
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("callbacks not delivered")
	}
	for i, rev := range got {
		if rev != int64(i+1) {
			t.Fatalf("delivery %d has revision %d: out of order", i, rev)
		}
	}
	if p := d.panics.Load(); p != 100 {
		t.Errorf("panics = %d; want 100", p)
	}
}

func TestDispatcherOverflowCoalesces(t *testing.T) {
	const limit = 8
	d := newDispatcher(slog.New(slog.DiscardHandler), limit)
	v := func(n int) Value {
		return testValue(t, strconv.Itoa(n))
	}
	// No goroutine runs yet: everything queues, and must stay bounded.
	for rev := 1; rev <= 1000; rev++ {
		key := []string{"a", "b", "c"}[rev%3]
		d.enqueue(item{changes: &ChangeSet{Revision: int64(rev), PrevRevision: int64(rev - 1),
			Changes: []Change{{Key: key, Old: v(rev - 1), New: v(rev), Revision: int64(rev)}}}})
	}
	if n := len(d.queue); n > limit {
		t.Fatalf("queue length %d exceeds limit %d", n, limit)
	}
	if d.coalesced.Load() == 0 {
		t.Fatal("overflow did not coalesce")
	}
	// Each key's newest value is kept and revision order holds.
	newest := map[string]int64{}
	var last int64
	for _, it := range d.queue {
		for _, ch := range it.changes.Changes {
			if ch.Revision < last {
				t.Fatalf("revision %d after %d", ch.Revision, last)
			}
			last = ch.Revision
			newest[ch.Key] = ch.Revision
		}
	}
	if newest["a"] != 999 || newest["b"] != 1000 || newest["c"] != 998 {
		t.Errorf("newest revisions = %v; want a:999 b:1000 c:998", newest)
	}
}
