package server_test

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/holdfast-dev/holdfast/controlapi"
	"github.com/holdfast-dev/holdfast/internal/testutil"
	"github.com/holdfast-dev/holdfast/relay"
	"github.com/holdfast-dev/holdfast/server"
	"github.com/holdfast-dev/holdfast/server/store"
	"github.com/holdfast-dev/holdfast/transport"
)

// restartableRelay is a relay of upstream served on one address, which
// the test can stop and start again there (a new process's state: no
// acks held, new cohort numbering).
type restartableRelay struct {
	t        *testing.T
	upstream string
	addr     string
	hs       *httptest.Server
	r        *relay.Relay
	src      *transport.HTTPSource
}

func startRestartableRelay(t *testing.T, upstream string) *restartableRelay {
	rr := &restartableRelay{t: t, upstream: upstream, addr: "127.0.0.1:0"}
	rr.start()
	t.Cleanup(rr.stop)
	return rr
}

func (rr *restartableRelay) url() string { return "http://" + rr.addr }

func (rr *restartableRelay) start() {
	t := rr.t
	t.Helper()
	var ln net.Listener
	testutil.Eventually(t, 10*time.Second, func() bool {
		var err error
		ln, err = net.Listen("tcp", rr.addr)
		return err == nil
	}, "listening on %s", rr.addr)
	rr.addr = ln.Addr().String()
	src, err := transport.NewHTTPSource(rr.upstream)
	if err != nil {
		t.Fatal(err)
	}
	r, err := relay.New(src)
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewUnstartedServer(r.Handler())
	hs.Listener.Close()
	hs.Listener = ln
	hs.Start()
	rr.hs, rr.r, rr.src = hs, r, src
}

func (rr *restartableRelay) stop() {
	if rr.hs == nil {
		return
	}
	rr.hs.CloseClientConnections()
	rr.hs.Close()
	_ = rr.r.Close()
	_ = rr.src.Close()
	rr.hs = nil
}

// TestRolloutRelayRestartedMidStage: the clients of a rollout's stage sit
// behind a relay that loses every ack they send of the stage (the server
// drops the relay's forwards, as if the relay died holding them) and is
// then restarted. The clients report what they hold again while the
// rollout runs, so the stage completes on their acks, as reported
// members, none counted gone, and the rollout promotes.
func TestRolloutRelayRestartedMidStage(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s, err := server.New(ctx, server.Config{Store: store.Config{Kind: store.KindMemory}, Heartbeat: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	var dropAcks, dropped atomic.Int64
	front := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if dropAcks.Load() == 1 && strings.HasPrefix(r.URL.Path, "/sdk/ack") {
			dropped.Add(1)
			w.WriteHeader(http.StatusNoContent) // taken, and lost
			return
		}
		s.Handler().ServeHTTP(w, r)
	})
	hs := httptest.NewServer(front)
	t.Cleanup(func() {
		hs.CloseClientConnections()
		hs.Close()
		if err := s.Close(); err != nil {
			t.Error(err)
		}
	})
	base := hs.URL
	publish(t, base, "app", map[string]any{"v": 1})
	rr := startRestartableRelay(t, base)
	clients := sdkClients(t, rr.url(), "app", 8)
	testutil.Eventually(t, 10*time.Second, func() bool {
		return len(fleetClients(t, base)) == 8
	}, "every client reported through the relay")

	dropAcks.Store(1)
	id := startRollout(t, base, "app", controlapi.RolloutRequest{Puts: testutil.JSONValues(t, map[string]any{"v": 2}), Stages: []float64{50, 100},
		Bake: "500ms", StageTimeout: "60s"})
	// Every client has the stage's revision (members serve v=2, the
	// others the base): their acks are on their way, through the relay.
	for _, ns := range clients {
		testutil.Eventually(t, 10*time.Second, func() bool { return ns.Status().Rollout.ID == id }, "a client takes the stage")
	}
	testutil.Eventually(t, 10*time.Second, func() bool { return dropped.Load() > 0 }, "the relay's forwards lost")
	time.Sleep(time.Second) // the clients' acks of the stage all sent, and lost: the length of the fault, not a synchronisation
	rr.stop()
	dropAcks.Store(0)
	rr.start()

	full := waitRolloutEnd(t, base, "app", id, 30*time.Second)
	if full.State != "promoted" {
		t.Fatalf("record %+v", full)
	}
	for _, d := range full.Decisions {
		if d.What == "bake" && !strings.Contains(d.Reason, "(0 gone)") {
			t.Errorf("decision %q: %s; want every member reported, none gone", d.What, d.Reason)
		}
	}
	for _, ns := range clients {
		testutil.Eventually(t, 10*time.Second, func() bool { return ns.Int("v", 0) == 2 }, "a client serves v=2")
	}
}
