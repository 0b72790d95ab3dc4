package listen

import (
	"math"
	"testing"
	"time"
)

func TestBodyDeadline(t *testing.T) {
	b := bodyBounds{grace: 10 * time.Second, rate: 1024, timeout: 2 * time.Minute}
	start := time.Unix(1000, 0)
	for _, tt := range []struct {
		n    int64
		want time.Duration
	}{
		{0, 10 * time.Second},
		{1, 10*time.Second + time.Second/1024},
		{10 << 10, 20 * time.Second},
		{110 << 10, 2 * time.Minute},
		{1 << 30, 2 * time.Minute},
		{math.MaxInt64, 2 * time.Minute},
	} {
		if got := b.deadline(start, tt.n).Sub(start); got != tt.want {
			t.Errorf("after %d bytes: %v, want %v", tt.n, got, tt.want)
		}
	}
}
