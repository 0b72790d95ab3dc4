package acks

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/holdfast-dev/holdfast/internal/syncer"
	"github.com/holdfast-dev/holdfast/internal/testutil"
	"github.com/holdfast-dev/holdfast/transport"
)

// picky is an upstream that refuses, as malformed, every batch holding an
// ack of client "bad" (whatever its status), and records the others.
type picky struct {
	mu      sync.Mutex
	got     []transport.Ack
	batches int
}

func (p *picky) Ack(ctx context.Context, a transport.Ack) error {
	return p.AckRelayed(ctx, "", []transport.Ack{a})
}

func (p *picky) AckRelayed(_ context.Context, _ string, acks []transport.Ack) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.batches++
	if slices.ContainsFunc(acks, func(a transport.Ack) bool { return a.ClientID == "bad" }) {
		return fmt.Errorf("400: %w", transport.ErrBadRequest)
	}
	p.got = append(p.got, acks...)
	return nil
}

func (p *picky) clients() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []string
	for _, a := range p.got {
		out = append(out, a.ClientID)
	}
	slices.Sort(out)
	return out
}

// A batch refused as malformed for one ack's sake delivers the others:
// only the refused ack is dropped.
func TestQueueDropsOnlyTheAckTheUpstreamRefuses(t *testing.T) {
	up := &picky{}
	q := New(up, slog.New(slog.DiscardHandler), "relay-1")
	ctx, cancel := context.WithCancel(context.Background())
	q.Start(ctx, syncer.Backoff{Initial: time.Millisecond, Max: 10 * time.Millisecond})
	defer func() { cancel(); q.Wait() }()
	for _, c := range []string{"c1", "c2", "bad", "c3", "c4", "c5"} {
		q.Add(transport.Ack{ClientID: c, Namespace: "app", Revision: 1, Status: transport.AckApplied})
	}
	want := []string{"c1", "c2", "c3", "c4", "c5"}
	if !testutil.Wait(5*time.Second, func() bool { return slices.Equal(up.clients(), want) }) {
		t.Fatalf("delivered %v, want %v", up.clients(), want)
	}
	up.mu.Lock()
	defer up.mu.Unlock()
	if up.batches > 8 {
		t.Errorf("%d batches for 6 acks", up.batches)
	}
}

// A report of a kind this version does not know (a later protocol's)
// goes in a batch of its own, after the others: an upstream that refuses
// it keeps the others. A would-nack is known: it goes with the others.
func TestQueueSendsUnknownReportsApart(t *testing.T) {
	up := &recorder{}
	q := New(up, slog.New(slog.DiscardHandler), "relay-1")
	ctx, cancel := context.WithCancel(context.Background())
	q.Start(ctx, syncer.Backoff{Initial: time.Millisecond, Max: 10 * time.Millisecond})
	defer func() { cancel(); q.Wait() }()
	q.Add(transport.Ack{ClientID: "c1", Namespace: "app", Revision: 1, Status: "stage_seen"})
	q.Add(transport.Ack{ClientID: "c2", Namespace: "app", Revision: 1, Status: transport.AckApplied})
	q.Add(transport.Ack{ClientID: "c3", Namespace: "app", Revision: 1, Status: transport.AckRejected})
	q.Add(transport.Ack{ClientID: "c4", Namespace: "app", Revision: 1, Status: transport.AckWouldReject, Rollout: "r1"})
	var b [][]transport.Ack
	if !testutil.Wait(5*time.Second, func() bool {
		up.mu.Lock()
		b = slices.Clone(up.batches)
		up.mu.Unlock()
		return len(b) == 2
	}) {
		t.Fatalf("batches %v", b)
	}
	if len(b[0]) != 3 || len(b[1]) != 1 || b[1][0].Status != "stage_seen" {
		t.Fatalf("batches %v, want the known ones, then the other", b)
	}
}

type recorder struct {
	mu      sync.Mutex
	batches [][]transport.Ack
}

func (r *recorder) Ack(ctx context.Context, a transport.Ack) error {
	return r.AckRelayed(ctx, "", []transport.Ack{a})
}

func (r *recorder) AckBatch(ctx context.Context, acks []transport.Ack) error {
	return r.AckRelayed(ctx, "", acks)
}

func (r *recorder) AckRelayed(_ context.Context, _ string, acks []transport.Ack) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.batches = append(r.batches, slices.Clone(acks))
	return nil
}

// down is an upstream that is down.
type down struct{}

func (down) Ack(context.Context, transport.Ack) error { return errors.New("down") }

// What waits is bounded however many clients report (the queue not yet
// sending, as while its upstream is down): a relay's downstream, or a
// crash-looping fleet whose every process is a new client id, cannot make
// it grow without bound.
func TestQueueBoundsWhatWaits(t *testing.T) {
	q := New(down{}, slog.New(slog.DiscardHandler), "relay-1")
	for i := 0; i < maxPending+1000; i++ {
		q.Add(transport.Ack{ClientID: "c" + strconv.Itoa(i), Namespace: "app", Revision: 1, Status: transport.AckApplied})
	}
	q.mu.Lock()
	n := len(q.pending)
	q.mu.Unlock()
	if n > maxPending {
		t.Fatalf("%d acks wait, more than %d", n, maxPending)
	}
}

