package main

import (
	"crypto/tls"
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/holdfast-dev/holdfast/config"
	"github.com/holdfast-dev/holdfast/internal/testutil"
	"github.com/holdfast-dev/holdfast/internal/testutil/certtest"
)

// TestTLSEndToEnd: holdfast server ← holdfast relay ← SDK, every hop over
// TLS with mutual TLS (certificates made here, ECDSA P-256): the relay
// presents its client certificate upstream, the SDK its own to the
// relay; a client without a certificate, or with one of another CA, is
// refused at the handshake. Then the relay's certificate is rotated:
// new connections get the new one, the SDK's stream carries on.
func TestTLSEndToEnd(t *testing.T) {
	bin := buildBinary(t)
	ca := certtest.NewCA(t, "holdfast test CA")
	srvPair := ca.Server(t, "server")
	relayDir := t.TempDir()
	relayCert, relayKey := filepath.Join(relayDir, "tls.crt"), filepath.Join(relayDir, "tls.key")
	ca.Server(t, "relay-1").Install(t, relayCert, relayKey)
	relayClient := ca.Client(t, "relay-1")
	operator := ca.Client(t, "operator")
	app := ca.Client(t, "app")

	srv := startServerProc(t, bin, "-memory", "-tls-cert", srvPair.CertFile, "-tls-key", srvPair.KeyFile, "-tls-client-ca", ca.File)
	srvURL := "https://" + srv.addr
	opTr := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: ca.Pool(), Certificates: []tls.Certificate{operator.TLS}}, ForceAttemptHTTP2: true}
	defer opTr.CloseIdleConnections()
	op := &http.Client{Transport: opTr, Timeout: 10 * time.Second}
	opc := controlClient(t, srvURL, op)
	publish := func(v int) int64 {
		t.Helper()
		rev, err := publishApp(opc, "v", v)
		if err != nil {
			t.Fatalf("publish over mTLS: %v", err)
		}
		return rev
	}
	publish(1)

	rl := startRelayProc(t, bin, srvURL, "-upstream-ca", ca.File, "-upstream-cert", relayClient.CertFile, "-upstream-key", relayClient.KeyFile,
		"-tls-cert", relayCert, "-tls-key", relayKey, "-tls-client-ca", ca.File)
	relayURL := "https://" + rl.addr
	if !strings.Contains(rl.logs.String(), `"url":"https://`) {
		t.Errorf("the relay does not say it serves https: %s", rl.logs.String())
	}

	c, err := config.New(config.WithEndpoint(relayURL),
		config.WithTLSConfig(&tls.Config{RootCAs: ca.Pool(), Certificates: []tls.Certificate{app.TLS}}),
		config.WithReconnectBackoff(5*time.Millisecond, 100*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ns := openNS(t, c, "app")
	if v, _ := ns.Get("v"); v.String() != "1" {
		t.Fatalf("v = %s, want 1", v.String())
	}
	rec := record(ns)
	rev := publish(2)
	rec.checkIncreasing(t, "the SDK over TLS", rev)

	// Refused at the handshake: no certificate, another CA's, and a
	// client that does not trust the relay's CA.
	other := certtest.NewCA(t, "another CA")
	for name, conf := range map[string]*tls.Config{
		"no client certificate":   {RootCAs: ca.Pool()},
		"another CA's":            {RootCAs: ca.Pool(), Certificates: []tls.Certificate{other.Client(t, "intruder").TLS}},
		"an untrusted server CA":  {RootCAs: other.Pool(), Certificates: []tls.Certificate{app.TLS}},
		"plain http to the relay": nil,
	} {
		tr := &http.Transport{TLSClientConfig: conf, ForceAttemptHTTP2: true}
		url := relayURL
		if conf == nil {
			url = "http://" + rl.addr
		}
		resp, err := (&http.Client{Transport: tr, Timeout: 10 * time.Second}).Get(url + "/sdk/snapshot?ns=app")
		if err == nil {
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				t.Errorf("%s: served %s", name, b)
			}
		}
		tr.CloseIdleConnections()
	}

	// Rotation: the relay serves the new certificate to new
	// connections, without a restart; the SDK's connection carries on.
	servedCN := func() string {
		conn, err := tls.Dial("tcp", rl.addr, &tls.Config{RootCAs: ca.Pool(), Certificates: []tls.Certificate{app.TLS}})
		if err != nil {
			return "error: " + err.Error()
		}
		defer conn.Close()
		return conn.ConnectionState().PeerCertificates[0].Subject.CommonName
	}
	if got := servedCN(); got != "relay-1" {
		t.Fatalf("relay serves %q, want relay-1", got)
	}
	ca.Server(t, "relay-1-rotated").Install(t, relayCert, relayKey)
	testutil.Eventually(t, waitLimit, func() bool { return servedCN() == "relay-1-rotated" }, "the rotated certificate served")
	testutil.Eventually(t, waitLimit, func() bool { return strings.Contains(rl.logs.String(), "TLS certificate reloaded") }, "the reload logged")
	rev = publish(3)
	rec.checkIncreasing(t, "the SDK after the rotation", rev)
}

// TestPlaintextNeedsFlag: a relay or server listening on an address other
// than loopback without TLS refuses to start unless -plaintext, and then
// warns.
func TestPlaintextNeedsFlag(t *testing.T) {
	bin := buildBinary(t)
	for _, args := range [][]string{
		{"server", "-memory", "-addr", "0.0.0.0:0"},
		{"relay", "-addr", "0.0.0.0:0", "-upstream", "http://127.0.0.1:1"},
	} {
		r := runBinary(t, bin, nil, args...)
		if r.code == exitOK || !strings.Contains(r.stderr, "-plaintext") {
			t.Errorf("%s on 0.0.0.0 without TLS: %+v", args[0], r)
		}
	}
}
