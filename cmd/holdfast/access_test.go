package main

import (
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/holdfast-dev/holdfast/access"
	"github.com/holdfast-dev/holdfast/internal/testutil"
	"github.com/holdfast-dev/holdfast/transport"
)

// testTokens are the secrets of the tests' tokens, made in a server's
// store by 'holdfast token create' with its bootstrap admin token.
type testTokens struct {
	admin    string // bootstrap-admin: admin, control and data "*"
	deploy   string // deploy-bot: control payments.*
	payments string // payments-svc: data payments.*
	edge     string // edge-relay: data payments.*, the relay scope
}

// bootstrapServer starts `holdfast server -memory` in-process with a
// bootstrap admin token, creates the tests' tokens in its store and
// returns it, its URL and their secrets.
func bootstrapServer(t *testing.T, args ...string) (*started, string, testTokens) {
	t.Helper()
	adminFile := filepath.Join(t.TempDir(), "admin-token")
	s := start(t, append([]string{"server", "-memory", "-addr", "127.0.0.1:0", "-bootstrap-token-file", adminFile, "-log-format", "json"}, args...)...)
	base, _ := s.stderr.waitFor(t, "serving", s.done)["url"].(string)
	admin, err := os.ReadFile(adminFile)
	if err != nil {
		t.Fatal(err)
	}
	create := func(args ...string) string {
		t.Helper()
		code, stdout, stderr := cli(t, append([]string{"token", "create", "-server", base, "-token-file", adminFile}, args...)...)
		if code != exitOK {
			t.Fatalf("token create %v: exit %d: %s", args, code, stderr)
		}
		return strings.TrimSpace(stdout)
	}
	return s, base, testTokens{
		admin:    strings.TrimSpace(string(admin)),
		deploy:   create("-control", "payments.*", "deploy-bot"),
		payments: create("-data", "payments.*", "payments-svc"),
		edge:     create("-data", "payments.*", "-relay", "edge-relay"),
	}
}

// noSecrets fails if text shows one of the secrets.
func (k testTokens) noSecrets(t *testing.T, what, text string) {
	t.Helper()
	for _, s := range []string{k.admin, k.deploy, k.payments, k.edge} {
		if s != "" && strings.Contains(text, s) {
			t.Errorf("%s shows a secret:\n%s", what, text)
		}
	}
}

// request sends one request with "Authorization: Bearer secret" (none for
// "") and returns the status and body.
func request(t *testing.T, method, url, secret, body string) (int, string) {
	t.Helper()
	tr := &http.Transport{}
	defer tr.CloseIdleConnections()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if secret != "" {
		req.Header.Set("Authorization", "Bearer "+secret)
	}
	resp, err := (&http.Client{Transport: tr, Timeout: 15 * time.Second}).Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(data)
}

// wantRefusal checks a 401 or 403 and its JSON body, which shows no
// secret (a refusal names tokens, never their secrets).
func wantRefusal(t *testing.T, what string, code int, body string, status int, message string) {
	t.Helper()
	var eb transport.ErrorBody
	if code != status || json.Unmarshal([]byte(body), &eb) != nil || message != "" && eb.Message != message {
		t.Fatalf("%s: %d %s, want %d %q", what, code, body, status, message)
	}
	if strings.Contains(body, access.SecretPrefix) {
		t.Fatalf("%s: the refusal shows a secret: %s", what, body)
	}
}