// Past its bound, each outcome the queue drops, new or put back after a
// failed send, is told (OnDrop) with its namespace: a relay counts them
// lost for its upstream to know.
func TestQueueTellsWhatItDrops(t *testing.T) {
	q := New(down{}, slog.New(slog.DiscardHandler), "relay-1")
	q.max = 4
	dropped := make(map[string]int)
	q.OnDrop(func(ns string) { dropped[ns]++ })
	for i := range 6 {
		q.Add(transport.Ack{ClientID: "c" + strconv.Itoa(i), Namespace: "app", Revision: 1, Status: transport.AckApplied})
	}
	q.Add(transport.Ack{ClientID: "c0", Namespace: "app", Revision: 2, Status: transport.AckApplied}) // replaces: no drop
	q.Add(transport.Ack{ClientID: "c9", Namespace: "web", Revision: 1, Status: transport.AckRejected, Error: "bad"})
	if want := map[string]int{"app": 2, "web": 1}; !maps.Equal(dropped, want) {
		t.Fatalf("dropped %v, want %v", dropped, want)
	}
	// A failed send's outcomes put back into a queue filled meanwhile.
	failed := q.take()
	for i := range 4 {
		q.Add(transport.Ack{ClientID: "n" + strconv.Itoa(i), Namespace: "web", Revision: 1, Status: transport.AckApplied})
	}
	q.requeue(failed)
	if want := map[string]int{"app": 6, "web": 1}; !maps.Equal(dropped, want) {
		t.Fatalf("after a requeue: dropped %v, want %v", dropped, want)
	}
}

// A client's plain ack waits in the wide window, after the publish has
// reached the fleet; a nack, or any report while a rollout runs, goes in
// the narrow one and takes what else waits along, in one batch.
func TestQueueSpreadsPlainAcksWider(t *testing.T) {
	for _, tc := range []struct {
		name   string
		report func(q *Queue)
		prompt bool
	}{
		{"plain ack", func(q *Queue) { q.Report("c1", "app", 1, "", false, nil) }, false},
		{"nack", func(q *Queue) { q.Report("c1", "app", 1, "", false, errors.New("bad")) }, true},
		{"ack while a rollout runs", func(q *Queue) { q.Report("c1", "app", 1, "", true, nil) }, true},
		{"member's ack", func(q *Queue) { q.Report("c1", "app", 1, "r1", true, nil) }, true},
		{"would-nack", func(q *Queue) {
			q.Add(transport.Ack{ClientID: "c1", Namespace: "app", Revision: 1, Status: transport.AckWouldReject, Rollout: "r1"})
		}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			up := &recorder{}
			q := New(up, slog.New(slog.DiscardHandler), "")
			q.Report("c1", "other", 7, "", false, nil) // a plain ack of another namespace, waiting
			start := time.Now()
			tc.report(q)
			q.mu.Lock()
			wait := q.due.Sub(start)
			q.mu.Unlock()
			if tc.prompt && wait > ackDelayMax || !tc.prompt && wait < ackDelayPlainMin {
				t.Fatalf("due in %v (prompt %v)", wait, tc.prompt)
			}
			ctx, cancel := context.WithCancel(context.Background())
			q.Start(ctx, syncer.Backoff{Initial: time.Millisecond, Max: 10 * time.Millisecond})
			defer func() { cancel(); q.Wait() }()
			var b [][]transport.Ack
			if !testutil.Wait(time.Until(start.Add(5*time.Second)), func() bool {
				up.mu.Lock()
				b = slices.Clone(up.batches)
				up.mu.Unlock()
				return len(b) > 0
			}) {
				t.Fatal("nothing delivered")
			}
			took := time.Since(start)
			if len(b) != 1 || len(b[0]) != 2 {
				t.Fatalf("batches %v, want both reports in one", b)
			}
			// Lower bounds only: a busy machine may be late, never early.
			if !tc.prompt && took < ackDelayPlainMin {
				t.Errorf("a plain ack went after %v, before the wide window (%v)", took, ackDelayPlainMin)
			}
		})
	}
}

// flaky fails its first send, after letting during() run (an outcome that
// comes while a send is under way), and records the later ones.
type flaky struct {
	mu     sync.Mutex
	sends  int
	during func()
	got    map[string]int64 // client → revision delivered last
}

func (f *flaky) Ack(ctx context.Context, a transport.Ack) error {
	return f.AckRelayed(ctx, "", []transport.Ack{a})
}

func (f *flaky) AckRelayed(_ context.Context, _ string, acks []transport.Ack) error {
	f.mu.Lock()
	f.sends++
	first := f.sends == 1
	f.mu.Unlock()
	if first {
		f.during()
		return errors.New("upstream down")
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, a := range acks {
		f.got[a.ClientID] = a.Revision
	}
	return nil
}

func (f *flaky) delivered() map[string]int64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	return maps.Clone(f.got)
}

// A batch that failed goes again, each namespace with its newest outcome:
// one that came during the failed send wins over the one that failed, and
// the others of the batch are not lost (the queue reuses the batch's
// buffer, so what it puts back must be copies).
func TestQueueRetriesTheNewestAfterAFailure(t *testing.T) {
	up := &flaky{got: map[string]int64{}}
	q := New(up, slog.New(slog.DiscardHandler), "relay-1")
	up.during = func() {
		q.Add(transport.Ack{ClientID: "c1", Namespace: "app", Revision: 2, Status: transport.AckApplied})
	}
	ctx, cancel := context.WithCancel(context.Background())
	q.Start(ctx, syncer.Backoff{Initial: time.Millisecond, Max: 10 * time.Millisecond})
	defer func() { cancel(); q.Wait() }()
	for _, c := range []string{"c1", "c2", "c3"} {
		q.Add(transport.Ack{ClientID: c, Namespace: "app", Revision: 1, Status: transport.AckApplied})
	}
	want := map[string]int64{"c1": 2, "c2": 1, "c3": 1}
	var got map[string]int64
	if !testutil.Wait(5*time.Second, func() bool { got = up.delivered(); return maps.Equal(got, want) }) {
		t.Fatalf("delivered %v, want %v", got, want)
	}
}
