package proxytest

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/holdfast-dev/holdfast/config"
	"github.com/holdfast-dev/holdfast/internal/fakeserver"
	"github.com/holdfast-dev/holdfast/internal/sdksuite"
	"github.com/holdfast-dev/holdfast/internal/testutil"
)

// connectProxy is a forward proxy: CONNECT tunnels, and plain requests in
// absolute form, to the addresses that names map to (the client never
// resolves tlsHost: the proxy does, as a corporate proxy would).
type connectProxy struct {
	*httptest.Server
	hosts    map[string]string // host:port → loopback address
	connects atomic.Int64
	forwards atomic.Int64
	wg       sync.WaitGroup // tunnels
}

func startConnectProxy(t *testing.T, hosts map[string]string) *connectProxy {
	t.Helper()
	p := &connectProxy{hosts: hosts}
	fwd := &httputil.ReverseProxy{
		Rewrite: func(r *httputil.ProxyRequest) {
			r.Out.URL.Host = p.hosts[r.In.URL.Host]
		},
		FlushInterval: -1,
		Transport:     &http.Transport{},
	}
	p.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		to, ok := p.hosts[r.Host]
		if !ok {
			http.Error(w, "unknown host "+r.Host, http.StatusBadGateway)
			return
		}
		if r.Method != http.MethodConnect {
			p.forwards.Add(1)
			fwd.ServeHTTP(w, r)
			return
		}
		p.connects.Add(1)
		up, err := net.Dial("tcp", to)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadGateway)
			return
		}
		w.WriteHeader(http.StatusOK)
		down, _, err := http.NewResponseController(w).Hijack()
		if err != nil {
			_ = up.Close()
			return
		}
		p.wg.Add(2)
		pipe := func(dst, src net.Conn) {
			defer p.wg.Done()
			_, _ = io.Copy(dst, src)
			_ = dst.Close()
			_ = src.Close()
		}
		go pipe(up, down)
		go pipe(down, up)
	}))
	t.Cleanup(func() {
		p.Close()
		p.wg.Wait()
		fwd.Transport.(*http.Transport).CloseIdleConnections()
	})
	return p
}

// childEnv names the endpoint a child process of TestForwardProxy opens.
const childEnv = "HOLDFAST_PROXYTEST_ENDPOINT"

// The SDK honours HTTPS_PROXY and HTTP_PROXY: a client in a process with
// them set reaches the server only through the proxy (a CONNECT tunnel to
// a TLS-terminating front, or plain requests), opens, and has its ack
// recorded. The client runs in a child process: net/http reads the
// environment once per process.
func TestForwardProxy(t *testing.T) {
	if ep := os.Getenv(childEnv); ep != "" {
		forwardProxyChild(t, ep)
		return
	}
	srv := sdksuite.StartReference(t, fakeserver.WithHeartbeat(fakeserver.DefaultHeartbeat))
	if _, err := srv.Publish("app", map[string]any{"v": "through the proxy"}); err != nil {
		t.Fatal(err)
	}
	c := newCerts(t)
	target, err := url.Parse(srv.URL())
	if err != nil {
		t.Fatal(err)
	}
	front := httptest.NewUnstartedServer(httputil.NewSingleHostReverseProxy(target))
	front.TLS = &tls.Config{Certificates: []tls.Certificate{c.serverCertificate}}
	front.EnableHTTP2 = true
	front.StartTLS()
	t.Cleanup(front.Close)
	const tlsName, plainName = tlsHost + ":443", "plain." + tlsHost + ":80"
	p := startConnectProxy(t, map[string]string{tlsName: front.Listener.Addr().String(), plainName: srv.Addr()})
	for _, tc := range []struct{ name, env, endpoint string }{
		{"HTTPS_PROXY", "HTTPS_PROXY", "https://" + tlsName},
		{"HTTP_PROXY", "HTTP_PROXY", "http://" + plainName},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := p.connects.Load() + p.forwards.Load()
			cmd := exec.Command(os.Args[0], "-test.run=^TestForwardProxy$", "-test.v")
			cmd.Env = append(os.Environ(), childEnv+"="+tc.endpoint, tc.env+"="+p.URL, "SSL_CERT_FILE="+c.caFile, "NO_PROXY=", "no_proxy=")
			out, err := cmd.CombinedOutput()
			if err != nil {
				t.Fatalf("the client through %s: %v\n%s", tc.env, err, out)
			}
			if p.connects.Load()+p.forwards.Load() == before {
				t.Errorf("the proxy saw no request:\n%s", out)
			}
			id := "forward-" + tc.endpoint
			acked := false
			for _, cs := range srv.Clients() {
				acked = acked || cs.ClientID == id && cs.AckedRevision > 0
			}
			if !acked {
				t.Errorf("no ack of %s recorded: %+v", id, srv.Clients())
			}
		})
	}
}

// forwardProxyChild opens namespace "app" at endpoint and waits until the
// server lists its ack (asked through the same proxy).
func forwardProxyChild(t *testing.T, endpoint string) {
	id := "forward-" + endpoint
	cl := sdksuite.NewDefaultClient(t, sdksuite.Endpoint(endpoint), config.WithClientID(id))
	ns := sdksuite.Open(t, cl, "app")
	if v, _ := ns.Get("v"); v.String() != "through the proxy" {
		t.Fatalf("v = %s", v)
	}
	hc := &http.Client{Timeout: 5 * time.Second} // the environment's proxy and roots, as the SDK's
	defer hc.CloseIdleConnections()
	recorded := func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, strings.TrimSuffix(endpoint, "/")+"/control/clients", nil)
		if err != nil {
			return false
		}
		resp, err := hc.Do(req)
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		var body json.RawMessage
		if json.NewDecoder(resp.Body).Decode(&body) != nil {
			return false
		}
		return strings.Contains(string(body), id)
	}
	if !testutil.Wait(20*time.Second, recorded) {
		t.Fatal("the server lists no ack of this client after 20 s")
	}
}
