package config

import (
	"testing"
	"time"

	"github.com/cenkalti/backoff/v4"
)

type fakeClock struct{ now time.Time }

func (c *fakeClock) Now() time.Time { return c.now }

// TestReconnectBackoffNeverGivesUp holds contract point 7: after a day of
// failures the backoff still answers a delay within its bounds, never
// backoff.Stop (backoff/v4 gives up after 15 minutes unless told not to),
// and the delays are jittered.
func TestReconnectBackoffNeverGivesUp(t *testing.T) {
	o := defaultOptions()
	o.backoffInitial, o.backoffMax = 100*time.Millisecond, 2*time.Second
	c := &Client{opts: o}
	bo := c.backoff().New().(*backoff.ExponentialBackOff)
	clock := &fakeClock{now: time.Unix(0, 0)}
	bo.Clock = clock
	bo.Reset()

	seen := map[time.Duration]bool{}
	for range 2000 {
		d := bo.NextBackOff()
		if d == backoff.Stop {
			t.Fatalf("backoff gave up after %v of failures", clock.now.Sub(time.Unix(0, 0)))
		}
		// Randomization 0.5 around at most the max interval.
		if d < 0 || d > o.backoffMax*3/2 {
			t.Fatalf("delay %v outside 0..1.5x the max %v", d, o.backoffMax)
		}
		seen[d] = true
		clock.now = clock.now.Add(time.Minute)
	}
	if len(seen) < 100 {
		t.Errorf("only %d distinct delays in 2,000: no jitter", len(seen))
	}
}
