package control

import (
	"context"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/holdfast-dev/holdfast/internal/presence"
	"github.com/holdfast-dev/holdfast/internal/wire"
)

// TestLostReportsAreMissing: what a relay says it lost (outcomes its full
// ack queue dropped) and the clients a server's full presence table did
// not track are reports missing: the server's own Missing names the
// relay, its partials of a running rollout tell the leader, whose
// Missing names the server;
// another namespace counts the untracked clients alone, and a rollout
// started after the losses counts none.
func TestLostReportsAreMissing(t *testing.T) {
	s := newStoreServers(t, "s1", "leader")
	s1, leader := s[0], s[1]
	s1.presence = presence.NewTable(10*time.Second, 1, nil)
	s1.acks.live = s1.presence
	ctx := context.Background()
	start := time.Now().Add(-time.Second)
	s1.hear(t, "app", 3, "a")
	s1.hear(t, "web", 3, "a")
	if err := s1.presence.Report(&wire.PresenceReport{RelayID: "relay-1", Epoch: "e1", Seq: 1, Full: true, EveryMillis: 1000,
		Live: []string{"b", "c"}, // one past the table's bound of 1
		Lost: []wire.LostReports{{Relay: "relay-1", Kind: wire.LostAcks, Namespace: "app", N: 4, Last: time.Now()}}}); err != nil {
		t.Fatal(err)
	}
	n, why := s1.missing(ctx, "app", start)
	if n != 5 || !strings.Contains(why, `relay relay-1 dropped 4 outcome(s) of "app"`) || !strings.Contains(why, "this server holds up to 1 client(s) connected") {
		t.Errorf("s1 misses %d of app: %q", n, why)
	}
	if n, why := s1.missing(ctx, "web", start); n != 1 || strings.Contains(why, "relay-1 dropped") {
		t.Errorf("s1 misses %d of web: %q; want the untracked client alone", n, why)
	}
	running(t, s1, stageOf("app", 7, math.MaxUint64))
	s1.flush(t)
	if n, why := leader.missing(ctx, "app", start); n != 5 || !strings.Contains(why, "server s1") {
		t.Errorf("the leader misses %d of app: %q; want 5 of server s1", n, why)
	}
	if n, why := leader.missing(ctx, "app", time.Now().Add(time.Minute)); n != 0 {
		t.Errorf("the leader misses %d since a later start: %q", n, why)
	}
}
