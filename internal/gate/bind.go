package gate

import (
	"context"
	"encoding/json"
	"sync"
	"time"
)

// Bound is a Checker bound to a clock, for a controller that checks its
// gates "now" through one method: it has the shape of
// internal/rollout/controller's Gate,
//
//	Check(ctx context.Context) (breach bool, detail string, err error)
//
// (a method set, not an import: this package depends on no controller).
type Bound struct {
	c   *Checker
	now func() time.Time

	mu   sync.Mutex
	last Result
}

// Bind binds c to now (nil: time.Now).
func Bind(c *Checker, now func() time.Time) *Bound {
	if now == nil {
		now = time.Now
	}
	return &Bound{c: c, now: now}
}

// FromJSON builds a bound gate from its JSON form (the element of a
// rollout spec's gates), checked as strictly as a -gate-file's.
func FromJSON(raw json.RawMessage, now func() time.Time, opts ...Option) (*Bound, error) {
	var g Gate
	if err := json.Unmarshal(raw, &g); err != nil {
		return nil, err
	}
	c, err := NewChecker(g, opts...)
	if err != nil {
		return nil, err
	}
	return Bind(c, now), nil
}

// Checker is the Checker b checks (Start it, Resume it, Close it).
func (b *Bound) Checker() *Checker { return b.c }

// Start is the gate's first check at b's now (Checker.Start): an error
// refuses the rollout (several series, a query Prometheus refuses, no
// answer). A controller calls it, if the gate has it, before it commits
// the rollout's first stage.
func (b *Bound) Start(ctx context.Context) error {
	r, err := b.c.Start(ctx, b.now())
	if err == nil {
		b.mu.Lock()
		b.last = r
		b.mu.Unlock()
	}
	return err
}

// FailingSince and Resume are the Checker's: what a controller stores in
// the rollout's state, and gives back to the gate it builds after a
// failover, so that the grace goes on.
func (b *Bound) FailingSince() time.Time { return b.c.FailingSince() }

// Resume: see FailingSince.
func (b *Bound) Resume(failingSince time.Time) { b.c.Resume(failingSince) }

// Check checks the gate at b's now (Checker.Check): breach when the
// result is a Breach, detail its Reason (at most MaxReason bytes, the
// figures whole), err the query's trouble while it is only Failing (or
// its cause, with a breach of the grace), or ctx's own error (then no
// breach and no detail).
func (b *Bound) Check(ctx context.Context) (breach bool, detail string, err error) {
	r, err := b.c.Check(ctx, b.now())
	if err != nil {
		return false, "", err
	}
	b.mu.Lock()
	b.last = r
	b.mu.Unlock()
	return r.Status == Breach, r.Reason, r.Err
}

// Last is the result of b's last check (the zero Result before the
// first): the figures for a rollout's record.
func (b *Bound) Last() Result {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.last
}

// LastJSON is Last as JSON (nil before the first check): the figures a
// controller keeps in the rollout's record (an optional method of
// internal/rollout/controller's Gate).
func (b *Bound) LastJSON() json.RawMessage {
	r := b.Last()
	if r.Status == "" {
		return nil
	}
	data, err := json.Marshal(r)
	if err != nil {
		return nil
	}
	return data
}

// Close closes the Checker.
func (b *Bound) Close() error { return b.c.Close() }
