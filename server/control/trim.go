package control

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/holdfast-dev/holdfast/server/store"
)

// DefaultAuditRetention is how many audit records a namespace keeps.
const DefaultAuditRetention = 100_000

// DefaultAuditRetentionBytes bounds the bytes of a namespace's audit
// records, beside their number.
const DefaultAuditRetentionBytes = 64 << 20

// trimmer keeps each namespace's audit log to its retention: every
// hundredth of it in records, or eighth of it in bytes, published to a
// namespace, it folds the records beyond it into the namespace's base (a
// trim weighs the records it keeps: up to the bound in bytes, read each
// time, so that trimming every hundredth in bytes read a hundred times
// what was published, 64 MiB for each publish of 600 KB), in a goroutine
// of its own so that no publish waits for it. Several servers may trim
// one namespace at once: TrimAudit's compare-and-set lets one of them win.
type trimmer struct {
	src        *store.Namespaces
	log        *slog.Logger
	limit      store.AuditLimit
	every      int
	everyBytes int64
	queue      chan string // bounded: a trim skipped now is done at a later publish
	cancel     context.CancelFunc
	wg         sync.WaitGroup

	mu    sync.Mutex
	since map[string]sincePublish // since the namespace's last trim
}

type sincePublish struct {
	count int
	bytes int64
}

func newTrimmer(src *store.Namespaces, log *slog.Logger, limit store.AuditLimit) *trimmer {
	ctx, cancel := context.WithCancel(context.Background())
	t := &trimmer{src: src, log: log, limit: limit, every: max(1, limit.Records/100), everyBytes: limit.Bytes / 8,
		queue: make(chan string, 64), cancel: cancel, since: make(map[string]sincePublish)}
	t.wg.Add(1)
	go func() { defer t.wg.Done(); t.run(ctx) }()
	return t
}

// published counts a publish of about size bytes to ns, and queues a trim
// when one is due.
func (t *trimmer) published(ns string, size int64) {
	t.mu.Lock()
	s := t.since[ns]
	s.count++
	s.bytes += size
	due := s.count >= t.every || (t.limit.Bytes > 0 && s.bytes >= t.everyBytes)
	if due {
		s = sincePublish{}
	}
	t.since[ns] = s
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
				n, err := t.src.TrimAudit(tctx, ns, t.limit)
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
