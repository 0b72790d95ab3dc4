package main

import (
	"context"
	"crypto/tls"
	"errors"
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
