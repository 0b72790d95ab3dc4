// Package ssetest is a raw Server-Sent Events client for the tests of the
// data planes (the reference server's, the relay's): it reads a watch or
// stream reply frame by frame, as bytes on the wire, where the SDK's
// source would decode them away. It is apart from testutil because it
// imports transport, whose own tests import testutil.
package ssetest

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

	"github.com/holdfast-dev/holdfast/transport"
)

// waitLimit bounds the wait for an event and for the end of a stream.
const waitLimit = 10 * time.Second

// Event is one frame: its event type, id and data (the data lines
// joined).
type Event struct {
	Event, ID, Data string
}

// Stream is a raw SSE client: one goroutine parses frames from the body
// into a channel, which closes when the stream ends.
type Stream struct {
	Resp   *http.Response
	events chan Event
	done   chan struct{}
	cancel context.CancelFunc
}

// Open opens an SSE stream at url with c, sending lastEventID as
// Last-Event-ID unless it is empty and hdr as headers (name, value
// pairs). It fails tb (Fatal) unless the reply is a 200. The stream is
// closed when tb ends.
func Open(tb testing.TB, c *http.Client, url, lastEventID string, hdr ...string) *Stream {
	tb.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		cancel()
		tb.Fatal(err)
	}
	if lastEventID != "" {
		req.Header.Set("Last-Event-ID", lastEventID)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := c.Do(req)
	if err != nil {
		cancel()
		tb.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK {
		data, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		cancel()
		tb.Fatalf("watch: %d %s", resp.StatusCode, data)
	}
	st := &Stream{Resp: resp, events: make(chan Event, 1<<16), done: make(chan struct{}), cancel: cancel}
	go st.read(ctx)
	tb.Cleanup(st.Close)
	return st
}

func (st *Stream) read(ctx context.Context) {
	defer close(st.done)
	defer close(st.events)
	br := bufio.NewReader(st.Resp.Body)
	var ev Event
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
			ev = Event{}
		case strings.HasPrefix(line, "event: "):
			ev.Event = line[len("event: "):]
		case strings.HasPrefix(line, "id: "):
			ev.ID = line[len("id: "):]
		case strings.HasPrefix(line, "data: "):
			ev.Data += line[len("data: "):]
		}
	}
}

// Close ends the stream and waits for its reader.
func (st *Stream) Close() {
	st.cancel()
	st.Resp.Body.Close()
	<-st.done
}

// Next returns the next event, or ok=false when the stream ended. It
// fails tb (Fatal) if none comes within 10 s.
func (st *Stream) Next(tb testing.TB) (ev Event, ok bool) {
	tb.Helper()
	select {
	case ev, ok := <-st.events:
		return ev, ok
	case <-time.After(waitLimit):
		tb.Fatal("no SSE event within 10s")
		return Event{}, false
	}
}

// MustNext returns the next event; the stream must not end.
func (st *Stream) MustNext(tb testing.TB) Event {
	tb.Helper()
	ev, ok := st.Next(tb)
	if !ok {
		tb.Fatal("stream ended")
	}
	return ev
}

// Ended waits until the stream ends, discarding events, and fails tb
// (Fatal) if it has not within 10 s.
func (st *Stream) Ended(tb testing.TB) {
	tb.Helper()
	deadline := time.After(waitLimit)
	for {
		select {
		case _, ok := <-st.events:
			if !ok {
				return
			}
		case <-deadline:
			tb.Fatal("stream did not end within 10s")
		}
	}
}

// Checked decodes an event of a watch, a change or a progress, and checks
// that its id is its cursor; it fails tb (Fatal) on anything else.
func Checked(tb testing.TB, ev Event) (cs *transport.ChangeSet, p *transport.Progress) {
	tb.Helper()
	id, err := strconv.ParseInt(ev.ID, 10, 64)
	if err != nil {
		tb.Fatalf("event id %q", ev.ID)
	}
	switch ev.Event {
	case transport.EventChange:
		cs = new(transport.ChangeSet)
		if err := json.Unmarshal([]byte(ev.Data), cs); err != nil {
			tb.Fatal(err)
		}
		if cs.Revision != id {
			tb.Fatalf("change id %d, revision %d", id, cs.Revision)
		}
	case transport.EventProgress:
		p = new(transport.Progress)
		if err := json.Unmarshal([]byte(ev.Data), p); err != nil {
			tb.Fatal(err)
		}
		if p.Cursor != id || p.Revision > p.Cursor {
			tb.Fatalf("progress id %d, %+v", id, p)
		}
	default:
		tb.Fatalf("unknown event %q", ev.Event)
	}
	return cs, p
}
