package transport

import "time"

// SetAckStreamIdle sets how long s's ack stream stays open without a
// batch (and how close batches must come to open one), for tests that
// cannot wait ackStreamIdle.
func SetAckStreamIdle(s *HTTPSource, d time.Duration) { s.acks.idle = d }
