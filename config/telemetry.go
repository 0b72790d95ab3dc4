package config

import (
	"time"

	"github.com/holdfast-dev/holdfast/internal/instrument"
	"github.com/holdfast-dev/holdfast/telemetry"
)

// probe is what a namespace's observable instruments read at each
// collection. Collections run on the meter's goroutines: it reads under n.mu
// (never on the read path).
type probe struct{ n *Namespace }

var (
	_ instrument.Probe             = probe{}
	_ instrument.FailedClosedTimer = probe{}
)

func (p probe) Staleness() time.Duration {
	p.n.mu.Lock()
	defer p.n.mu.Unlock()
	if p.n.confirm.IsZero() {
		return -1
	}
	return time.Since(p.n.confirm)
}

func (p probe) MaxStaleness() time.Duration { return p.n.opts.maxStaleness } // read-only after construction

func (p probe) HeadAge() time.Duration {
	p.n.mu.Lock()
	defer p.n.mu.Unlock()
	if p.n.headAt.IsZero() {
		return -1
	}
	return time.Since(p.n.headAt)
}

// stateValues are the telemetry names of the States; Closed has none.
var stateValues = [...]string{
	StateSyncing:      telemetry.StateSyncing,
	StateFresh:        telemetry.StateFresh,
	StateStale:        telemetry.StateStale,
	StateBreached:     telemetry.StateBreached,
	StateFailedClosed: telemetry.StateFailedClosed,
	StateClosed:       "",
}

func (p probe) State() string {
	p.n.mu.Lock()
	defer p.n.mu.Unlock()
	if st := p.n.status.State; st >= 0 && int(st) < len(stateValues) {
		return stateValues[st]
	}
	return ""
}

func (p probe) Revision() int64 {
	p.n.mu.Lock()
	defer p.n.mu.Unlock()
	if p.n.applied == nil {
		return 0
	}
	return p.n.applied.Revision()
}

func (p probe) HeadLag() int64 {
	p.n.mu.Lock()
	defer p.n.mu.Unlock()
	if p.n.applied == nil || p.n.head == 0 {
		return -1
	}
	return max(p.n.head-p.n.applied.Revision(), 0)
}

func (p probe) FailedClosed() bool {
	p.n.mu.Lock()
	defer p.n.mu.Unlock()
	return p.n.status.State == StateFailedClosed
}

func (p probe) Breached() bool {
	p.n.mu.Lock()
	defer p.n.mu.Unlock()
	return p.n.status.State == StateBreached || p.n.status.State == StateFailedClosed
}

func (p probe) TypeMismatches() int64 { return p.n.mismatches.Load() }

func (p probe) CallbackPanics() int64 { return p.n.disp.panics.Load() }

func (p probe) FailedClosedTime() time.Duration {
	p.n.mu.Lock()
	defer p.n.mu.Unlock()
	total := p.n.failedClosedTotal
	if p.n.status.State == StateFailedClosed {
		total += time.Since(p.n.status.Since)
	}
	return total
}