// TestServerAndRelayTokens: with the store's tokens (made by 'holdfast
// token create'), `holdfast server` requires them on the control API, the
// data plane and the admin endpoints, with their scopes; a `holdfast relay
// -store-tokens` process enforces the same scopes on its clients, and a
// second relay behind it, given its token but not -store-tokens (a relay
// is as closed as its upstream by default), syncs the records from it (a
// chain of relays has one token system); a token revoked in the store is
// refused at the end of the chain within 5 s. A third relay, with -open,
// serves a client without a token, and warns at start. No secret reaches
// any log.
func TestServerAndRelayTokens(t *testing.T) {
	s, base, k := bootstrapServer(t, "-heartbeat", "200ms")
	if rec := s.stderr.waitFor(t, "server: access control on", s.done); rec["level"] != "INFO" {
		t.Errorf("access control on: %v", rec)
	}

	publish := base + "/control/namespaces/payments.prod/publish"
	code, body := request(t, "POST", publish, "", `{"puts":{"v":1}}`)
	wantRefusal(t, "publish without a token", code, body, http.StatusUnauthorized, "")
	code, body = request(t, "POST", publish, k.payments, `{"puts":{"v":1}}`)
	wantRefusal(t, "publish with a data token", code, body, http.StatusForbidden, `token "payments-svc" has no control scope`)
	code, body = request(t, "POST", base+"/control/namespaces/fraud.prod/publish", k.deploy, `{"puts":{"v":1}}`)
	wantRefusal(t, "publish outside the scope", code, body, http.StatusForbidden, `token "deploy-bot" may not control namespace "fraud.prod"`)
	if code, body := request(t, "POST", publish, k.deploy, `{"puts":{"v":1}}`); code != http.StatusOK {
		t.Fatalf("publish: %d %s", code, body)
	}
	if code, body := request(t, "GET", base+"/sdk/snapshot?ns=payments.prod", k.payments, ""); code != http.StatusOK || !strings.Contains(body, `"v":1`) {
		t.Fatalf("snapshot: %d %s", code, body)
	}
	code, body = request(t, "GET", base+"/sdk/snapshot?ns=fraud.prod", k.payments, "")
	wantRefusal(t, "snapshot outside the scope", code, body, http.StatusForbidden, `token "payments-svc" may not read namespace "fraud.prod"`)
	// The admin endpoints on the data port: the admin scope.
	for secret, want := range map[string]int{"": http.StatusUnauthorized, k.payments: http.StatusForbidden, k.admin: http.StatusOK} {
		if code, body := request(t, "GET", base+"/statusz", secret, ""); code != want {
			t.Errorf("/statusz with a token %v: %d %s, want %d", secret != "", code, body, want)
		}
	}

	bin := buildBinary(t)
	edgeFile := writeSecret(t, t.TempDir(), "edge-token", k.edge)
	r := startRelayProc(t, bin, base, "-store-tokens", "-token-file", edgeFile)
	r.logs.waitFor(t, "relay: access control on", r.copied)
	// A second relay behind the first, with the same relay token: closed
	// without -store-tokens.
	r2 := startRelayProc(t, bin, r.url(), "-token-file", edgeFile)
	r2.logs.waitFor(t, "relay: requiring the store's tokens of clients, as its upstream does (-open to serve without)", r2.copied)
	r2.logs.waitFor(t, "relay: access control on", r2.copied)
	// An open relay is asked for, and warns.
	ro := startRelayProc(t, bin, base, "-open", "-token-file", edgeFile)
	if rec := ro.logs.waitFor(t, "relay: -open: every client may read, without a token, every namespace the relay's own token reads upstream", ro.copied); rec["level"] != "WARN" {
		t.Errorf("the -open warning: %v", rec)
	}
	testutil.Eventually(t, waitLimit, func() bool {
		code, _ := request(t, "GET", ro.url()+"/sdk/snapshot?ns=payments.prod", "", "")
		return code == http.StatusOK
	}, "the open relay to serve a client without a token")
	ro.stop()
	for _, p := range []*relayProc{r, r2} {
		code, body = request(t, "GET", p.url()+"/sdk/snapshot?ns=payments.prod", "", "")
		wantRefusal(t, "no token at the relay", code, body, http.StatusUnauthorized, "")
		testutil.Eventually(t, waitLimit, func() bool {
			code, _ := request(t, "GET", p.url()+"/sdk/snapshot?ns=payments.prod", k.payments, "")
			return code == http.StatusOK
		}, "the store's token works at "+p.url())
		code, body = request(t, "GET", p.url()+"/sdk/snapshot?ns=fraud.prod", k.payments, "")
		wantRefusal(t, "fraud.prod at the relay", code, body, http.StatusForbidden, `token "payments-svc" may not read namespace "fraud.prod"`)
		if code, body := request(t, "GET", p.url()+"/sdk/snapshot?ns=payments.prod", k.payments, ""); code != http.StatusOK || !strings.Contains(body, `"v":1`) {
			t.Fatalf("snapshot through the relay: %d %s", code, body)
		}
	}
	// A client token cannot read the records from a relay.
	code, body = request(t, "POST", r.url()+"/control/tokens/sync", k.payments, `{"after":0}`)
	wantRefusal(t, "a token sync without the relay scope", code, body, http.StatusForbidden, `token "payments-svc" has no relay scope`)

	if code, _, stderr := cli(t, "token", "revoke", "-server", base, "-token", k.admin, "payments-svc"); code != exitOK {
		t.Fatalf("token revoke: exit %d: %s", code, stderr)
	}
	revoked := time.Now()
	testutil.Eventually(t, 5*time.Second, func() bool {
		code, _ := request(t, "GET", r2.url()+"/sdk/snapshot?ns=payments.prod", k.payments, "")
		return code == http.StatusUnauthorized
	}, "the revoked token refused at the second relay within 5 s")
	t.Logf("refused at the second relay %v after the revoke returned", time.Since(revoked).Round(time.Millisecond))

	r2.stop()
	r.stop()
	if code := s.stop(t); code != exitOK {
		t.Fatalf("server: exit %d\n%s", code, s.stderr.String())
	}
	k.noSecrets(t, "server's log", s.stderr.String())
	k.noSecrets(t, "the relay's log", r.logs.String())
	k.noSecrets(t, "the second relay's log", r2.logs.String())
}

