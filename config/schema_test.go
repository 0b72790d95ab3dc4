package config_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/holdfast-dev/holdfast/config"
	"github.com/holdfast-dev/holdfast/controlapi"
	"github.com/holdfast-dev/holdfast/internal/fakeserver"
	"github.com/holdfast-dev/holdfast/internal/sdksuite"
	"github.com/holdfast-dev/holdfast/internal/testutil"
	"github.com/holdfast-dev/holdfast/internal/testutil/nstest"
	"github.com/holdfast-dev/holdfast/transport"
)

// countingTransport counts response body bytes as they come off the wire
// (before decompression), and can refuse requests to some paths.
type countingTransport struct {
	base   http.RoundTripper
	bytes  *atomic.Int64
	refuse string // a path to fail, as if that endpoint were down
	tries  atomic.Int64
}

func (t *countingTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	if t.refuse != "" && r.URL.Path == t.refuse {
		t.tries.Add(1)
		return nil, errors.New("test: endpoint down")
	}
	resp, err := t.base.RoundTrip(r)
	if err != nil {
		return nil, err
	}
	resp.Body = &countingBody{ReadCloser: resp.Body, n: t.bytes}
	return resp, nil
}

type countingBody struct {
	io.ReadCloser
	n *atomic.Int64
}

func (b *countingBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	b.n.Add(int64(n))
	return n, err
}

func countingClient(bytes *atomic.Int64) (*http.Client, *countingTransport) {
	base := http.DefaultTransport.(*http.Transport).Clone()
	base.DisableCompression = true
	ct := &countingTransport{base: base, bytes: bytes}
	return &http.Client{Transport: ct}, ct
}

const (
	// serverSchema refuses any value containing BAD at publish.
	serverSchema = `{"type":"object","additionalProperties":{"type":"string","not":{"pattern":"BAD"}}}`
	// strictSchema is a build that cannot parse new-field.
	strictSchema = `{"type":"object","additionalProperties":{"type":"string","not":{"pattern":"new-field"}}}`
)

