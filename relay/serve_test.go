package relay_test

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/holdfast-dev/holdfast/holdfasttest"
	"github.com/holdfast-dev/holdfast/internal/testutil"
	"github.com/holdfast-dev/holdfast/relay"
)

// request sends one HTTP/1.1 request on c and reads its reply's status,
// leaving c open (keep-alive).
func request(t *testing.T, c net.Conn, br *bufio.Reader) int {
	t.Helper()
	_ = c.SetDeadline(time.Now().Add(waitLimit))
	defer func() { _ = c.SetDeadline(time.Time{}) }()
	if _, err := io.WriteString(c, "GET /sdk/v1/none HTTP/1.1\r\nHost: relay\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	res, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, res.Body)
	_ = res.Body.Close()
	return res.StatusCode
}

func dial(t *testing.T, url string) (net.Conn, *bufio.Reader) {
	t.Helper()
	c, err := net.Dial("tcp", strings.TrimPrefix(url, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c, bufio.NewReader(c)
}

// TestServeCapsConnections: Serve holds at most WithMaxConns connections;
// one past them reads a 503 and is closed, and a place freed is taken
// again.
func TestServeCapsConnections(t *testing.T) {
	origin := holdfasttest.NewServer(t)
	_, url := startRelay(t, origin.URL(), relay.WithMaxConns(2))
	c1, br1 := dial(t, url)
	request(t, c1, br1)
	c2, br2 := dial(t, url)
	request(t, c2, br2)

	c3, _ := dial(t, url)
	_ = c3.SetDeadline(time.Now().Add(waitLimit))
	got, err := io.ReadAll(c3) // until the relay closes it
	if err != nil && !errors.Is(err, net.ErrClosed) && !strings.Contains(err.Error(), "reset") {
		t.Fatalf("the refused connection: %v", err)
	}
	if !strings.HasPrefix(string(got), "HTTP/1.1 503 ") || !strings.Contains(string(got), "too many connections") {
		t.Fatalf("the connection past the cap read %q, want a 503 and its close", got)
	}
	// The open two are still served.
	if code := request(t, c2, br2); code == http.StatusServiceUnavailable {
		t.Fatalf("an admitted connection got %d", code)
	}

	// Closing one gives its place back (once the relay has seen the close).
	_ = c1.Close()
	testutil.Eventually(t, waitLimit, func() bool {
		c, err := net.Dial("tcp", strings.TrimPrefix(url, "http://"))
		if err != nil {
			return false
		}
		defer func() { _ = c.Close() }()
		_ = c.SetDeadline(time.Now().Add(waitLimit))
		if _, err := io.WriteString(c, "GET /sdk/v1/none HTTP/1.1\r\nHost: relay\r\nConnection: close\r\n\r\n"); err != nil {
			return false
		}
		res, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			return false
		}
		_ = res.Body.Close()
		return res.StatusCode != http.StatusServiceUnavailable
	}, "a connection is admitted again after one closed")
}

// TestServeClosesIdleConnections: Serve closes a connection with nothing
// in flight after WithIdleTimeout, and leaves an SDK client's stream
// alone for longer than that.
func TestServeClosesIdleConnections(t *testing.T) {
	const idle = 200 * time.Millisecond
	origin := holdfasttest.NewServer(t, holdfasttest.WithHeartbeat(50*time.Millisecond))
	if _, err := origin.Publish("app", map[string]any{"a": 1}); err != nil {
		t.Fatal(err)
	}
	r, url := startRelay(t, origin.URL(), relay.WithIdleTimeout(idle), relay.WithHeartbeat(50*time.Millisecond))

	t.Run("idle", func(t *testing.T) {
		c, br := dial(t, url)
		request(t, c, br)
		start := time.Now()
		_ = c.SetReadDeadline(time.Now().Add(waitLimit))
		n, err := br.Read(make([]byte, 1))
		if n != 0 || !errors.Is(err, io.EOF) {
			t.Fatalf("read on the idle connection: %d bytes, %v; want EOF (closed by the relay)", n, err)
		}
		if el := time.Since(start); el < idle/2 {
			t.Fatalf("closed after %v, before the idle timeout %v", el, idle)
		}
	})

	t.Run("stream", func(t *testing.T) {
		c := newClient(t, url)
		ns, err := c.Namespace(t.Context(), "app")
		if err != nil {
			t.Fatal(err)
		}
		testutil.Eventually(t, waitLimit, func() bool { return r.Stats().Streams == 1 }, "the client's stream is open")
		// Five idle timeouts: the stream is in flight, so its connection
		// stays and the client does not reconnect.
		base := r.Stats().Conns
		testutil.Consistently(t, 5*idle, func() error {
			if n := r.Stats().Conns - base; n != 0 {
				return fmt.Errorf("the client opened %d more connections (its stream's was closed)", n)
			}
			return nil
		})
		if _, err := origin.Publish("app", map[string]any{"a": 2}); err != nil {
			t.Fatal(err)
		}
		testutil.Eventually(t, waitLimit, func() bool { v, _ := ns.Get("a"); return v.String() == "2" }, "a=2 through the relay")
	})
}
