package streammux

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/holdfast-dev/holdfast/transport"
)

// fastEvents is how many changes of "fast" the burst carries: well within
// its queue.
const fastEvents = 100

// burstSource's stream sends n changes of "slow" interleaved with
// fastEvents of "fast", then waits for ctx.
type burstSource struct {
	transport.Source
	n    int
	done chan struct{} // closed after the burst
}

func (b burstSource) WatchStream(ctx context.Context, req transport.StreamRequest, handle func(transport.StreamEvent) error) error {
	if len(req.Namespaces) < 2 {
		<-ctx.Done() // until both have joined (a restart brings them)
		return ctx.Err()
	}
	for i := 1; i <= b.n; i++ {
		for _, ns := range []string{"slow", "fast"} {
			if ns == "fast" && i > fastEvents {
				continue
			}
			rev := int64(2*i - 1)
			if ns == "fast" {
				rev++
			}
			if err := handle(transport.StreamEvent{Change: &transport.ChangeSet{Namespace: ns, Revision: rev, StoreID: "s"}}); err != nil {
				return err
			}
		}
	}
	close(b.done)
	<-ctx.Done()
	return ctx.Err()
}

// TestStreamMemberOverflowEndsOnlyItsWatch: a namespace whose queue
// overflows has its Watch ended with errMemberOverflow (after what was
// queued); the others get every event, never blocked.
func TestStreamMemberOverflowEndsOnlyItsWatch(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	n := memberQueue + 50
	burst := make(chan struct{})
	m := New(ctx, burstSource{n: n, done: burst}, slog.New(slog.DiscardHandler))
	defer func() { cancel(); m.Wait() }()

	release := make(chan struct{})
	var releaseOnce sync.Once
	unblock := func() { releaseOnce.Do(func() { close(release) }) }
	defer unblock() // a failing test still lets slow's handler return
	var wg sync.WaitGroup
	var slowErr, fastErr error
	var slowGot, fastGot int
	wg.Add(2)
	go func() {
		defer wg.Done()
		_, slowErr = m.watch(ctx, transport.WatchRequest{Namespace: "slow"}, func(transport.Event) error {
			<-release
			slowGot++
			return nil
		})
	}()
	fastCtx, fastCancel := context.WithCancel(ctx)
	fastDone := make(chan struct{})
	go func() {
		defer wg.Done()
		_, fastErr = m.watch(fastCtx, transport.WatchRequest{Namespace: "fast"}, func(transport.Event) error {
			if fastGot++; fastGot == fastEvents {
				close(fastDone)
				fastCancel()
			}
			return nil
		})
	}()
	select {
	case <-fastDone:
	case <-time.After(20 * time.Second):
		m.mu.Lock()
		var st []any
		for ns, mb := range m.members {
			st = append(st, ns, len(mb.queue), mb.cursor, mb.gone, mb.attached)
		}
		t.Logf("attempts %d, members %v", m.attempts, st)
		m.mu.Unlock()
		t.Fatal("fast never got its events: held up by slow?")
	}
	select {
	case <-burst:
	case <-time.After(20 * time.Second):
		t.Fatal("the burst never ended: the stream held up by slow?")
	}
	unblock()
	wg.Wait()
	if fastGot != fastEvents || !errors.Is(fastErr, context.Canceled) {
		t.Errorf("fast: %d events, %v; want %d, canceled", fastGot, fastErr, fastEvents)
	}
	if !errors.Is(slowErr, errMemberOverflow) || slowGot > memberQueue+1 || slowGot == 0 {
		t.Errorf("slow: %d events, %v; want at most %d then errMemberOverflow", slowGot, slowErr, memberQueue+1)
	}
}