// TestSchemaScenario reproduces a published design study of config
// distribution: 1,000 keys, 100 clients, every tenth one strict.
func TestSchemaScenario(t *testing.T) {
	if testing.Short() {
		t.Skip("100 clients")
	}
	// A long heartbeat, so the bytes counted are the change's, not progress.
	srv := sdksuite.StartReference(t, fakeserver.WithHeartbeat(time.Minute))
	if err := srv.SetSchema("routes", []byte(serverSchema)); err != nil {
		t.Fatal(err)
	}
	routes := make(map[string]any, 1000)
	for i := range 1000 {
		routes[fmt.Sprintf("cluster/c%d", i)] = fmt.Sprintf("lb=rr;endpoints=10.0.%d.%d", i/250, i%250)
	}
	base := sdksuite.Publish(t, srv, "routes", routes)

	const clients = 100
	var wire atomic.Int64
	nss := make([]*config.Namespace, clients)
	var wg sync.WaitGroup
	for i := range clients {
		hc, _ := countingClient(&wire)
		opts := []config.NamespaceOption{}
		if i%10 == 0 {
			opts = append(opts, config.Schema([]byte(strictSchema)))
		}
		// 100 clients open at once: under -race on a loaded 2-core
		// machine a snapshot can wait more than relaxedIdle for its
		// headers, which is not what this test is about.
		c := sdksuite.NewClient(t, sdksuite.Endpoint(srv.URL()), config.WithHTTPClient(hc), config.WithClientID(fmt.Sprintf("client-%02d", i)),
			config.WithStreamIdleTimeout(15*time.Second))

		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
			defer cancel()
			ns, err := c.Namespace(ctx, "routes", opts...)
			if err != nil {
				t.Error(err)
				return
			}
			nss[i] = ns
		}()
	}
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
	for _, ns := range nss {
		nstest.WaitRevision(t, ns, base, waitLimit)
	}
	full, gzipped := snapshotBytes(t, srv.URL(), "routes")

	// (1) A one-key change reaches all 100, for a fraction of the bytes.
	wire.Store(0)
	rev1 := sdksuite.Publish(t, srv, "routes", map[string]any{"cluster/c5": "lb=rr;endpoints=10.0.0.2"})
	for _, ns := range nss {
		nstest.WaitRevision(t, ns, rev1, waitLimit)
	}
	sent := wire.Load()
	if sent*50 >= clients*full {
		t.Errorf("one-key change cost %d bytes; 100 snapshots are %d: want under 1/50", sent, clients*full)
	}
	t.Logf("one-key change: %d bytes to 100 clients; 100 full snapshots: %d bytes (%.0fx), %d gzipped (%.0fx)",
		sent, clients*full, float64(clients*full)/float64(sent), clients*gzipped, float64(clients*gzipped)/float64(sent))

	// (2) A value every schema rejects is refused at publish and reaches
	// nobody.
	if _, err := srv.Publish("routes", map[string]any{"cluster/c7": "lb=BAD"}); err == nil {
		t.Fatal("the server accepted a value its schema refuses")
	}
	if head := srv.Head(); head != rev1 {
		t.Fatalf("a refused publish moved the head to %d", head)
	}

	// (3) new-field: 90 apply it, the 10 strict clients nack it and keep
	// serving the old value.
	rev3 := sdksuite.Publish(t, srv, "routes", map[string]any{"cluster/c9": "lb=rr;new-field=1"})
	for i, ns := range nss {
		if i%10 != 0 {
			nstest.WaitRevision(t, ns, rev3, waitLimit)
			continue
		}
		testutil.Eventually(t, waitLimit, func() bool { return ns.Rejected() > 0 }, "the strict client's rejection")
		if got := ns.String("cluster/c9", ""); got != "lb=rr;endpoints=10.0.0.9" || ns.Revision() != rev1 {
			t.Errorf("strict client %d serves %q at %d; want the old value at %d", i, got, ns.Revision(), rev1)
		}
		if st := ns.Status(); st.LastError.Kind != config.ErrorInvalidData || !errors.Is(st.LastError.Err, config.ErrRejected) {
			t.Errorf("strict client %d status error = %+v", i, st.LastError)
		}
	}
	// /control/clients names exactly the 10, with the error.
	testutil.Eventually(t, waitLimit, func() bool {
		states := controlClients(t, srv.URL())
		nacked, acked := 0, 0
		for _, st := range states {
			if st.Namespace != "routes" {
				continue
			}
			switch {
			case st.NackedRevision == rev3 && strings.Contains(st.NackError, "/cluster~1c9"):
				nacked++
			case st.AckedRevision == rev3:
				acked++
			}
		}
		return nacked == 10 && acked == 90
	}, "every outcome acked")
	for _, st := range controlClients(t, srv.URL()) {
		var i int
		fmt.Sscanf(st.ClientID, "client-%d", &i)
		if strict := i%10 == 0; strict != (st.NackedRevision == rev3) {
			t.Errorf("client %s: nacked %d (strict %v)", st.ClientID, st.NackedRevision, strict)
		}
	}
}

// snapshotBytes is the size of one full snapshot body, plain and gzipped.
func snapshotBytes(t *testing.T, base, ns string) (plain, gzipped int64) {
	t.Helper()
	tr := &http.Transport{DisableCompression: true}
	defer tr.CloseIdleConnections()
	for _, enc := range []string{"identity", "gzip"} {
		req, _ := http.NewRequest(http.MethodGet, base+transport.PathSnapshot+"?ns="+ns, nil)
		req.Header.Set("Accept-Encoding", enc)
		resp, err := (&http.Client{Transport: tr}).Do(req)
		if err != nil {
			t.Fatal(err)
		}
		n, _ := io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if got := resp.Header.Get("Content-Encoding"); (got == "gzip") != (enc == "gzip") {
			t.Fatalf("Accept-Encoding %s got Content-Encoding %q", enc, got)
		}
		if enc == "gzip" {
			gzipped = n
		} else {
			plain = n
		}
	}
	return plain, gzipped
}

func controlClients(t *testing.T, base string) []fakeserver.ClientState {
	t.Helper()
	tr := &http.Transport{}
	defer tr.CloseIdleConnections()
	c, err := controlapi.NewClient(base, controlapi.WithHTTPClient(&http.Client{Transport: tr}))
	if err != nil {
		t.Fatal(err)
	}
	all, err := c.Clients(context.Background())
	if err != nil {
		t.Fatalf("/control/clients: %v", err)
	}
	return all.Clients
}

