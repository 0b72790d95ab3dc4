package syncer

import (
	"context"
	"errors"
	"math/rand/v2"
	"time"

	"github.com/cenkalti/backoff/v4"

	"github.com/holdfast-dev/holdfast/transport"
)

// Backoff is the reconnect policy: exponential from Initial to Max,
// jittered, never giving up; at least the server's Retry-After; at least
// Unauthorized after a 401/403.
type Backoff struct {
	Initial, Max time.Duration
	Unauthorized time.Duration
}

// New returns a fresh backoff of the policy.
func (p Backoff) New() backoff.BackOff {
	return backoff.NewExponentialBackOff(
		backoff.WithInitialInterval(p.Initial),
		backoff.WithMaxInterval(p.Max),
		backoff.WithRandomizationFactor(0.5),
		backoff.WithMultiplier(2),
		backoff.WithMaxElapsedTime(0),
	)
}

// Wait sleeps before the next attempt after err, until ctx ends: the
// backoff's delay, at least the server's Retry-After, and at least the
// unauthorized wait after a 401/403.
func (p Backoff) Wait(ctx context.Context, bo backoff.BackOff, err error) {
	d := bo.NextBackOff()
	var se *transport.StatusError
	if errors.As(err, &se) && se.RetryAfter > d {
		d = se.RetryAfter
	}
	if errors.Is(err, transport.ErrUnauthorized) {
		d = max(d, p.Unauthorized)
	}
	p.sleep(ctx, d)
}

func (p Backoff) sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

// jitter spreads d by ±25%, so that clients refused alike do not retry in
// step.
func jitter(d time.Duration) time.Duration {
	return d - d/4 + time.Duration(rand.Int64N(int64(d/2)+1))
}
