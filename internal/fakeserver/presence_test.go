package fakeserver

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/holdfast-dev/holdfast/internal/presence"
	"github.com/holdfast-dev/holdfast/internal/testutil"
	"github.com/holdfast-dev/holdfast/transport"
)

// TestStreamPresence: a stream that names its client makes it live; while
// the data plane is black-holed its writes stop, and past two heartbeats
// the client is stale; the black hole lifted, live again; the stream
// closed, gone (as of then).
func TestStreamPresence(t *testing.T) {
	s := start(t, WithHeartbeat(100*time.Millisecond))
	s.Publish("app", map[string]any{"k": 1})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, streamURL(s.URL(), transport.PathStream, "app:0"), nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set(transport.HeaderClientID, "quiet")
	resp, err := newClient(t).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	read := make(chan struct{})
	go func() { defer close(read); _, _ = io.Copy(io.Discard, resp.Body) }()
	defer func() { cancel(); <-read; resp.Body.Close() }()

	state := func(want presence.State) func() error {
		return func() error {
			if e := s.dp.Presence().Entries()["quiet"]; e.State != want {
				return fmt.Errorf("state %q, want %q", e.State, want)
			}
			return nil
		}
	}
	testutil.EventuallyNil(t, waitLimit, state(presence.Live), "the streaming client live")
	s.SetBlackhole(true)
	testutil.EventuallyNil(t, waitLimit, state(presence.Stale), "stale while nothing is written to it")
	s.SetBlackhole(false)
	testutil.EventuallyNil(t, waitLimit, state(presence.Live), "live again")
	cancel()
	testutil.EventuallyNil(t, waitLimit, state(presence.Gone), "gone once its stream ended")
}
