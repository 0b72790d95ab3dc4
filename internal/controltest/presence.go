package controltest

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/holdfast-dev/holdfast/controlapi"
	"github.com/holdfast-dev/holdfast/transport"
)

// testPresence: a client with a stream open is live in /control/clients
// (with its SDK version) and counted by status; once its stream ends it is
// stale, then gone within GoneAfter and a report, and status counts it no
// more.
func testPresence(t *testing.T, c *client) {
	ns := c.ns("pr")
	rev := c.publish(ns, map[string]any{"a": 1})
	id := "presence-" + strings.TrimPrefix(ns, "pr.")
	data := c
	if c.srv.Tokens != nil {
		data = c.as(c.srv.Tokens.Data)
	}
	// The client's stream, named by its id, as the Go client's.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.srv.URL+transport.PathStream+"?ns="+ns+":0", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set(transport.HeaderClientID, id)
	if data.token != "" {
		req.Header.Set("Authorization", "Bearer "+data.token)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("stream: %d", resp.StatusCode)
	}
	ack := fmt.Sprintf(`{"client_id":%q,"ns":%q,"revision":%d,"status":"ack","sdk_version":"9.9.9"}`, id, ns, rev)
	data.ok(http.StatusNoContent, "POST", transport.PathAck, ack, nil)

	state := func() (controlapi.ClientState, controlapi.NamespaceStatus) {
		var cl controlapi.Clients
		c.ok(http.StatusOK, "GET", "/control/clients", nil, &cl)
		var st controlapi.NamespaceStatus
		c.ok(http.StatusOK, "GET", nsPath(ns, "/status"), nil, &st)
		for _, e := range cl.Clients {
			if e.ClientID == id && e.Namespace == ns {
				return e, st
			}
		}
		return controlapi.ClientState{}, st
	}
	wait := func(what string, cond func(controlapi.ClientState, controlapi.NamespaceStatus) bool) {
		t.Helper()
		deadline := time.Now().Add(30 * time.Second)
		for {
			e, st := state()
			if cond(e, st) {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: client %s, status %s", what, mustJSON(e), mustJSON(st))
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	wait("connected", func(e controlapi.ClientState, st controlapi.NamespaceStatus) bool {
		return e.State == controlapi.ClientLive && e.SDKVersion == "9.9.9" && !e.SeenAt.IsZero() &&
			st.Live == 1 && st.Clients == 1 && st.Acked == 1
	})
	cancel()
	wait("disconnected", func(e controlapi.ClientState, st controlapi.NamespaceStatus) bool {
		return e.State == controlapi.ClientGone && st.Live == 0 && st.Clients == 0 && st.Acked == 0 && st.Stale == 0
	})
}
