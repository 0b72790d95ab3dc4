package control

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/holdfast-dev/holdfast/transport/etcd"
)

// DefaultAuditRetention is how many audit records a namespace keeps.
const DefaultAuditRetention = 100_000

// trimmer keeps each namespace's audit log to its retention: every
// retention/100 publishes to a namespace (at least one), it folds the
// records beyond it into the namespace's base, in a goroutine of its own
// so that no publish waits for it. Several servers may trim one
// namespace at once: TrimAudit's compare-and-set lets one of them win.
type trimmer struct {
	src    *etcd.Source
	log    *slog.Logger
	keep   int
	every  int
	queue  chan string // bounded: a trim skipped now is done at a later publish
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu    sync.Mutex
	count map[string]int // publishes since the namespace's last trim
}

func newTrimmer(src *etcd.Source, log *slog.Logger, keep int) *trimmer {
	ctx, cancel := context.WithCancel(context.Background())
	t := &trimmer{src: src, log: log, keep: keep, every: max(1, keep/100), queue: make(chan string, 64),
		cancel: cancel, count: make(map[string]int)}
	t.wg.Add(1)
	go func() { defer t.wg.Done(); t.run(ctx) }()
	return t
}

// published counts a publish to ns, and queues a trim when it is due.
func (t *trimmer) published(ns string) {
	t.mu.Lock()
	t.count[ns]++
	due := t.count[ns] >= t.every
	if due {
		t.count[ns] = 0
	}
	t.mu.Unlock()
	if due {
		select {
		case t.queue <- ns:
		default:
		}
	}
}

func (t *trimmer) run(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case ns := <-t.queue:
			for ctx.Err() == nil {
				tctx, cancel := context.WithTimeout(ctx, 30*time.Second)
				n, err := t.src.TrimAudit(tctx, ns, t.keep)
				cancel()
				if err != nil {
					t.log.Warn("control: trimming the audit log failed", "ns", ns, "err", err)
					break
				}
				if n == 0 {
					break
				}
				t.log.Debug("control: audit log trimmed", "ns", ns, "folded", n)
			}
		}
	}
}

func (t *trimmer) close() {
	t.cancel()
	t.wg.Wait()
}
