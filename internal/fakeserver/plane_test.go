package fakeserver

import (
	"net"
	"testing"
	"time"

	"github.com/holdfast-dev/holdfast/internal/dataplane"
	"github.com/holdfast-dev/holdfast/transport"
)

// progressEvery is the data plane's pacing of a multi-namespace watcher's
// prompt progress (dataplane's progressEvery).
const progressEvery = 250 * time.Millisecond

// recordAcks takes acks as the data plane takes those it receives.
func (s *Server) recordAcks(acks []transport.Ack) { s.dp.RecordAcks(acks) }

// followerOf serves an origin's store as a relay's backend would
// (dataplane.Follower): its data plane then takes acks as a relay's does.
type followerOf struct{ *store }

func (followerOf) StreamState(...string) dataplane.StreamState { return dataplane.StreamState{} }

// relayPlane is a relay's data plane over origin's store, its acks handed
// to sink, listening until the test ends.
type relayPlane struct{ *dataplane.Server }

func (r relayPlane) URL() string { return "http://" + r.Addr() }

func startRelayPlane(t testing.TB, origin *Server, sink func([]transport.Ack, bool)) relayPlane {
	t.Helper()
	s, err := dataplane.New(followerOf{origin.store}, dataplane.WithHeartbeat(time.Hour), dataplane.WithAckSink(sink))
	if err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Listen(l); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return relayPlane{s}
}
