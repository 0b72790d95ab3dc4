package holdfasttest_test

import (
	"context"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/holdfast-dev/holdfast/config"
	"github.com/holdfast-dev/holdfast/holdfasttest"
)

// An application's test: publish, read, take the config plane down, and
// check the application keeps its last good config.
func Example() {
	srv, err := holdfasttest.Start(holdfasttest.WithHeartbeat(100 * time.Millisecond))
	if err != nil {
		panic(err)
	}
	defer srv.Close()
	if _, err := srv.Publish("payments.prod", map[string]any{"retry-timeout-ms": 50}); err != nil {
		panic(err)
	}

	c, err := config.New(config.WithEndpoint(srv.URL()))
	if err != nil {
		panic(err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ns, err := c.Namespace(ctx, "payments.prod")
	if err != nil {
		panic(err)
	}
	fmt.Println("timeout:", ns.Int("retry-timeout-ms", 200))

	_ = srv.Stop() // the config plane goes down
	if err := ns.WaitForState(ctx, config.StateStale); err != nil {
		panic(err)
	}
	fmt.Println("still:", ns.Int("retry-timeout-ms", 200), ns.Status().State)
	// Output:
	// timeout: 50
	// still: 50 Stale
}

func TestNewServerClosesWithTheTest(t *testing.T) {
	var srv *holdfasttest.Server
	t.Run("inner", func(t *testing.T) {
		srv = holdfasttest.NewServer(t)
		if _, err := srv.Publish("a", map[string]any{"k": 1}); err != nil {
			t.Fatal(err)
		}
	})
	tr := &http.Transport{}
	defer tr.CloseIdleConnections()
	if resp, err := (&http.Client{Transport: tr}).Get(srv.URL() + "/sdk/snapshot?ns=a"); err == nil {
		resp.Body.Close()
		t.Fatal("the server still answers after its test ended")
	}
}
