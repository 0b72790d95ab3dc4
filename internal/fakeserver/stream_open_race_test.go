package fakeserver

import (
	"testing"
	"time"

	"github.com/holdfast-dev/holdfast/internal/testutil"
	"github.com/holdfast-dev/holdfast/internal/testutil/ssetest"
	"github.com/holdfast-dev/holdfast/transport"
)

// A publish to a namespace the stream does not carry, made while the
// stream is still opening (the watcher registered, its first progress not
// yet written), is told promptly too, not at the next heartbeat: the
// handler must hear every head move after its subscription.
func TestStreamPromptProgressWhileOpening(t *testing.T) {
	s := start(t, WithHeartbeat(3*time.Second))
	c := newClient(t)
	r0, _ := s.Publish("mine", map[string]any{"k": 0})
	for i := range 30 {
		published := make(chan int64, 1)
		go func() {
			// As soon as the stream's watcher is registered.
			for s.OpenStreams() == 0 {
				time.Sleep(50 * time.Microsecond) // polling a condition, not synchronising
			}
			rev, _ := s.Publish("other", map[string]any{"k": i})
			published <- rev
		}()
		st := ssetest.Open(t, c, streamURL(s.URL(), transport.PathStream, pair("mine", r0)), "")
		r1 := <-published
		t0 := time.Now()
		for {
			ev := nextStream(t, st)
			if ev.progress != nil && ev.progress.Cursor >= r1 {
				break
			}
		}
		if d := time.Since(t0); d > time.Second {
			t.Fatalf("attempt %d: progress at %d came %v after the publish; want <= 1s (not the heartbeat)", i, r1, d)
		}
		st.Close()
		testutil.Eventually(t, waitLimit, func() bool { return s.OpenStreams() == 0 }, "attempt %d: the stream closed", i)
		// Past the progress coalescing window, so the next publish's tick
		// comes at once (the race is with an immediate tick).
		time.Sleep(progressEvery + 10*time.Millisecond) // the data plane's pacing (dataplane.progressEvery)
	}
}
