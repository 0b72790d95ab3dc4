package main

import (
	"context"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/holdfast-dev/holdfast/config"
	"github.com/holdfast-dev/holdfast/internal/testutil/certtest"
	"github.com/holdfast-dev/holdfast/transport"
)

// TestRevocationCutsStreamsOverTLS: real processes, every hop over TLS —
// holdfast server ← relay ← relay, both relays with -store-tokens. SDK
// clients stream with a token from the server, the first relay and the
// second; 'holdfast token revoke' makes each report unauthorized (not
// Fresh) within 5 s, and they get no later change. Clients of a token
// that expires are told so within 5 s of its expiry.
func TestRevocationCutsStreamsOverTLS(t *testing.T) {
	bin := buildBinary(t)
	ca := certtest.NewCA(t, "holdfast test CA")
	dir := t.TempDir()
	adminFile := filepath.Join(dir, "admin-token")
	srvPair := ca.Server(t, "server")
	srv := startServerProc(t, bin, "-memory", "-tls-cert", srvPair.CertFile, "-tls-key", srvPair.KeyFile, "-bootstrap-token-file", adminFile)
	srv.logs.waitFor(t, "server: created the store's first admin token", srv.copied)
	srvURL := "https://" + srv.addr
	create := func(args ...string) string {
		t.Helper()
		code, stdout, stderr := cli(t, append([]string{"token", "create", "-server", srvURL, "-ca", ca.File, "-token-file", adminFile}, args...)...)
		if code != exitOK {
			t.Fatalf("token create %v: exit %d: %s", args, code, stderr)
		}
		return strings.TrimSpace(stdout)
	}
	if code, _, stderr := cli(t, "publish", "-server", srvURL, "-ca", ca.File, "-token-file", adminFile, "app", "v=1"); code != exitOK {
		t.Fatalf("publish: exit %d: %s", code, stderr)
	}
	startRelay := func(name, upstream string) string {
		t.Helper()
		pair := ca.Server(t, name)
		secret := create("-relay", "-data", "*", name)
		p := startRelayProc(t, bin, upstream, "-upstream-ca", ca.File, "-store-tokens", "-token-file", writeSecret(t, dir, name, secret),
			"-tls-cert", pair.CertFile, "-tls-key", pair.KeyFile)
		return "https://" + p.addr
	}
	hop1 := startRelay("relay-1", srvURL)
	hop2 := startRelay("relay-2", hop1)

	appSecret := create("-data", "app", "app-svc")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	type client struct {
		name string
		ns   *config.Namespace
	}
	open := func(name, url, secret string) client {
		t.Helper()
		c, err := config.New(config.WithEndpoint(url), config.WithBearerToken(secret),
			config.WithTLSConfig(&tls.Config{RootCAs: ca.Pool()}),
			config.WithReconnectBackoff(5*time.Millisecond, 100*time.Millisecond), config.WithUnauthorizedBackoff(time.Second))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Close() })
		var ns *config.Namespace
		// The relays learn a new token by their sync: open once it works.
		deadline := time.Now().Add(waitLimit)
		for {
			octx, ocancel := context.WithTimeout(ctx, 2*time.Second)
			ns, err = c.Namespace(octx, "app")
			ocancel()
			if err == nil || time.Now().After(deadline) {
				break
			}
		}
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		return client{name, ns}
	}
	unauthorized := func(c client) bool {
		st := c.ns.Status()
		return st.State != config.StateFresh && errors.Is(st.LastError.Err, transport.ErrUnauthorized) && !st.LastError.Recovered
	}
	cutWithin := func(cs []client, from time.Time) {
		t.Helper()
		for _, c := range cs {
			for !unauthorized(c) {
				if time.Since(from) > 5*time.Second {
					t.Errorf("%s: still %v 5 s later (last error %v)", c.name, c.ns.Status().State, c.ns.Status().LastError)
					break
				}
				time.Sleep(20 * time.Millisecond)
			}
			if unauthorized(c) {
				t.Logf("%s: unauthorized %v after", c.name, time.Since(from).Round(time.Millisecond))
			}
		}
	}

	clients := []client{open("server", srvURL, appSecret), open("relay", hop1, appSecret), open("relay of a relay", hop2, appSecret)}
	if code, _, stderr := cli(t, "token", "revoke", "-server", srvURL, "-ca", ca.File, "-token-file", adminFile, "app-svc"); code != exitOK {
		t.Fatalf("token revoke: exit %d: %s", code, stderr)
	}
	cutWithin(clients, time.Now())
	if code, _, stderr := cli(t, "publish", "-server", srvURL, "-ca", ca.File, "-token-file", adminFile, "app", "v=2"); code != exitOK {
		t.Fatalf("publish: exit %d: %s", code, stderr)
	}
	time.Sleep(time.Second)
	for _, c := range clients {
		if v, _ := c.ns.Get("v"); v.String() != "1" {
			t.Errorf("%s: v = %s after the revocation, want 1", c.name, v.String())
		}
	}

	// An expiring token.
	briefSecret := create("-data", "app", "-expires", "8s", "brief-svc")
	expires := time.Now().Add(8 * time.Second)
	expiring := []client{open("expiring at the server", srvURL, briefSecret), open("expiring at the relay of a relay", hop2, briefSecret)}
	for _, c := range expiring {
		if unauthorized(c) {
			t.Fatalf("%s: unauthorized before its expiry", c.name)
		}
	}
	time.Sleep(time.Until(expires))
	cutWithin(expiring, expires)
}

