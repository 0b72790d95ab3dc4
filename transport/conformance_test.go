package transport_test

import (
	"encoding/json"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/holdfast-dev/holdfast/internal/fakeserver"
	"github.com/holdfast-dev/holdfast/transport"
	"github.com/holdfast-dev/holdfast/transport/transporttest"
)

// fakeStore is the conformance harness of the HTTP source: a reference
// server of its own per case, and a source over it.
func fakeStore(t *testing.T, opts ...transport.HTTPOption) *transporttest.Store {
	t.Helper()
	srv, err := fakeserver.Start(fakeserver.WithHeartbeat(100 * time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Close() })
	// A generous idle timeout: the suite is about the protocol, and a
	// loaded machine must not turn a late heartbeat into a failed case.
	src, err := transport.NewHTTPSource(srv.URL(), append([]transport.HTTPOption{
		transport.WithIdleTimeout(5 * time.Second), transport.WithLongPollWait(200 * time.Millisecond)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = src.Close() })
	return &transporttest.Store{
		Source: src,
		Publish: func(t *testing.T, ns string, puts map[string]json.RawMessage, deletes []string) int64 {
			t.Helper()
			rev, err := srv.PublishRaw(ns, puts, deletes)
			if err != nil {
				t.Fatalf("publish to %q: %v", ns, err)
			}
			return rev
		},
		Compact: func(t *testing.T, rev int64) {
			t.Helper()
			if _, err := srv.Compact(rev); err != nil {
				t.Fatal(err)
			}
		},
		Disconnect: func(*testing.T) { srv.DropStreams() },
		Restart: func(t *testing.T) {
			t.Helper()
			if err := srv.Restart(); err != nil {
				t.Fatal(err)
			}
		},
		Reset: func(*testing.T) { srv.ResetStore() },
		// The reference server offers the stream and promises progress
		// within 250 ms of a publish elsewhere: the stream cases must run.
		RequireStream:  true,
		PromptProgress: true,
	}
}

// The HTTP source passes the conformance suite over SSE and over
// long-poll.
func TestConformance(t *testing.T) {
	ignore := goleak.IgnoreCurrent()
	t.Cleanup(func() { goleak.VerifyNone(t, ignore) })
	for _, mode := range []transport.WatchMode{transport.WatchSSE, transport.WatchLongPoll} {
		t.Run(mode.String(), func(t *testing.T) {
			transporttest.Run(t, func(t *testing.T) *transporttest.Store {
				return fakeStore(t, transport.WithWatchMode(mode))
			})
		})
	}
}

// The stream cases, run against this package's stand-in of the stream's
// wire (the reference server's own stream is another branch's), over SSE
// and long-poll: here they must run, not skip.
func TestConformanceStreamStandIn(t *testing.T) {
	ignore := goleak.IgnoreCurrent()
	t.Cleanup(func() { goleak.VerifyNone(t, ignore) })
	for _, mode := range []transport.WatchMode{transport.WatchSSE, transport.WatchLongPoll} {
		t.Run(mode.String(), func(t *testing.T) {
			transporttest.RunStream(t, func(t *testing.T) *transporttest.Store {
				srv := transport.StartStandIn(t, "stream,ack-batch,h2c", 100*time.Millisecond)
				src, err := transport.NewHTTPSource(srv.URL, transport.WithWatchMode(mode),
					transport.WithIdleTimeout(5*time.Second), transport.WithLongPollWait(time.Second))
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { _ = src.Close() })
				return &transporttest.Store{
					Source: src,
					Publish: func(t *testing.T, ns string, puts map[string]json.RawMessage, deletes []string) int64 {
						return srv.Publish(ns, puts, deletes)
					},
					Compact:        func(t *testing.T, rev int64) { srv.Compact(rev) },
					RequireStream:  true,
					PromptProgress: true,
				}
			})
		})
	}
}

// A FailoverSource passes the suite too: over one endpoint it must be the
// HTTP source it wraps, whatever it adds around each call.
func TestConformanceFailover(t *testing.T) {
	ignore := goleak.IgnoreCurrent()
	t.Cleanup(func() { goleak.VerifyNone(t, ignore) })
	transporttest.Run(t, func(t *testing.T) *transporttest.Store {
		st := fakeStore(t)
		f, err := transport.NewFailoverSource([]*transport.HTTPSource{st.Source.(*transport.HTTPSource)})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = f.Close() })
		st.Source = f
		return st
	})
}
