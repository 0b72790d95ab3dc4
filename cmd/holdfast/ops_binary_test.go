package main

import (
	"bytes"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"testing"
)

// ran is one finished holdfast process.
type ran struct {
	code           int
	stdout, stderr string
}

// runBinary runs the built binary with args (and extra environment) to
// the end.
func runBinary(t *testing.T, bin string, env []string, args ...string) ran {
	t.Helper()
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), env...)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	return ran{exitCode(t, err), out.String(), errOut.String()}
}

// TestBinaryOperatorCommands: the built binary against `holdfast server
// -memory` with the store's tokens: two concurrent `holdfast publish -if-revision N` processes,
// exactly one of which wins, the other exit status 1 with the conflict on
// stderr; the scopes of the tokens (403, exit 1); $HOLDFAST_TOKEN; -o json
// as the API sent it; a usage error exit status 2. No secret is printed.
func TestBinaryOperatorCommands(t *testing.T) {
	bin := buildBinary(t)
	s, url, k := bootstrapServer(t)
	var printed strings.Builder
	do := func(env []string, args ...string) ran {
		t.Helper()
		r := runBinary(t, bin, env, args...)
		printed.WriteString(r.stdout + r.stderr)
		return r
	}
	deploy := []string{"-server", url, "-token", k.deploy}

	r := do(nil, append([]string{"publish"}, append(deploy, "-actor", "alice", "payments.prod", "retry-timeout-ms=200")...)...)
	var rev int64
	if _, err := fmt.Sscanf(r.stdout, "published payments.prod: revision %d\n", &rev); r.code != exitOK || err != nil {
		t.Fatalf("publish: %+v", r)
	}

	// Two operators publish on the same revision at once: one wins.
	for round := range 5 {
		results := make(chan ran, 2)
		for i := range 2 {
			args := append([]string{"publish"}, deploy...)
			args = append(args, "-o", "json", "-if-revision", fmt.Sprint(rev), "payments.prod", fmt.Sprintf("retry-timeout-ms=%d", 100*round+i))
			go func() { results <- runBinary(t, bin, nil, args...) }()
		}
		a, b := <-results, <-results
		if a.code != exitOK {
			a, b = b, a
		}
		printed.WriteString(a.stdout + a.stderr + b.stdout + b.stderr)
		if a.code != exitOK || b.code != exitFail {
			t.Fatalf("round %d: exit statuses %d and %d, want 0 and 1\n%+v\n%+v", round, a.code, b.code, a, b)
		}
		won := revisionOf(t, a.stdout)
		if want := fmt.Sprintf("conflict (HTTP 409): etcd: conflict: namespace \"payments.prod\" is at revision %d, not %d", won, rev); !strings.Contains(b.stderr, want) || b.stdout != "" {
			t.Fatalf("round %d: the loser printed %q, stderr:\n%s\nwant %q", round, b.stdout, b.stderr, want)
		}
		rev = won
	}
	// Both rounds' losers changed nothing: one revision per round.
	r = do(nil, append([]string{"history"}, append(deploy, "-o", "json", "payments.prod")...)...)
	if r.code != exitOK || strings.Count(r.stdout, `"kind":"publish"`) != 6 {
		t.Fatalf("history: %+v", r)
	}
	if code, body := request(t, http.MethodGet, url+"/control/namespaces/payments.prod/history", k.deploy, ""); code != http.StatusOK || body != r.stdout {
		t.Errorf("history -o json printed\n%s\nthe API answered %d\n%s", r.stdout, code, body)
	}

	// Scopes: the deploy token's control scope is payments.*; a data
	// token cannot publish; no token is 401.
	for _, tc := range []struct {
		env  []string
		args []string
		want string
	}{
		{nil, append([]string{"publish"}, append(deploy, "fraud.prod", "a=1")...), "forbidden (HTTP 403)"},
		{nil, []string{"publish", "-server", url, "-token", k.payments, "payments.prod", "a=1"}, "forbidden (HTTP 403)"},
		{nil, []string{"rollback", "-server", url, "-token", k.payments, "-to", "1", "payments.prod"}, "forbidden (HTTP 403)"},
		{nil, []string{"publish", "-server", url, "payments.prod", "a=1"}, "unauthorized (HTTP 401)"},
	} {
		r := do(tc.env, tc.args...)
		if r.code != exitFail || !strings.Contains(r.stderr, tc.want) || r.stdout != "" {
			t.Errorf("%q: %+v, want exit 1 and %q", tc.args, r, tc.want)
		}
	}
	// The token from the environment.
	r = do([]string{tokenEnv + "=" + k.deploy}, "get", "-server", url, "payments.prod", "retry-timeout-ms")
	if r.code != exitOK || r.stdout != fmt.Sprintf("%d\n", 400) && r.stdout != fmt.Sprintf("%d\n", 401) {
		t.Errorf("get with $%s: %+v", tokenEnv, r)
	}
	// A usage error.
	if r := do(nil, append([]string{"publish"}, append(deploy, "payments.prod")...)...); r.code != exitUsage || !strings.Contains(r.stderr, "nothing to publish") {
		t.Errorf("publish without a change: %+v", r)
	}
	k.noSecrets(t, "the commands' output", printed.String())
	if code := s.stop(t); code != exitOK {
		t.Fatalf("server: exit %d\n%s", code, s.stderr.String())
	}
}