// TestWrongTokensAreSlowedAcrossPlanes: holdfast server as a process; a
// peer that sends wrong tokens to the data plane and the control API is
// refused with 429 and Retry-After past its failures, on both (one
// count), while another peer's right token is served throughout.
func TestWrongTokensAreSlowedAcrossPlanes(t *testing.T) {
	bin := buildBinary(t)
	adminFile := filepath.Join(t.TempDir(), "admin-token")
	srv := startServerProc(t, bin, "-memory", "-bootstrap-token-file", adminFile)
	srv.logs.waitFor(t, "server: created the store's first admin token", srv.copied)
	admin, err := os.ReadFile(adminFile)
	if err != nil {
		t.Fatal(err)
	}
	if code, body := request(t, "POST", srv.url()+"/control/namespaces/app/publish", strings.TrimSpace(string(admin)), `{"puts":{"v":1}}`); code != http.StatusOK {
		t.Fatalf("publish: %d %s", code, body)
	}
	from := func(ip string) *http.Client {
		d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(ip)}}
		tr := &http.Transport{DialContext: d.DialContext}
		t.Cleanup(tr.CloseIdleConnections)
		return &http.Client{Transport: tr, Timeout: 10 * time.Second}
	}
	attacker, healthy := from("127.0.0.2"), from("127.0.0.1")
	get := func(c *http.Client, path, token string) *http.Response {
		req, _ := http.NewRequest("GET", srv.url()+path, nil)
		req.Header.Set("Authorization", "Bearer "+token)
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp
	}
	codes := map[int]int{}
	start := time.Now()
	for i := range 200 {
		path := "/sdk/snapshot?ns=app"
		if i%2 == 1 {
			path = "/control/namespaces/app/status"
		}
		resp := get(attacker, path, "hfs_wrong-token-not-in-the-store-000000000000")
		codes[resp.StatusCode]++
		if i == 199 && (resp.StatusCode != http.StatusTooManyRequests || resp.Header.Get("Retry-After") == "") {
			t.Errorf("the last wrong token: %d (Retry-After %q), want 429 with Retry-After", resp.StatusCode, resp.Header.Get("Retry-After"))
		}
		if c := get(healthy, "/sdk/snapshot?ns=app", strings.TrimSpace(string(admin))).StatusCode; c != http.StatusOK {
			t.Fatalf("another peer's right token: %d", c)
		}
	}
	elapsed := time.Since(start)
	t.Logf("200 wrong tokens from one peer, both planes, in %v: %v", elapsed.Round(time.Millisecond), codes)
	// The burst (30, counted across both planes), then 5 a second.
	if limit := 30 + int(5*elapsed.Seconds()) + 2; codes[http.StatusUnauthorized] > limit {
		t.Errorf("%d wrong tokens looked at in %v, want at most %d", codes[http.StatusUnauthorized], elapsed, limit)
	}
}
