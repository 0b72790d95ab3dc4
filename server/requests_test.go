package server_test

import (
	"bufio"
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"

	"github.com/holdfast-dev/holdfast/internal/testutil"
	"github.com/holdfast-dev/holdfast/server"
	"github.com/holdfast-dev/holdfast/server/store"
)

// TestEtcdRequestsPerPublishDoNotGrowWithClients: the server is a watch
// cache: with 10, 1,000 or 10,000 clients streaming a namespace, a
// publish costs the same unary requests to etcd (the changes reach the
// cache over one etcd watch, a stream, not counted). Heartbeats are 10 s,
// so that their background reads (one per namespace per beat) barely
// count. The streams share h2c connections (250 a connection), as SDK
// clients of one process do, so that 10,000 fit the descriptors here;
// 10,000 with HOLDFAST_SCALE_STREAMS=1:
//
//	HOLDFAST_SCALE_STREAMS=1 go test -run EtcdRequestsPerPublish -v ./server/
func TestEtcdRequestsPerPublishDoNotGrowWithClients(t *testing.T) {
	if testing.Short() {
		t.Skip("10,000 streams: not in -short")
	}
	var unary atomic.Int64
	count := grpc.WithChainUnaryInterceptor(func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		unary.Add(1)
		return invoker(ctx, method, req, reply, cc, opts...)
	})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s, err := server.New(ctx, server.Config{Store: store.Config{Kind: store.KindMemory, DialOptions: []grpc.DialOption{count}}, Heartbeat: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewUnstartedServer(s.Handler())
	hs.Config.Protocols = new(http.Protocols)
	hs.Config.Protocols.SetHTTP1(true)
	hs.Config.Protocols.SetUnencryptedHTTP2(true)
	hs.Start()
	defer func() {
		hs.CloseClientConnections()
		hs.Close()
		if err := s.Close(); err != nil {
			t.Error(err)
		}
	}()
	first := publish(t, hs.URL, "app", map[string]any{"v": 0})

	tr := &http.Transport{Protocols: new(http.Protocols)}
	tr.Protocols.SetUnencryptedHTTP2(true)
	defer tr.CloseIdleConnections()
	hc := &http.Client{Transport: tr}
	var wg sync.WaitGroup
	var events atomic.Int64 // change events read by every stream
	streams := 0
	open := func(n int) {
		t.Helper()
		for range n {
			resp, err := hc.Get(fmt.Sprintf("%s/sdk/watch?ns=app&since=%d", hs.URL, first))
			if err != nil || resp.StatusCode != http.StatusOK {
				t.Fatalf("stream %d: %v %v", streams, err, resp)
			}
			streams++
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer resp.Body.Close()
				sc := bufio.NewScanner(resp.Body)
				for sc.Scan() {
					if sc.Text() == "event: change" {
						events.Add(1)
					}
				}
			}()
		}
	}
	defer wg.Wait()
	defer hs.CloseClientConnections()

	perPublish := func(v0 int) float64 {
		t.Helper()
		const publishes = 20
		before, seen := unary.Load(), events.Load()
		for i := range publishes {
			publish(t, hs.URL, "app", map[string]any{"v": v0 + i})
		}
		n := float64(unary.Load()-before) / publishes
		want := seen + int64(publishes*streams)
		testutil.Eventually(t, time.Minute, func() bool { return events.Load() >= want },
			"the %d change events of %d publishes to reach the %d streams", publishes*streams, publishes, streams)
		return n
	}
	open(10)
	at10 := perPublish(1)
	open(990)
	at1000 := perPublish(100)
	t.Logf("etcd unary requests per publish: %.2f with 10 streams, %.2f with 1,000", at10, at1000)
	if d := at1000 - at10; d > 1 || d < -1 {
		t.Errorf("etcd requests per publish: %.2f with 10 streams, %.2f with 1,000: want equal within 1", at10, at1000)
	}
	// 10,000 streams take minutes under -race on two cores: a scale run.
	if os.Getenv("HOLDFAST_SCALE_STREAMS") == "" {
		return
	}
	open(9000)
	at10000 := perPublish(200)
	t.Logf("etcd unary requests per publish: %.2f with 10,000 streams", at10000)
	if d := at10000 - at10; d > 1 || d < -1 {
		t.Errorf("etcd requests per publish: %.2f with 10 streams, %.2f with 10,000: want equal within 1", at10, at10000)
	}
}
