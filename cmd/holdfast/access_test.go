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

	"github.com/holdfast-dev/holdfast/transport"
)

const (
	deploySecret   = "s3cret-deploy-bot-000002"
	paymentsSecret = "s3cret-payments-svc-0001"
	edgeSecret     = "s3cret-edge-relay-000004"
)

// tokensFile writes the tests' token file and returns its path.
func tokensFile(t *testing.T) string {
	t.Helper()
	name := filepath.Join(t.TempDir(), "tokens.json")
	data := `{"tokens":[
		{"name":"deploy-bot","token":"` + deploySecret + `","control":["payments.*"]},
		{"name":"payments-svc","token":"` + paymentsSecret + `","data":["payments.*"]},
		{"name":"edge-relay","token":"` + edgeSecret + `","data":["payments.*"]}
	]}`
	if err := os.WriteFile(name, []byte(data), 0o600); err != nil {
		t.Fatal(err)
	}
	return name
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

func noSecrets(t *testing.T, what, text string) {
	t.Helper()
	for _, s := range []string{deploySecret, paymentsSecret, edgeSecret} {
		if strings.Contains(text, s) {
			t.Errorf("%s shows a secret:\n%s", what, text)
		}
	}
}

// wantRefusal checks a 401 or 403 and its JSON body.
func wantRefusal(t *testing.T, what string, code int, body string, status int, message string) {
	t.Helper()
	var eb transport.ErrorBody
	if code != status || json.Unmarshal([]byte(body), &eb) != nil || message != "" && eb.Message != message {
		t.Fatalf("%s: %d %s, want %d %q", what, code, body, status, message)
	}
	noSecrets(t, what, body)
}

// TestServerAndRelayTokens: `holdfast server -tokens FILE` requires FILE's
// tokens on the control API and the data plane, with their scopes; a
// `holdfast relay -tokens FILE -token OWN` process enforces the same
// scopes on its clients and follows the origin with its own token. No
// secret reaches either log.
func TestServerAndRelayTokens(t *testing.T) {
	file := tokensFile(t)
	s := start(t, "server", "-memory", "-addr", "127.0.0.1:0", "-tokens", file, "-heartbeat", "200ms", "-log-format", "json")
	base, _ := s.stderr.waitFor(t, "serving", s.done)["url"].(string)
	if rec := s.stderr.waitFor(t, "server: access control on", s.done); rec["level"] != "INFO" {
		t.Errorf("access control on: %v", rec)
	}

	publish := base + "/control/namespaces/payments.prod/publish"
	code, body := request(t, "POST", publish, "", `{"puts":{"v":1}}`)
	wantRefusal(t, "publish without a token", code, body, http.StatusUnauthorized, "")
	code, body = request(t, "POST", publish, paymentsSecret, `{"puts":{"v":1}}`)
	wantRefusal(t, "publish with a data token", code, body, http.StatusForbidden, `token "payments-svc" has no control scope`)
	code, body = request(t, "POST", base+"/control/namespaces/fraud.prod/publish", deploySecret, `{"puts":{"v":1}}`)
	wantRefusal(t, "publish outside the scope", code, body, http.StatusForbidden, `token "deploy-bot" may not control namespace "fraud.prod"`)
	if code, body := request(t, "POST", publish, deploySecret, `{"puts":{"v":1}}`); code != http.StatusOK {
		t.Fatalf("publish: %d %s", code, body)
	}
	if code, body := request(t, "GET", base+"/sdk/snapshot?ns=payments.prod", paymentsSecret, ""); code != http.StatusOK || !strings.Contains(body, `"v":1`) {
		t.Fatalf("snapshot: %d %s", code, body)
	}
	code, body = request(t, "GET", base+"/sdk/snapshot?ns=fraud.prod", paymentsSecret, "")
	wantRefusal(t, "snapshot outside the scope", code, body, http.StatusForbidden, `token "payments-svc" may not read namespace "fraud.prod"`)

	r := startRelayProc(t, buildBinary(t), base, "-token", edgeSecret, "-tokens", file)
	r.logs.waitFor(t, "relay: access control on", r.copied)
	code, body = request(t, "GET", r.url()+"/sdk/snapshot?ns=payments.prod", "", "")
	wantRefusal(t, "no token at the relay", code, body, http.StatusUnauthorized, "")
	code, body = request(t, "GET", r.url()+"/sdk/snapshot?ns=fraud.prod", paymentsSecret, "")
	wantRefusal(t, "fraud.prod at the relay", code, body, http.StatusForbidden, `token "payments-svc" may not read namespace "fraud.prod"`)
	if code, body := request(t, "GET", r.url()+"/sdk/snapshot?ns=payments.prod", paymentsSecret, ""); code != http.StatusOK || !strings.Contains(body, `"v":1`) {
		t.Fatalf("snapshot through the relay: %d %s", code, body)
	}
	r.stop()
	if code := s.stop(t); code != exitOK {
		t.Fatalf("server: exit %d\n%s", code, s.stderr.String())
	}
	noSecrets(t, "server's log", s.stderr.String())
	noSecrets(t, "the relay's log", r.logs.String())
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

// TestTokensUsageErrors: a -tokens file that is missing or invalid, or
// a -tokens with -memory and -etcd, is a usage error (exit 2), and the
// reason shows no secret.
func TestTokensUsageErrors(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.json")
	if err := os.WriteFile(bad, []byte(`{"tokens":[{"name":"a","token":"`+deploySecret+`","controls":["*"]}]}`), 0o600); err != nil {
		t.Fatal(err)
	}
	short := filepath.Join(dir, "short.json")
	if err := os.WriteFile(short, []byte(`{"tokens":[{"name":"a","token":"tiny","data":["*"]}]}`), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"server", "-memory", "-addr", "127.0.0.1:0", "-tokens", filepath.Join(dir, "absent.json")}, "-tokens: access: open"},
		{[]string{"server", "-memory", "-addr", "127.0.0.1:0", "-tokens", bad}, `unknown field "controls"`},
		{[]string{"server", "-memory", "-addr", "127.0.0.1:0", "-tokens", short}, `token "a": its secret has 4 bytes, want 16..4096`},
		{[]string{"server", "-memory", "-etcd", "127.0.0.1:1", "-tokens", tokensFile(t)}, "-memory and -etcd exclude each other"},
		{[]string{"relay", "-addr", "127.0.0.1:0", "-upstream", "http://127.0.0.1:1", "-tokens", bad}, `unknown field "controls"`},
	} {
		code, out, errOut := runCapture(tc.args...)
		if code != exitUsage || !strings.Contains(errOut, tc.want) || out != "" {
			t.Errorf("%q: exit %d, stdout %q, stderr:\n%s\nwant exit 2 and %q", tc.args, code, out, errOut, tc.want)
		}
		noSecrets(t, "the usage error", errOut)
		if strings.Contains(errOut, "tiny") {
			t.Errorf("the usage error shows the secret: %s", errOut)
		}
	}
}
