package watchcache

// Helpers of the tests of the follower store under the data plane (the
// reference server's tests have the same, internal/fakeserver).

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/holdfast-dev/holdfast/internal/dataplane"
	"github.com/holdfast-dev/holdfast/transport"
)

// waitLimit bounds every wait of these tests on a condition.
const waitLimit = 10 * time.Second

// The data plane's pacing (package dataplane): how often at most a
// watcher wakes for progress, and how a relay's beat is spread.
const progressEvery = 250 * time.Millisecond

func beatSpread(heartbeat time.Duration) time.Duration { return min(heartbeat/4, time.Second) }

func recentProgress(heartbeat time.Duration) time.Duration {
	return 2*beatSpread(heartbeat) + progressEvery
}

// urlOf is the base URL of a listening data plane.
func urlOf(s *dataplane.Server) string { return "http://" + s.Addr() }

// newClient returns an HTTP client whose connections are closed at the end
// of the test (so that goleak sees none of them).
func newClient(t testing.TB) *http.Client {
	t.Helper()
	tr := &http.Transport{DisableCompression: true, MaxIdleConnsPerHost: 16}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr}
}

// do sends one request and returns the response (body already read and
// closed) and its body.
func do(t testing.TB, c *http.Client, method, url, body string, hdr ...string) (*http.Response, []byte) {
	t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, url, rd)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("%s %s: read body: %v", method, url, err)
	}
	return resp, data
}

func decode[T any](t testing.TB, data []byte) T {
	t.Helper()
	var v T
	if err := json.Unmarshal(data, &v); err != nil {
		t.Fatalf("decode %T from %q: %v", v, data, err)
	}
	return v
}

// sseEvent is one frame read by the raw SSE client.
type sseEvent struct {
	event, id, data string
}

// stream is a raw SSE client: one goroutine parses frames from the body
// into a channel, which closes when the stream ends.
type stream struct {
	resp   *http.Response
	events chan sseEvent
	done   chan struct{}
	cancel context.CancelFunc
}

// openStream opens an SSE stream at url; lastEventID may be empty.
func openStream(t testing.TB, c *http.Client, url, lastEventID string) *stream {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	if lastEventID != "" {
		req.Header.Set("Last-Event-ID", lastEventID)
	}
	resp, err := c.Do(req)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK {
		data, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		cancel()
		t.Fatalf("watch: %d %s", resp.StatusCode, data)
	}
	st := &stream{resp: resp, events: make(chan sseEvent, 1<<16), done: make(chan struct{}), cancel: cancel}
	go func() {
		defer close(st.done)
		defer close(st.events)
		br := bufio.NewReader(resp.Body)
		var ev sseEvent
		for {
			line, err := br.ReadString('\n')
			if err != nil {
				return
			}
			line = strings.TrimSuffix(line, "\n")
			switch {
			case line == "":
				select {
				case st.events <- ev:
				case <-ctx.Done():
					return
				}
				ev = sseEvent{}
			case strings.HasPrefix(line, "event: "):
				ev.event = line[len("event: "):]
			case strings.HasPrefix(line, "id: "):
				ev.id = line[len("id: "):]
			case strings.HasPrefix(line, "data: "):
				ev.data += line[len("data: "):]
			}
		}
	}()
	t.Cleanup(st.close)
	return st
}

func (st *stream) close() {
	st.cancel()
	st.resp.Body.Close()
	<-st.done
}

// mustNext returns the next event; the stream must not end.
func mustNext(t *testing.T, st *stream) sseEvent {
	t.Helper()
	select {
	case ev, ok := <-st.events:
		if !ok {
			t.Fatal("stream ended")
		}
		return ev
	case <-time.After(10 * time.Second):
		t.Fatal("no SSE event within 10s")
		return sseEvent{}
	}
}

// checked decodes an event and checks that its id is its cursor.
func checked(t *testing.T, ev sseEvent) (cs *transport.ChangeSet, p *transport.Progress) {
	t.Helper()
	id, err := strconv.ParseInt(ev.id, 10, 64)
	if err != nil {
		t.Fatalf("event id %q", ev.id)
	}
	switch ev.event {
	case transport.EventChange:
		cs = new(transport.ChangeSet)
		if err := json.Unmarshal([]byte(ev.data), cs); err != nil {
			t.Fatal(err)
		}
		if cs.Revision != id {
			t.Fatalf("change id %d, revision %d", id, cs.Revision)
		}
	case transport.EventProgress:
		p = new(transport.Progress)
		if err := json.Unmarshal([]byte(ev.data), p); err != nil {
			t.Fatal(err)
		}
		if p.Cursor != id || p.Revision > p.Cursor {
			t.Fatalf("progress id %d, %+v", id, p)
		}
	default:
		t.Fatalf("unknown event %q", ev.event)
	}
	return cs, p
}
