package relay_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/holdfast-dev/holdfast/config"
	"github.com/holdfast-dev/holdfast/holdfasttest"
	"github.com/holdfast-dev/holdfast/internal/testutil"
)

// TestPresenceThroughAChain: the origin sees a client behind two chained
// relays, and one of the first relay, live; when the outer relay stops,
// its client is gone at the origin (the relay said so as it stopped)
// while the other stays live.
func TestPresenceThroughAChain(t *testing.T) {
	origin := holdfasttest.NewServer(t, holdfasttest.WithHeartbeat(200*time.Millisecond))
	mustPublish(t, origin, "app", map[string]any{"v": 1})
	_, inner := startRelay(t, origin.URL())
	var stopOuter func()
	_, outer := startRelay(t, inner, withStop(&stopOuter))
	near := newClient(t, inner, config.WithClientID("near"))
	far := newClient(t, outer, config.WithClientID("far"))
	openNamespace(t, near, "app")
	openNamespace(t, far, "app")

	states := func() map[string]string {
		out := make(map[string]string)
		for _, c := range origin.Clients() {
			out[c.ClientID] = c.State
		}
		return out
	}
	want := func(near, far string) func() error {
		return func() error {
			if got := states(); got["near"] != near || got["far"] != far {
				return fmt.Errorf("states %v, want near %s, far %s", got, near, far)
			}
			return nil
		}
	}
	testutil.EventuallyNil(t, waitLimit, want("live", "live"), "both clients live at the origin")
	st, err := origin.Status("app")
	if err != nil || st.Live != 2 || st.Clients != 2 {
		t.Fatalf("status %+v, %v: want 2 live clients", st, err)
	}

	_ = far.Close()
	stopOuter()
	stopped := time.Now()
	testutil.EventuallyNil(t, 15*time.Second, want("live", "gone"), "the outer relay's client gone at the origin")
	t.Logf("gone at the origin %v after its relay stopped", time.Since(stopped).Round(10*time.Millisecond))
}
