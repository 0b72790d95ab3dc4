package relay_test

import (
	"context"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/holdfast-dev/holdfast/config"
	"github.com/holdfast-dev/holdfast/holdfasttest"
	"github.com/holdfast-dev/holdfast/internal/sdksuite"
	"github.com/holdfast-dev/holdfast/internal/testutil"
	"github.com/holdfast-dev/holdfast/relay"
	"github.com/holdfast-dev/holdfast/transport"
)

// withSource, among startRelay's options, makes the relay follow src
// rather than the URL's HTTP source.
type withSource transport.Source

// withStop, among startRelay's options, receives a function that stops
// the relay (and waits for it) before the test's end.
type withStop *func()

// startRelay starts a relay following url, serving on a free loopback
// port, closed at the test's end. It returns the relay and its URL.
func startRelay(t testing.TB, url string, opts ...any) (*relay.Relay, string) {
	t.Helper()
	var src transport.Source
	var ropts []relay.Option
	var stopOut *func()
	for _, o := range opts {
		switch o := o.(type) {
		case withSource:
			src = o
		case withStop:
			stopOut = o
		case relay.Option:
			ropts = append(ropts, o)
		}
	}
	if src == nil {
		hs, err := transport.NewHTTPSource(url)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = hs.Close() })
		src = hs
	}
	r, err := relay.New(src, append([]relay.Option{relay.WithHeartbeat(200 * time.Millisecond)}, ropts...)...)
	if err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Serve(ctx, l) }()
	var once sync.Once
	stop := func() {
		once.Do(func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("Serve: %v", err)
			}
		})
	}
	t.Cleanup(stop)
	if stopOut != nil {
		*stopOut = stop
	}
	return r, "http://" + l.Addr().String()
}

func newClient(t testing.TB, url string, opts ...config.Option) *config.Client {
	t.Helper()
	return sdksuite.NewDefaultClient(t, sdksuite.Endpoint(url),
		append([]config.Option{config.WithReconnectBackoff(5*time.Millisecond, 50*time.Millisecond)}, opts...)...)
}

// waitLimit bounds every wait of these tests on a condition.
const waitLimit = 10 * time.Second

func TestRelayServesUpstream(t *testing.T) {
	origin := holdfasttest.NewServer(t, holdfasttest.WithHeartbeat(200*time.Millisecond))
	if _, err := origin.Publish("app", map[string]any{"a": 1}); err != nil {
		t.Fatal(err)
	}
	_, url := startRelay(t, origin.URL())
	c := newClient(t, url)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ns, err := c.Namespace(ctx, "app")
	if err != nil {
		t.Fatal(err)
	}
	if v, _ := ns.Get("a"); v.String() != "1" {
		t.Fatalf("a = %v", v)
	}
	rev, err := origin.Publish("app", map[string]any{"a": 2})
	if err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, waitLimit, func() bool { v, _ := ns.Get("a"); return v.String() == "2" }, "a=2 through the relay")
	if st := ns.Status(); st.Revision != rev || st.StoreID != origin.StoreID() {
		t.Fatalf("status %v, want revision %d of store %s", st, rev, origin.StoreID())
	}
	testutil.Eventually(t, waitLimit, func() bool { return ns.Status().State == config.StateFresh }, "Fresh")
	// The origin counts the client behind the relay.
	testutil.Eventually(t, waitLimit, func() bool {
		for _, cs := range origin.Clients() {
			if cs.ClientID == c.ClientID() {
				return true
			}
		}
		return false
	}, "the origin hears the ack")
	t.Logf("origin stats %+v", origin.Stats())
}
