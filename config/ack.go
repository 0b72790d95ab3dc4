package config

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/holdfast-dev/holdfast/internal/syncer"
	"github.com/holdfast-dev/holdfast/transport"
)

// acker reports a namespace's outcomes (applied or rejected revisions) to
// the config plane, off the apply path. Outcomes coalesce: only the newest
// is waiting at any time. Reporting is best effort: failures back off and
// retry the newest outcome, and never touch reads or applies.
type acker struct {
	// Read-only after newAcker.
	src      transport.Acker
	log      *slog.Logger
	clientID string
	ns       string
	wake     chan struct{} // cap 1: an outcome is pending

	mu      sync.Mutex     // guards pending
	pending *transport.Ack // the newest outcome not yet taken by run; nil if none
}

func newAcker(src transport.Acker, log *slog.Logger, clientID, ns string) *acker {
	return &acker{src: src, log: log, clientID: clientID, ns: ns, wake: make(chan struct{}, 1)}
}

// report queues an outcome without blocking; it replaces any outcome not
// yet sent. A nil acker ignores it.
func (a *acker) report(revision int64, err error) {
	if a == nil {
		return
	}
	ack := &transport.Ack{ClientID: a.clientID, Namespace: a.ns, Revision: revision, Status: transport.AckApplied}
	if err != nil {
		ack.Status, ack.Error = transport.AckRejected, err.Error()
	}
	a.mu.Lock()
	a.pending = ack
	a.mu.Unlock()
	select {
	case a.wake <- struct{}{}:
	default:
	}
}

func (a *acker) take() *transport.Ack {
	a.mu.Lock()
	defer a.mu.Unlock()
	ack := a.pending
	a.pending = nil
	return ack
}

// run sends outcomes until ctx ends. After a failure it waits as policy
// says (the client's: backoff, Retry-After, the unauthorized wait).
func (a *acker) run(ctx context.Context, policy syncer.Backoff) {
	bo := policy.New()
	for {
		select {
		case <-ctx.Done():
			return
		case <-a.wake:
		}
		for ack := a.take(); ack != nil; {
			sendCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
			err := a.src.Ack(sendCtx, *ack)
			cancel()
			if err == nil {
				bo.Reset()
				break
			}
			if ctx.Err() != nil {
				return
			}
			a.log.Debug("config: ack not delivered; will retry", "revision", ack.Revision, "err", err)
			if policy.Wait(ctx, bo, err); ctx.Err() != nil {
				return
			}
			if newer := a.take(); newer != nil {
				ack = newer // the newest outcome wins
			}
		}
	}
}