func TestInvalidSnapshotAtOpen(t *testing.T) {
	invalid := map[string]any{"port": "not-a-number"}
	portSchema := []byte(`{"type":"object","properties":{"port":{"type":"integer"}}}`)

	t.Run("fail-open without last good serves defaults", func(t *testing.T) {
		srv := sdksuite.StartReference(t)
		sdksuite.Publish(t, srv, "svc", invalid)
		c := sdksuite.NewClient(t, sdksuite.Endpoint(srv.URL()))
		ns := sdksuite.Open(t, c, "svc", config.Schema(portSchema), config.Defaults(map[string]any{"port": 8080}))
		if ns.Int("port", 0) != 8080 {
			t.Errorf("port = %d; want the default", ns.Int("port", 0))
		}
		st := ns.Status()
		if st.Origin != config.OriginDefaults || st.LastError.Kind != config.ErrorInvalidData {
			t.Errorf("status = %v from %v, error %v", st.State, st.Origin, st.LastError)
		}
		// A later revision that passes applies normally.
		rev := sdksuite.Publish(t, srv, "svc", map[string]any{"port": 9090})
		nstest.WaitRevision(t, ns, rev, waitLimit)
		if ns.Int("port", 0) != 9090 || ns.Status().Origin != config.OriginNetwork {
			t.Errorf("after the fix: port %d from %v", ns.Int("port", 0), ns.Status().Origin)
		}
	})
	t.Run("fail-closed without last good refuses to open", func(t *testing.T) {
		srv := sdksuite.StartReference(t)
		sdksuite.Publish(t, srv, "svc", invalid)
		c := sdksuite.NewClient(t, sdksuite.Endpoint(srv.URL()))
		ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
		defer cancel()
		_, err := c.Namespace(ctx, "svc", config.Schema(portSchema), config.FailClosed(), config.MaxStaleness(time.Minute))
		if !errors.Is(err, config.ErrStale) || !errors.Is(err, config.ErrRejected) {
			t.Fatalf("Namespace = %v; want ErrStale wrapping the rejection", err)
		}
	})
	for _, failClosed := range []bool{false, true} {
		t.Run(fmt.Sprintf("last good on disk, fail-closed=%v", failClosed), func(t *testing.T) {
			srv := sdksuite.StartReference(t)
			sdksuite.Publish(t, srv, "svc", map[string]any{"port": 1})
			dir, _ := syncedCacheDir(t, srv, "svc")
			bad := sdksuite.Publish(t, srv, "svc", invalid)

			b := sdksuite.NewClient(t, sdksuite.Endpoint(srv.URL()), config.WithCacheDir(dir))
			opts := []config.NamespaceOption{config.Schema(portSchema), config.MaxStaleness(time.Minute)}
			if failClosed {
				opts = append(opts, config.FailClosed())
			}
			ns := sdksuite.Open(t, b, "svc", opts...)
			testutil.Eventually(t, waitLimit, func() bool { return ns.Rejected() > 0 }, "the rejection")
			if ns.Int("port", 0) != 1 || ns.Revision() == bad {
				t.Errorf("serves port %d at %d; want the last good", ns.Int("port", 0), ns.Revision())
			}
		})
	}
}

// TestAckEndpointDown: with every ack failing, applies and reads go on.
func TestAckEndpointDown(t *testing.T) {
	srv := sdksuite.StartReference(t)
	sdksuite.Publish(t, srv, "acks", map[string]any{"v": 0})
	var wire atomic.Int64
	hc, ct := countingClient(&wire)
	ct.refuse = transport.PathAck
	c := sdksuite.NewClient(t, sdksuite.Endpoint(srv.URL()), config.WithHTTPClient(hc))
	ns := sdksuite.Open(t, c, "acks")
	var last int64
	for i := 1; i <= 20; i++ {
		last = sdksuite.Publish(t, srv, "acks", map[string]any{"v": i})
	}
	nstest.WaitRevision(t, ns, last, waitLimit)
	if ns.Int("v", 0) != 20 {
		t.Errorf("v = %d", ns.Int("v", 0))
	}
	testutil.Eventually(t, waitLimit, func() bool { return ct.tries.Load() >= 2 }, "ack retries")
	if srv.Stats().Acks != 0 {
		t.Errorf("acks reached the server: %d", srv.Stats().Acks)
	}
}
