package server_test

import (
	"context"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/holdfast-dev/holdfast/controlapi"
	"github.com/holdfast-dev/holdfast/internal/console"
	"github.com/holdfast-dev/holdfast/internal/testutil"
	"github.com/holdfast-dev/holdfast/server"
	"github.com/holdfast-dev/holdfast/server/control"
)

// TestConsoleSessionsInTheStore: a session made on one server works on
// another of the same store, is kept under the hash of its id with a
// lease, ends on both when signed out on one, and ends when its token is
// revoked.
func TestConsoleSessionsInTheStore(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	etcdStore, servers, urls := startServersWith(t, 2, func(cfg *server.Config) { cfg.Console = true })
	first := servers[0]
	// An open store: every page says so.
	jar, _ := cookiejar.New(nil)
	tr := &http.Transport{}
	t.Cleanup(tr.CloseIdleConnections)
	hc := &http.Client{Jar: jar, Transport: tr, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	get := func(u string) (int, string) {
		t.Helper()
		resp, err := hc.Get(u)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	post := func(u string, form url.Values) int {
		t.Helper()
		resp, err := hc.PostForm(u, form)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if code, body := get(urls[0] + "/console/namespaces"); code != http.StatusOK || !strings.Contains(body, "This server is open") {
		t.Fatalf("open store: %d\n%s", code, body)
	}

	adminFile := filepath.Join(t.TempDir(), "admin")
	if _, err := first.Tokens().Bootstrap(ctx, adminFile, func(name string, data []byte) error { return os.WriteFile(name, data, 0o600) }); err != nil {
		t.Fatal(err)
	}
	adminSecret, _ := os.ReadFile(adminFile)
	admin := controlClient(t, urls[0], strings.TrimSpace(string(adminSecret)))
	alice, err := admin.CreateToken(ctx, controlapi.TokenCreateRequest{Name: "alice", Control: []string{"*"}})
	if err != nil {
		t.Fatal(err)
	}
	// Both servers see the tokens (a watch): then sign in on the first.
	testutil.Eventually(t, 20*time.Second, func() bool { code, _ := get(urls[1] + "/console/namespaces"); return code == http.StatusSeeOther })
	testutil.Eventually(t, 20*time.Second, func() bool {
		return post(urls[0]+"/console/signin", url.Values{"token": {alice.Secret}}) == http.StatusSeeOther
	})
	u0, _ := url.Parse(urls[0] + "/console/")
	var cookie string
	for _, c := range jar.Cookies(u0) {
		if c.Name == console.CookieName {
			cookie = c.Value
		}
	}
	resp, err := etcdStore.Client.Get(ctx, control.SessionRoot, clientv3.WithPrefix())
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.Kvs) != 1 || string(resp.Kvs[0].Key) != control.SessionRoot+console.SessionKey(cookie) || resp.Kvs[0].Lease == 0 ||
		strings.Contains(string(resp.Kvs[0].Value), alice.Secret) || strings.Contains(string(resp.Kvs[0].Value), cookie) {
		t.Fatalf("the store's sessions: %v", resp.Kvs)
	}
	// The second server knows the session.
	u1, _ := url.Parse(urls[1] + "/console/")
	jar.SetCookies(u1, []*http.Cookie{{Name: console.CookieName, Value: cookie, Path: "/console/"}})
	code, body := get(urls[1] + "/console/namespaces")
	if code != http.StatusOK || !strings.Contains(body, "Signed in as <strong>alice</strong>") {
		t.Fatalf("the session on the second server: %d\n%s", code, body)
	}
	// Signed out on the second, it ends on the first.
	csrf := regexp.MustCompile(`name="csrf" value="([^"]+)"`).FindStringSubmatch(body)[1]
	if code := post(urls[1]+"/console/signout", url.Values{"csrf": {csrf}}); code != http.StatusSeeOther {
		t.Fatalf("sign out: %d", code)
	}
	if code, _ := get(urls[0] + "/console/namespaces"); code != http.StatusSeeOther {
		t.Fatalf("after sign-out on the other server: %d, want a redirect to sign in", code)
	}
	// Revoking the token ends its sessions.
	if code := post(urls[0]+"/console/signin", url.Values{"token": {alice.Secret}}); code != http.StatusSeeOther {
		t.Fatalf("sign in again: %d", code)
	}
	if code, _ := get(urls[0] + "/console/namespaces"); code != http.StatusOK {
		t.Fatalf("signed in: %d", code)
	}
	if err := admin.RevokeToken(ctx, "alice"); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 20*time.Second, func() bool { code, _ := get(urls[0] + "/console/namespaces"); return code == http.StatusSeeOther })
}
