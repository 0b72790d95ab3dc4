package cachedir

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"

	"go.uber.org/goleak"
)

func smallRecord(tb testing.TB, ns string, rev int64) *Record {
	tb.Helper()
	return testRecord(tb, ns, rev, 2, 10)
}

func TestPersisterCoalesces(t *testing.T) {
	defer goleak.VerifyNone(t)
	d := openTestDir(t)
	started := make(chan struct{})
	release := make(chan struct{})
	var writes []int64
	var mu sync.Mutex
	p := NewPersister(d, func(rec *Record, err error) {
		if err != nil {
			t.Errorf("write of %d: %v", rec.Revision, err)
		}
		mu.Lock()
		writes = append(writes, rec.Revision)
		n := len(writes)
		mu.Unlock()
		if n == 1 {
			close(started)
			<-release // hold the writer while the rest arrive
		}
	})
	defer p.Close()

	recs := make([]*Record, 1000)
	for i := range recs {
		recs[i] = smallRecord(t, "ns", int64(i+1))
	}
	p.Submit(recs[0])
	<-started
	for _, r := range recs[1:] {
		p.Submit(r) // never blocks, though the writer is stuck
	}
	close(release)
	if err := p.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	got := append([]int64(nil), writes...)
	mu.Unlock()
	if len(got) != 2 || got[0] != 1 || got[1] != 1000 {
		t.Fatalf("writes %v, want [1 1000]", got)
	}
	if rec := mustLoad(t, d, "ns"); rec.Revision != 1000 {
		t.Fatalf("file holds revision %d, want 1000", rec.Revision)
	}
}

func TestPersisterBurstWritesFewer(t *testing.T) {
	defer goleak.VerifyNone(t)
	d := openTestDir(t)
	var writes atomic.Int64
	p := NewPersister(d, func(*Record, error) { writes.Add(1) })
	recs := make([]*Record, 1000)
	for i := range recs {
		recs[i] = smallRecord(t, "ns", int64(i+1))
	}
	for _, r := range recs {
		p.Submit(r)
	}
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	// Each write fsyncs twice, while a Submit is a map store: the writer
	// cannot keep up with the loop, so most submissions coalesce.
	if n := writes.Load(); n < 1 || n > 500 {
		t.Fatalf("%d writes for 1000 submissions", n)
	}
	if rec := mustLoad(t, d, "ns"); rec.Revision != 1000 {
		t.Fatalf("file holds revision %d, want 1000 (the last submitted)", rec.Revision)
	}
}

func TestPersisterManyNamespaces(t *testing.T) {
	defer goleak.VerifyNone(t)
	d := openTestDir(t)
	p := NewPersister(d, nil)
	defer p.Close()
	var wg sync.WaitGroup
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ns := fmt.Sprintf("ns-%d", g)
			for rev := int64(1); rev <= 50; rev++ {
				p.Submit(testRecord(t, ns, rev, 1, 10))
			}
		}()
	}
	wg.Wait()
	if err := p.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	for g := 0; g < 8; g++ {
		if rec := mustLoad(t, d, fmt.Sprintf("ns-%d", g)); rec.Revision != 50 {
			t.Errorf("ns-%d: revision %d, want 50", g, rec.Revision)
		}
	}
}

func TestPersisterFlush(t *testing.T) {
	defer goleak.VerifyNone(t)
	d := openTestDir(t)
	p := NewPersister(d, nil)
	defer p.Close()
	if err := p.Flush(context.Background()); err != nil {
		t.Fatalf("flush of nothing: %v", err)
	}
	for rev := int64(1); rev <= 20; rev++ {
		p.Submit(smallRecord(t, "ns", rev))
		if err := p.Flush(context.Background()); err != nil {
			t.Fatal(err)
		}
		if got := mustLoad(t, d, "ns").Revision; got != rev {
			t.Fatalf("after flush: revision %d, want %d", got, rev)
		}
	}
}

func TestPersisterFlushContext(t *testing.T) {
	defer goleak.VerifyNone(t)
	d := openTestDir(t)
	release := make(chan struct{})
	p := NewPersister(d, func(*Record, error) { <-release })
	p.Submit(smallRecord(t, "ns", 1))
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := p.Flush(ctx); !errors.Is(err, context.Canceled) {
		t.Fatalf("flush with a cancelled context while the write hangs: %v", err)
	}
	close(release)
	if err := p.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
}

func TestPersisterCloseFlushesPending(t *testing.T) {
	defer goleak.VerifyNone(t)
	d := openTestDir(t)
	started := make(chan struct{})
	release := make(chan struct{})
	var calls atomic.Int64
	p := NewPersister(d, func(rec *Record, err error) {
		if calls.Add(1) == 1 {
			close(started)
			<-release
		}
	})
	p.Submit(smallRecord(t, "ns", 1))
	<-started
	p.Submit(smallRecord(t, "ns", 2)) // pending while the first write hangs
	p.Submit(smallRecord(t, "other", 7))
	closed := make(chan error)
	go func() { closed <- p.Close() }()
	close(release)
	if err := <-closed; err != nil {
		t.Fatal(err)
	}
	if got := mustLoad(t, d, "ns").Revision; got != 2 {
		t.Fatalf("revision %d after Close, want 2", got)
	}
	if got := mustLoad(t, d, "other").Revision; got != 7 {
		t.Fatalf("other: revision %d after Close, want 7", got)
	}
	// Idempotent, and Submit and Flush after Close are harmless.
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	p.Submit(smallRecord(t, "ns", 3))
	if err := p.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got := mustLoad(t, d, "ns").Revision; got != 2 {
		t.Fatalf("a Submit after Close was written: revision %d", got)
	}
}