// TestServerOpenWarns: without -tokens server says at start, at WARN, that
// anyone may read and change everything.
func TestServerOpenWarns(t *testing.T) {
	s := start(t, "server", "-memory", "-addr", "127.0.0.1:0", "-log-format", "json")
	s.stderr.waitFor(t, "serving", s.done)
	rec := s.stderr.waitFor(t, "server: no tokens configured: anyone who reaches -addr may read and change everything", s.done)
	if rec["level"] != "WARN" {
		t.Errorf("the warning: %v", rec)
	}
	if code := s.stop(t); code != exitOK {
		t.Fatalf("exit %d", code)
	}
}

// TestTokenFilesAreGone: -tokens is no flag of server or relay any
// more (one token system: the store's); asking for it is a usage error.
func TestTokenFilesAreGone(t *testing.T) {
	for _, args := range [][]string{
		{"server", "-memory", "-addr", "127.0.0.1:0", "-tokens", "tokens.json"},
		{"relay", "-addr", "127.0.0.1:0", "-upstream", "http://127.0.0.1:1", "-tokens", "tokens.json"},
	} {
		code, out, errOut := runCapture(args...)
		if code != exitUsage || !strings.Contains(errOut, "flag provided but not defined: -tokens") || out != "" {
			t.Errorf("%q: exit %d, stdout %q, stderr:\n%s\nwant exit 2 and the flag unknown", args, code, out, errOut)
		}
	}
}

// TestTokenCreateAdminAloneSaysItCannotPublish: an admin token made
// without -control (the bootstrap recipe's mistake: once the bootstrap
// token is revoked, nobody can publish) is created, with a note that says
// so; one with -control gets no note.
func TestTokenCreateAdminAloneSaysItCannotPublish(t *testing.T) {
	_, base, k := bootstrapServer(t)
	const note = `"ops" may manage tokens but not publish or roll back: give it -control PATTERNS for that`
	code, _, stderr := cli(t, "token", "create", "-server", base, "-token", k.admin, "-admin", "ops")
	if code != exitOK || !strings.Contains(stderr, note) {
		t.Errorf("token create -admin: exit %d, stderr %q; want 0 and %q", code, stderr, note)
	}
	code, _, stderr = cli(t, "token", "create", "-server", base, "-token", k.admin, "-admin", "-control", "*", "alice-admin")
	if code != exitOK || strings.Contains(stderr, "note:") {
		t.Errorf("token create -admin -control '*': exit %d, stderr %q; want 0 and no note", code, stderr)
	}
}
