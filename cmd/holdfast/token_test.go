package main

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/holdfast-dev/holdfast/controlapi"
	"github.com/holdfast-dev/holdfast/internal/testutil"
)

// cli runs one operator command in-process and returns its exit status,
// stdout and stderr.
func cli(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	var stdout, stderr bytes.Buffer
	code := run(context.Background(), args, &stdout, &stderr)
	return code, stdout.String(), stderr.String()
}

// TestTokenLifecycleAcrossProcesses: real processes — a 3-member etcd
// cluster, two servers over it, a relay with -store-tokens. The first
// server bootstraps the admin token into its file; 'holdfast token
// create' prints a secret once; the token works on the other server and
// through the relay; 'token list' shows it without a secret;
// 'token revoke' through one server is refused by the other server and by
// the relay within 5 s.
func TestTokenLifecycleAcrossProcesses(t *testing.T) {
	bin := buildBinary(t)
	members := startEtcd(t)
	dir := t.TempDir()
	adminFile := filepath.Join(dir, "admin-token")
	a := startServerProc(t, bin, "-etcd", members, "-bootstrap-token-file", adminFile)
	a.logs.waitFor(t, "server: created the store's first admin token", a.copied)
	b := startServerProc(t, bin, "-etcd", members, "-bootstrap-token-file", filepath.Join(dir, "unused"))
	b.logs.waitFor(t, "server: the store has an admin token already; -bootstrap-token-file not used", b.copied)
	if _, err := os.Stat(filepath.Join(dir, "unused")); !os.IsNotExist(err) {
		t.Fatalf("the second server wrote a bootstrap file: %v", err)
	}
	if info, err := os.Stat(adminFile); err != nil || info.Mode().Perm() != 0o600 {
		t.Fatalf("the bootstrap file: %v %v", info, err)
	}

	create := func(args ...string) string {
		t.Helper()
		code, stdout, stderr := cli(t, append([]string{"token", "create", "-server", a.url(), "-token-file", adminFile}, args...)...)
		if code != exitOK {
			t.Fatalf("token create %v: exit %d: %s", args, code, stderr)
		}
		return strings.TrimSpace(stdout)
	}
	// The bootstrap token has control and data "*": it publishes.
	adminSecret, err := os.ReadFile(adminFile)
	if err != nil {
		t.Fatal(err)
	}
	if code, body := request(t, "POST", a.url()+"/control/namespaces/payments.prod/publish", strings.TrimSpace(string(adminSecret)), `{"puts":{"v":1}}`); code != http.StatusOK {
		t.Fatalf("publish with the bootstrap token: %d %s", code, body)
	}
	relaySecret := create("-relay", "-data", "*", "edge-1")
	appSecret := create("-data", "payments.*", "-expires", "24h", "payments-svc")
	if code, _, stderr := cli(t, "token", "create", "-server", a.url(), "-token", appSecret, "-data", "*", "sneaky"); code != exitFail || !strings.Contains(stderr, "no admin scope") {
		t.Fatalf("token create with a data token: exit %d: %s", code, stderr)
	}

	r := startRelayProc(t, bin, a.url()+","+b.url(), "-store-tokens", "-token-file", writeSecret(t, dir, "relay-token", relaySecret))
	snap := "/sdk/snapshot?ns=payments.prod"
	for _, base := range []string{b.url(), r.url()} {
		testutil.Eventually(t, waitLimit, func() bool {
			code, _ := request(t, "GET", base+snap, appSecret, "")
			return code == http.StatusOK
		}, "the token works at "+base)
		code, body := request(t, "GET", base+"/sdk/snapshot?ns=fraud.prod", appSecret, "")
		wantRefusal(t, "outside the scope at "+base, code, body, http.StatusForbidden, `token "payments-svc" may not read namespace "fraud.prod"`)
	}

	code, stdout, stderr := cli(t, "token", "list", "-server", b.url(), "-token-file", adminFile)
	if code != exitOK || !strings.Contains(stdout, "payments-svc") || !strings.Contains(stdout, "data=payments.*") || !strings.Contains(stdout, "edge-1") {
		t.Fatalf("token list: exit %d: %s%s", code, stdout, stderr)
	}
	code, stdout, _ = cli(t, "token", "list", "-server", b.url(), "-token-file", adminFile, "-o", "json")
	var list controlapi.TokenList
	if code != exitOK || json.Unmarshal([]byte(stdout), &list) != nil || len(list.Tokens) != 3 {
		t.Fatalf("token list -o json: exit %d: %s", code, stdout)
	}
	for _, secret := range []string{appSecret, relaySecret, strings.TrimSpace(string(adminSecret)), "sha256:"} {
		if strings.Contains(stdout, secret) {
			t.Fatalf("token list shows a secret or a hash: %s", stdout)
		}
	}

	if code, _, stderr := cli(t, "token", "revoke", "-server", a.url(), "-token-file", adminFile, "payments-svc"); code != exitOK {
		t.Fatalf("token revoke: exit %d: %s", code, stderr)
	}
	revoked := time.Now()
	for _, base := range []string{a.url(), b.url(), r.url()} {
		testutil.Eventually(t, 5*time.Second-time.Since(revoked), func() bool {
			code, _ := request(t, "GET", base+snap, appSecret, "")
			return code == http.StatusUnauthorized
		}, "the revoked token refused at "+base+" within 5 s of the revoke")
		t.Logf("refused at %s %v after the revoke returned", base, time.Since(revoked).Round(time.Millisecond))
	}
	r.stop()
	for _, p := range []*relayProc{r, a, b} {
		for _, secret := range []string{appSecret, relaySecret, strings.TrimSpace(string(adminSecret))} {
			if strings.Contains(p.logs.String(), secret) {
				t.Fatalf("a log shows a secret:\n%s", p.logs.String())
			}
		}
	}
}

func writeSecret(t *testing.T, dir, name, secret string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte(secret+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}