func TestPersisterReportsErrors(t *testing.T) {
	defer goleak.VerifyNone(t)
	d := openTestDir(t)
	type result struct {
		rev int64
		err error
	}
	results := make(chan result, 10)
	p := NewPersister(d, func(rec *Record, err error) { results <- result{rec.Revision, err} })
	good := smallRecord(t, "ns", 1)
	bad := smallRecord(t, "ns", 2)
	bad.StoreID = "mismatch" // Encode refuses it
	p.Submit(good)
	if err := p.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	p.Submit(bad)
	if err := p.Flush(context.Background()); err != nil {
		t.Fatalf("write errors go to onResult, not Flush: %v", err)
	}
	if r := <-results; r.rev != 1 || r.err != nil {
		t.Fatalf("first result %+v", r)
	}
	if r := <-results; r.rev != 2 || r.err == nil {
		t.Fatalf("second result %+v, want an error", r)
	}
	if got := mustLoad(t, d, "ns").Revision; got != 1 {
		t.Fatalf("a failed write lost the last good: revision %d", got)
	}
	// Close reports that the newest record of "ns" is not on disk, until
	// a later write of it succeeds.
	ce := p.Close()
	if ce == nil {
		t.Fatal("Close hid that the last write failed")
	}
	if err := p.Close(); err != ce {
		t.Fatalf("second Close returned %v, first %v", err, ce)
	}
	p2 := NewPersister(d, nil)
	p2.Submit(bad)
	if err := p2.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	p2.Submit(smallRecord(t, "ns", 3))
	if err := p2.Close(); err != nil {
		t.Fatalf("the newest write succeeded, yet Close says %v", err)
	}
}

// A record refused because another writer put a newer one on disk goes to
// onResult as ErrSuperseded, and is not a failure for Close.
func TestPersisterSuperseded(t *testing.T) {
	defer goleak.VerifyNone(t)
	d := openTestDir(t)
	other, err := OpenDir(d.path) // another process sharing the directory
	if err != nil {
		t.Fatal(err)
	}
	if err := other.Save(smallRecord(t, "ns", 5)); err != nil {
		t.Fatal(err)
	}
	results := make(chan error, 1)
	p := NewPersister(d, func(_ *Record, err error) { results <- err })
	p.Submit(smallRecord(t, "ns", 3))
	if err := p.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	var se *SupersededError
	if err := <-results; !errors.As(err, &se) || se.Revision != 3 || se.DiskRevision != 5 {
		t.Fatalf("onResult got %v, want a *SupersededError of 3 by 5", err)
	}
	if err := p.Close(); err != nil {
		t.Fatalf("Close after a superseded write: %v", err)
	}
	if got := mustLoad(t, d, "ns").Revision; got != 5 {
		t.Fatalf("file holds revision %d, want 5", got)
	}
}

// A NewHistory record coalesced away passes the flag to the record of the
// same store id that replaced it, which is then written over the old
// history's higher revision; without the flag it would be refused.
func TestPersisterNewHistoryCarries(t *testing.T) {
	for _, flag := range []bool{true, false} {
		t.Run(fmt.Sprintf("flag %v", flag), func(t *testing.T) {
			defer goleak.VerifyNone(t)
			d := openTestDir(t)
			if err := d.Save(smallRecord(t, "ns", 50)); err != nil { // the old history
				t.Fatal(err)
			}
			started := make(chan struct{})
			release := make(chan struct{})
			var mu sync.Mutex
			got := map[*Record]error{}
			p := NewPersister(d, func(rec *Record, err error) {
				mu.Lock()
				got[rec] = err
				mu.Unlock()
				if rec.Namespace == "hold" {
					close(started)
					<-release
				}
			})
			defer p.Close()
			p.Submit(smallRecord(t, "hold", 1))
			<-started // the writer is busy: the next two coalesce
			r1, r2 := smallRecord(t, "ns", 1), smallRecord(t, "ns", 2)
			r1.NewHistory = flag
			p.Submit(r1)
			p.Submit(r2)
			close(release)
			if err := p.Flush(context.Background()); err != nil {
				t.Fatal(err)
			}
			mu.Lock()
			defer mu.Unlock()
			if _, ok := got[r1]; ok {
				t.Fatal("r1 was written, not coalesced")
			}
			err, ok := got[r2]
			if !ok {
				t.Fatal("onResult did not get the caller's r2")
			}
			if r2.NewHistory {
				t.Fatal("the caller's record was modified")
			}
			want := int64(2)
			if !flag {
				want = 50
				if !errors.Is(err, ErrSuperseded) {
					t.Fatalf("r2 without the flag: %v, want ErrSuperseded", err)
				}
			} else if err != nil {
				t.Fatalf("r2 carrying the flag: %v", err)
			}
			if rev := mustLoad(t, d, "ns").Revision; rev != want {
				t.Fatalf("file holds revision %d, want %d", rev, want)
			}
		})
	}
}
