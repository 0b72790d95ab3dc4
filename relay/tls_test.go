package relay_test

import (
	"crypto/tls"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/holdfast-dev/holdfast/config"
	"github.com/holdfast-dev/holdfast/holdfasttest"
	"github.com/holdfast-dev/holdfast/internal/listen"
	"github.com/holdfast-dev/holdfast/internal/testutil"
	"github.com/holdfast-dev/holdfast/internal/testutil/certtest"
)

// TestSDKOverTLSOneConnection: an SDK client of a relay over https opens
// several namespaces at once and carries their stream, snapshots and
// acks over one HTTP/2 connection (ALPN), as over h2c: requests that
// start while the first connection is on its way wait for it, rather than
// dial (and handshake) connections of their own.
func TestSDKOverTLSOneConnection(t *testing.T) {
	origin := holdfasttest.NewServer(t, holdfasttest.WithHeartbeat(200*time.Millisecond))
	names := []string{"a", "b", "c", "d"}
	for _, n := range names {
		mustPublish(t, origin, n, map[string]any{"v": 1})
	}
	r, _ := startRelay(t, origin.URL())
	ca := certtest.NewCA(t, "test CA")
	pair := ca.Server(t, "relay")
	tl, err := listen.NewTLS(pair.CertFile, pair.KeyFile, "", nil)
	if err != nil {
		t.Fatal(err)
	}
	var open, dialed atomic.Int64
	lc := listen.Config{Addr: "127.0.0.1:0", TLS: tl, ConnState: func(_ net.Conn, st http.ConnState) {
		switch st {
		case http.StateNew:
			open.Add(1)
			dialed.Add(1)
		case http.StateClosed, http.StateHijacked:
			open.Add(-1)
		}
	}}
	ln, err := listen.Listen(lc)
	if err != nil {
		t.Fatal(err)
	}
	srv := listen.NewServer(r.Handler(), lc)
	served := make(chan struct{})
	go func() {
		defer close(served)
		_ = srv.Serve(ln)
	}()
	defer func() {
		_ = srv.Close()
		<-served
	}()

	c, err := config.New(config.WithEndpoint("https://"+ln.Addr().String()),
		config.WithTLSConfig(&tls.Config{RootCAs: ca.Pool()}),
		config.WithReconnectBackoff(5*time.Millisecond, 100*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	var wg sync.WaitGroup
	nss := make([]*config.Namespace, len(names))
	for i, n := range names {
		wg.Go(func() { nss[i] = openNamespace(t, c, n) })
	}
	wg.Wait()
	if t.Failed() {
		return
	}
	for _, n := range names {
		mustPublish(t, origin, n, map[string]any{"v": 2})
	}
	for i, ns := range nss {
		testutil.Eventually(t, waitLimit, func() bool { return valueOf(ns, "v") == "2" }, "namespace "+names[i]+" at v=2")
	}
	testutil.Eventually(t, waitLimit, func() bool {
		st, err := origin.Status("a")
		return err == nil && st.Acked >= 1
	}, "the ack through the relay")
	testutil.Eventually(t, waitLimit, func() bool { return open.Load() == 1 }, "one connection open")
	if n := dialed.Load(); n != 1 {
		t.Errorf("%d connections dialed, want 1", n)
	}
}
