package fakeserver

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"
)

// Every test must leave no goroutine behind: Close waits for all of them.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// start starts a server closed at the end of the test.
func start(t testing.TB, opts ...Option) *Server {
	t.Helper()
	s, err := Start(opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := s.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return s
}

// newClient returns an HTTP client whose connections are closed at the end
// of the test (so that goleak sees none of them). It never decompresses on
// its own: the tests look at Content-Encoding.
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

// waitLimit bounds every wait of these tests on a condition.
const waitLimit = 10 * time.Second

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

// openStream opens GET /sdk/watch; lastEventID may be empty.
func openStream(t testing.TB, c *http.Client, url, lastEventID string) *stream {
	t.Helper()
	return openStreamWith(t, c, url, lastEventID)
}

// openStreamWith is openStream with request headers, given as name, value
// pairs.
func openStreamWith(t testing.TB, c *http.Client, url, lastEventID string, hdr ...string) *stream {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
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

// next returns the next event, or ok=false when the stream ended.
func (st *stream) next(t testing.TB) (sseEvent, bool) {
	t.Helper()
	select {
	case ev, ok := <-st.events:
		return ev, ok
	case <-time.After(10 * time.Second):
		t.Fatal("no SSE event within 10s")
		return sseEvent{}, false
	}
}

// ended waits until the stream ends, discarding events.
func (st *stream) ended(t testing.TB) {
	t.Helper()
	deadline := time.After(10 * time.Second)
	for {
		select {
		case _, ok := <-st.events:
			if !ok {
				return
			}
		case <-deadline:
			t.Fatal("stream did not end within 10s")
		}
	}
}

func errorsIs(err, target error) bool { return errors.Is(err, target) }
