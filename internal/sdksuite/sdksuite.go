package sdksuite

import (
	"testing"
	"time"
)

// Server is a server under test, with the faults the suite injects. The
// reference server (internal/fakeserver) has them all; a harness around
// another server or a source provides them in front of it. A harness that
// cannot inject a fault skips the case (tb.Skip, on the case's tb) from
// the method.
type Server interface {
	// Target is what the suite's clients read from: a data plane's base
	// URL, or a source. It stays the same across Stop, Restart and
	// ResetStore.
	Target() Target
	// Publish commits a change, whether or not the data plane is up.
	Publish(ns string, puts map[string]any, deletes ...string) (int64, error)
	// Compact compacts the store's history up to rev (0: its head).
	Compact(rev int64) (int64, error)
	// Stop takes the data plane down (connections refused); Restart brings
	// it up again on the same address with the same store.
	Stop() error
	Restart() error
	// ResetStore replaces the store by an empty one with a new id and
	// returns the id.
	ResetStore() string
	// DropStreams ends every open watch stream and held long-poll.
	DropStreams()
	// SetBlackhole(true) makes the data plane accept requests and send
	// nothing until SetBlackhole(false).
	SetBlackhole(on bool)
	// FailNext answers the next n data-plane requests with status and a
	// Retry-After of retryAfter.
	FailNext(n, status int, retryAfter time.Duration)
	// Stats counts data-plane requests since the server started.
	Stats() Stats
	// OpenStreams is the number of watch streams open now.
	OpenStreams() int
}

// Stats counts data-plane requests by kind. A harness around a source
// counts its calls: Snapshot, Watch (Watches) and WatchStream (Streams).
type Stats struct {
	Snapshots   int64 // GET /sdk/snapshot
	Events      int64 // GET /sdk/events (long-polls)
	Watches     int64 // GET /sdk/watch (SSE streams)
	Streams     int64 // GET /sdk/stream (multi-namespace SSE streams)
	StreamPolls int64 // GET /sdk/stream/events (multi-namespace long-polls)
	// Compacted counts the watches a source ended as compacted (a Watch's
	// ErrCompacted, a stream's Ended event of it); a data plane's are not
	// counted.
	Compacted int64
}

// Options configure a server for one case.
type Options struct {
	// BearerToken, when set, is the only token the data plane accepts.
	BearerToken string
}

// Heartbeat is the heartbeat a StartFunc gives its server: the cases'
// timings (an idle timeout of three heartbeats) depend on it.
const Heartbeat = 50 * time.Millisecond

// StartFunc starts a server for one case, with Heartbeat, and arranges
// for it to be closed when the case ends.
type StartFunc func(t testing.TB, o Options) Server

// Run runs every case of the suite against servers that start makes.
func Run(t *testing.T, start StartFunc) {
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) { c.run(t, start) })
	}
}

// testIdle is the idle timeout of a client that declares a stream dead
// after three heartbeats, where a case is about that; elsewhere the
// harness's RelaxedIdle.
const testIdle = 3 * Heartbeat
