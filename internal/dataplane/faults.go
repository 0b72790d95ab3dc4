package dataplane

import "time"

// Faults is where a test server injects faults into the data plane
// (internal/fakeserver's FailNext, SetLatency, SetBlackhole): the data
// plane asks it on every request's path, and before every write. Without
// WithFaults there are none. Every method must be safe for concurrent use
// and must not block.
type Faults interface {
	// Delay is how long to hold a request before serving it (0: none).
	Delay() time.Duration
	// Fail takes one injected failure for a request that may fail
	// (snapshot, events, watch, stream; not acks): the status to answer
	// with and its Retry-After.
	Fail() (status int, retryAfter time.Duration, ok bool)
	// Speak asks for the right to write to a client: release it once
	// the write is done. While nothing may be sent (a black hole), it
	// returns instead a channel closed when the server may ask again.
	Speak() (release func(), wait <-chan struct{})
	// Silenced reports whether nothing may be sent at all, not even a
	// disconnect: a watcher that falls behind meanwhile ends once it is
	// heard again.
	Silenced() bool
}

// noFaults is the data plane without faults.
type noFaults struct{}

func (noFaults) Delay() time.Duration             { return 0 }
func (noFaults) Fail() (int, time.Duration, bool) { return 0, 0, false }
func (noFaults) Speak() (func(), <-chan struct{}) { return spoken, nil }
func (noFaults) Silenced() bool                   { return false }

// spoken releases noFaults' right to write: there is nothing to release.
func spoken() {}
