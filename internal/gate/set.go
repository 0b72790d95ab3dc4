package gate

import (
	"context"
	"errors"
	"sync"
	"time"
)

// Set is the gates of one rollout, checked together.
type Set struct {
	checkers []*Checker
}

// NewSet checks gates (ValidateList) and makes a Checker for each, with
// the same options.
func NewSet(gates []Gate, opts ...Option) (*Set, error) {
	if err := ValidateList(gates); err != nil {
		return nil, err
	}
	s := &Set{}
	for _, g := range gates {
		c, err := NewChecker(g, opts...)
		if err != nil {
			_ = s.Close()
			return nil, err
		}
		s.checkers = append(s.checkers, c)
	}
	return s, nil
}

// Checkers are the set's checkers, in the order of its gates.
func (s *Set) Checkers() []*Checker { return s.checkers }

// Start starts every gate (Checker.Start), concurrently, and returns
// their results in the order of the gates; the error joins those of the
// gates that refuse the rollout.
func (s *Set) Start(ctx context.Context, now time.Time) ([]Result, error) {
	return s.each(ctx, func(c *Checker) (Result, error) { return c.Start(ctx, now) })
}

// Check checks every gate (Checker.Check), concurrently, and returns
// their results in the order of the gates. The error is ctx's own or
// ErrClosed: then no result is returned.
func (s *Set) Check(ctx context.Context, now time.Time) ([]Result, error) {
	results, err := s.each(ctx, func(c *Checker) (Result, error) { return c.Check(ctx, now) })
	if err != nil {
		return nil, err
	}
	return results, nil
}

func (s *Set) each(ctx context.Context, f func(*Checker) (Result, error)) ([]Result, error) {
	results := make([]Result, len(s.checkers))
	errs := make([]error, len(s.checkers))
	var wg sync.WaitGroup
	for i, c := range s.checkers {
		wg.Go(func() { results[i], errs[i] = f(c) })
	}
	wg.Wait()
	if err := ctx.Err(); err != nil {
		return results, err
	}
	return results, errors.Join(errs...)
}

// Close closes every checker; idempotent.
func (s *Set) Close() error {
	for _, c := range s.checkers {
		_ = c.Close()
	}
	return nil
}

// Breached returns the first breach among results, if any.
func Breached(results []Result) (Result, bool) {
	for _, r := range results {
		if r.Status == Breach {
			return r, true
		}
	}
	return Result{}, false
}
