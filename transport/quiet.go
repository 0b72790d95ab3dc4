package transport

import "time"

// QuietLimiter is implemented by sources that know the longest a healthy
// watch goes without an event (a change or progress): a client that has
// had none for that long does not call its data fresh, however healthy
// its connection looks.
type QuietLimiter interface {
	QuietLimit() time.Duration
}

var _ QuietLimiter = (*HTTPSource)(nil)

// QuietLimit is the idle timeout (IdleTimeout: it may follow the server's
// advertised heartbeat) while the source watches over SSE (in
// WatchAuto, until it switches); over long-poll, the long-poll wait plus
// the idle timeout, since an empty long-poll confirms only when it ends.
func (s *HTTPSource) QuietLimit() time.Duration {
	s.mu.Lock()
	mode := s.mode
	s.mu.Unlock()
	if mode == WatchLongPoll {
		return s.opts.longPollWait + s.replyTimeout() // a poll may take that long, heartbeat or not
	}
	return s.IdleTimeout()
}
