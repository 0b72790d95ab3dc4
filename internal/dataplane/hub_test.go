package dataplane

import (
	"testing"
	"time"
)

// A relay's beat reaches its streams' shards one after another, evenly
// over the spread, so that its streams' progress does not all go at once;
// every shard hears every beat.
func TestRelayBeatIsSpread(t *testing.T) {
	const spread = 160 * time.Millisecond
	h := newHub(0, func() bool { return false })
	h.startBeats(spread)
	defer h.close()
	for round := range 2 {
		chs := make([]<-chan struct{}, beatShards)
		for i := range chs {
			chs[i] = h.beats(i)
		}
		start := time.Now()
		h.requestBeat()
		var closed []time.Duration
		for i, ch := range chs {
			select {
			case <-ch:
				closed = append(closed, time.Since(start))
			case <-time.After(10 * time.Second):
				t.Fatalf("round %d: shard %d never heard the beat", round, i)
			}
		}
		// The last shard waits beatShards-1 steps of spread/beatShards.
		if least := spread * (beatShards - 1) / beatShards; closed[beatShards-1] < least {
			t.Errorf("round %d: every shard heard the beat within %v, want the last no sooner than %v: %v", round, closed[beatShards-1], least, closed)
		}
		if h.beats(0) == chs[0] {
			t.Errorf("round %d: shard 0's channel was not replaced", round)
		}
	}
}
