package main

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/holdfast-dev/holdfast/config"
	"github.com/holdfast-dev/holdfast/internal/testutil"
	"github.com/holdfast-dev/holdfast/internal/testutil/certtest"
	"github.com/holdfast-dev/holdfast/transport"
)

// TestCertificateIdentityEndToEnd: holdfast server ← holdfast relay ← SDK,
// every hop over mutual TLS with certificates made here, the store
// requiring tokens. 'holdfast token create -subject' (the operator's CLI
// over mTLS, -ca/-cert/-key) makes a certificate identity: a caller with
// that certificate and no token publishes within its scope, the history
// names its subject as the actor, and the SDK reads through the relay with
// its certificate alone; a certificate of the same CA without a record is
// refused (401), out of scope 403. Revoked, it is refused by the server
// and the relay within 5 s, and its SDK's open stream is cut.
func TestCertificateIdentityEndToEnd(t *testing.T) {
	bin := buildBinary(t)
	ca := certtest.NewCA(t, "holdfast test CA")
	srvPair := ca.Server(t, "server")
	relayPair := ca.Server(t, "relay-1")
	relayClient := ca.Client(t, "relay-1")
	operator := ca.Client(t, "operator")
	deploy := ca.Client(t, "deploy-bot")
	stranger := ca.Client(t, "stranger")
	leaf, err := x509.ParseCertificate(deploy.TLS.Certificate[0])
	if err != nil {
		t.Fatal(err)
	}
	subject := leaf.Subject.String()

	dir := t.TempDir()
	adminFile := filepath.Join(dir, "admin-token")
	srv := startServerProc(t, bin, "-memory", "-tls-cert", srvPair.CertFile, "-tls-key", srvPair.KeyFile, "-tls-client-ca", ca.File,
		"-bootstrap-token-file", adminFile)
	srv.logs.waitFor(t, "server: created the store's first admin token", srv.copied)
	srvURL := "https://" + srv.addr
	mtls := func(p certtest.Pair) *http.Client {
		tr := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: ca.Pool(), Certificates: []tls.Certificate{p.TLS}}, ForceAttemptHTTP2: true}
		t.Cleanup(tr.CloseIdleConnections)
		return &http.Client{Transport: tr, Timeout: 10 * time.Second}
	}
	call := func(hc *http.Client, method, url, body string) (int, string) {
		t.Helper()
		req, _ := http.NewRequest(method, url, strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		resp, err := hc.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	cliTLS := []string{"-server", srvURL, "-ca", ca.File, "-cert", operator.CertFile, "-key", operator.KeyFile, "-token-file", adminFile}
	create := func(args ...string) (string, string) {
		t.Helper()
		code, stdout, stderr := cli(t, append(append([]string{"token", "create"}, cliTLS...), args...)...)
		if code != exitOK {
			t.Fatalf("token create %v: exit %d: %s", args, code, stderr)
		}
		return strings.TrimSpace(stdout), stderr
	}
	out, msg := create("-subject", subject, "-control", "app", "-data", "app", "deploy-bot")
	if out != "" || !strings.Contains(msg, "certificate identity") {
		t.Fatalf("token create -subject printed %q, %q: want no secret", out, msg)
	}
	relaySecret, _ := create("-relay", "-data", "*", "edge-1")

	// The certificate alone publishes, as its subject.
	if code, body := call(mtls(deploy), "POST", srvURL+"/control/namespaces/app/publish", `{"puts":{"v":1},"actor":"alice"}`); code != http.StatusOK {
		t.Fatalf("publish with the certificate identity: %d %s", code, body)
	}
	code, body := call(mtls(operator), "GET", srvURL+"/control/namespaces/app/history", "")
	if code == http.StatusOK {
		t.Fatalf("history without a token nor a certificate identity: %d %s", code, body)
	}
	code, stdout, stderr := cli(t, append([]string{"history"}, append(cliTLS, "app")...)...)
	if code != exitOK || !strings.Contains(stdout, subject+" for alice") {
		t.Fatalf("history: exit %d: want the actor %q for alice: %s%s", code, subject, stdout, stderr)
	}
	if code, body := call(mtls(deploy), "POST", srvURL+"/control/namespaces/other/publish", `{"puts":{"v":1}}`); code != http.StatusForbidden {
		t.Errorf("publish outside the identity's scope: %d %s, want 403", code, body)
	}
	if code, body := call(mtls(stranger), "GET", srvURL+"/sdk/snapshot?ns=app", ""); code != http.StatusUnauthorized {
		t.Errorf("a certificate without a record: %d %s, want 401", code, body)
	}

	// Through a relay that checks its clients against the store's records.
	rl := startRelayProc(t, bin, srvURL, "-upstream-ca", ca.File, "-upstream-cert", relayClient.CertFile, "-upstream-key", relayClient.KeyFile,
		"-tls-cert", relayPair.CertFile, "-tls-key", relayPair.KeyFile, "-tls-client-ca", ca.File,
		"-store-tokens", "-token-file", writeSecret(t, dir, "relay-token", relaySecret))
	relayURL := "https://" + rl.addr
	for _, base := range []string{srvURL, relayURL} {
		testutil.Eventually(t, waitLimit, func() bool {
			code, _ := call(mtls(deploy), "GET", base+"/sdk/snapshot?ns=app", "")
			return code == http.StatusOK
		}, "the certificate identity reads at "+base)
	}
	c, err := config.New(config.WithEndpoint(relayURL),
		config.WithTLSConfig(&tls.Config{RootCAs: ca.Pool(), Certificates: []tls.Certificate{deploy.TLS}}),
		config.WithReconnectBackoff(5*time.Millisecond, 100*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ns := openNS(t, c, "app")
	if ns.Int("v", 0) != 1 {
		t.Fatalf("v = %d through the relay, want 1", ns.Int("v", 0))
	}
	if code, body := call(mtls(stranger), "GET", relayURL+"/sdk/snapshot?ns=app", ""); code != http.StatusUnauthorized {
		t.Errorf("a certificate without a record, at the relay: %d %s, want 401", code, body)
	}

	if code, _, stderr := cli(t, append(append([]string{"token", "revoke"}, cliTLS...), "deploy-bot")...); code != exitOK {
		t.Fatalf("token revoke: exit %d: %s", code, stderr)
	}
	revoked := time.Now()
	for _, base := range []string{srvURL, relayURL} {
		testutil.Eventually(t, 5*time.Second-time.Since(revoked), func() bool {
			code, _ := call(mtls(deploy), "GET", base+"/sdk/snapshot?ns=app", "")
			return code == http.StatusUnauthorized
		}, "the revoked identity refused at "+base+" within 5 s")
		t.Logf("refused at %s %v after the revoke returned", base, time.Since(revoked).Round(time.Millisecond))
	}
	// The SDK's open stream through the relay is cut too: it says
	// unauthorized, not Fresh.
	testutil.Eventually(t, 5*time.Second-time.Since(revoked), func() bool {
		st := ns.Status()
		return st.State != config.StateFresh && errors.Is(st.LastError.Err, transport.ErrUnauthorized)
	}, "the revoked identity's SDK stream through the relay told unauthorized within 5 s")
	t.Logf("its SDK stream unauthorized %v after the revoke returned", time.Since(revoked).Round(time.Millisecond))
}
