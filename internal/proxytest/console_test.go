package proxytest

import (
	"bufio"
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/holdfast-dev/holdfast/internal/testutil"
)

// TestConsoleLiveViewsThroughProxies: the console's live views are
// server-sent events; through each proxy docs/PROXIES.md configures (nginx
// as it comes, nginx as recommended for streams, HAProxy), a view's event
// reaches the browser when what it shows changes, not when the proxy's
// buffer fills or the stream ends: the fleet's summary after a publish
// the client applies.
func TestConsoleLiveViewsThroughProxies(t *testing.T) {
	for _, tp := range []topology{{proxy: "nginx"}, {proxy: "nginx-sse"}, {proxy: "haproxy"}} {
		t.Run(tp.String(), func(t *testing.T) {
			e := tp.start(t, "")
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			req, err := http.NewRequestWithContext(ctx, http.MethodGet, e.proxy.url(false)+"/console/fleet/events", nil)
			if err != nil {
				t.Fatal(err)
			}
			req.Header.Set("Accept", "text/event-stream")
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			if resp.StatusCode != http.StatusOK || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
				t.Fatalf("%s %s", resp.Status, resp.Header.Get("Content-Type"))
			}
			events := make(chan string, 16)
			go func() {
				defer close(events)
				sc := bufio.NewScanner(resp.Body)
				sc.Buffer(make([]byte, 64<<10), 1<<20)
				var data strings.Builder
				for sc.Scan() {
					switch line := sc.Text(); {
					case strings.HasPrefix(line, "data: "):
						data.WriteString(line[len("data: "):])
					case line == "" && data.Len() > 0:
						select {
						case events <- data.String():
						case <-ctx.Done():
							return
						}
						data.Reset()
					}
				}
			}()
			next := func(what string) string {
				t.Helper()
				select {
				case ev, ok := <-events:
					if !ok {
						t.Fatalf("the stream ended before %s", what)
					}
					return ev
				case <-time.After(10 * time.Second):
					t.Fatalf("no event within 10 s: %s", what)
				}
				return ""
			}
			first := next("the view's first render")
			rev, err := e.srv.Publish("app", map[string]any{"v": 1})
			if err != nil {
				t.Fatal(err)
			}
			e.waitAck(rev)
			deadline := time.Now().Add(10 * time.Second)
			for {
				if ev := next("the fleet's summary after the client applied a publish"); ev != first {
					break
				}
				if time.Now().After(deadline) {
					t.Fatal("the view did not change after the publish")
				}
			}
			cancel()
			testutil.Eventually(t, 5*time.Second, func() bool {
				_, ok := <-events
				return !ok
			}, "the reader to stop")
		})
	}
}
