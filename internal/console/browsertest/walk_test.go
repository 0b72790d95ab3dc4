package browsertest

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/holdfast-dev/holdfast/config"
	"github.com/holdfast-dev/holdfast/controlapi"
	"github.com/holdfast-dev/holdfast/internal/testutil"
	"github.com/holdfast-dev/holdfast/server"
	"github.com/holdfast-dev/holdfast/server/store"
)

// TestChangeWalkOnHoldfastServer walks a reviewed change through the
// console of holdfast server (an in-memory etcd): alice proposes a change
// of two keys under a policy that needs bob's approval; bob, signed in in
// another browser context, finds it in his inbox and approves it; alice
// publishes it as a rollout from its page; the rollout's page follows it
// to its promotion on its own; the namespace's history shows the
// revision with the reason.
func TestChangeWalkOnHoldfastServer(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	srv, err := server.New(ctx, server.Config{Store: store.Config{Kind: store.KindMemory, DataDir: t.TempDir()},
		Heartbeat: 200 * time.Millisecond, Console: true})
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(srv.Handler())
	t.Cleanup(func() {
		hs.CloseClientConnections()
		hs.Close()
		if err := srv.Close(); err != nil {
			t.Error(err)
		}
	})
	adminFile := filepath.Join(t.TempDir(), "admin")
	if _, err := srv.Tokens().Bootstrap(ctx, adminFile, func(name string, data []byte) error { return os.WriteFile(name, data, 0o600) }); err != nil {
		t.Fatal(err)
	}
	secret, _ := os.ReadFile(adminFile)
	admin, err := controlapi.NewClient(hs.URL, controlapi.WithToken(strings.TrimSpace(string(secret))))
	if err != nil {
		t.Fatal(err)
	}
	secrets := map[string]string{}
	for _, name := range []string{"alice", "bob", "svc"} {
		req := controlapi.TokenCreateRequest{Name: name, Control: []string{"payments.*"}}
		if name == "svc" {
			req = controlapi.TokenCreateRequest{Name: name, Data: []string{"payments.*"}}
		}
		created, err := admin.CreateToken(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		secrets[name] = created.Secret
	}
	rev, err := admin.Publish(ctx, "payments.prod", controlapi.PublishRequest{Puts: map[string]json.RawMessage{
		"retry-timeout-ms": json.RawMessage("200"), "circuit-breaker-budget-ms": json.RawMessage("1000")}, Reason: "first"})
	if err != nil {
		t.Fatal(err)
	}
	// Three real SDK clients follow the namespace.
	for i := range 3 {
		cl, err := config.New(config.WithEndpoint(hs.URL), config.WithClientID(fmt.Sprintf("svc-%d", i)),
			config.WithBearerToken(secrets["svc"]), config.WithCacheDir(t.TempDir()),
			config.WithStreamIdleTimeout(time.Second), config.WithReconnectBackoff(50*time.Millisecond, 400*time.Millisecond))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = cl.Close() })
		testutil.EventuallyNil(t, 20*time.Second, func() error { _, err := cl.Namespace(ctx, "payments.prod"); return err })
	}
	if _, err := admin.PutPolicy(ctx, "payments", controlapi.Policy{Namespaces: "payments.*", Approvals: 1, Approvers: []string{"bob"}}); err != nil {
		t.Fatal(err)
	}
	alice, err := controlapi.NewClient(hs.URL, controlapi.WithToken(secrets["alice"]))
	if err != nil {
		t.Fatal(err)
	}
	// The tokens reach the server's table by a watch (the clients' did):
	// wait for alice's.
	var ch *controlapi.Change
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		ch, err = alice.ProposeChange(ctx, controlapi.ChangeRequest{Reason: "faster retries, smaller budget", Namespaces: map[string]controlapi.NamespaceChange{
			"payments.prod": {BaseRevision: rev, Puts: map[string]json.RawMessage{"retry-timeout-ms": json.RawMessage("50"), "circuit-breaker-budget-ms": json.RawMessage("800")}}}})
		if err == nil || time.Now().After(deadline) {
			break
		}
	}
	if err != nil {
		t.Fatal(err)
	}

	browser := newBrowser(t)
	bob := newTab(t, browser)
	signIn(t, bob, hs.URL, secrets["bob"])
	do(t, bob, chromedp.Navigate(hs.URL+"/console/changes?awaiting=me"), chromedp.Click(fmt.Sprintf(`//a[normalize-space()=%q]`, ch.ID)),
		chromedp.WaitVisible(`//h2[normalize-space()="Diff"]`))
	diff := run(t, bob, chromedp.Text(chromedp.CSS(`table.diff`)))
	for _, want := range []string{"retry-timeout-ms: 200 → 50", "circuit-breaker-budget-ms: 1000 → 800"} {
		if !strings.Contains(diff, want) {
			t.Errorf("diff lacks %q:\n%s", want, diff)
		}
	}
	screenshot(t, bob, "change")
	press(t, bob, "Approve")
	if st := run(t, bob, chromedp.Text(chromedp.CSS(`[data-state]`))); st != "approved" {
		t.Fatalf("after approval the change is %q", st)
	}

	aliceTab := newTab(t, browser)
	signIn(t, aliceTab, hs.URL, secrets["alice"])
	do(t, aliceTab, chromedp.Navigate(hs.URL+"/console/changes/"+ch.ID),
		chromedp.SendKeys(`//input[@name="stages"]`, "50,100"), chromedp.SendKeys(`//input[@name="bake"]`, "1s"))
	press(t, aliceTab, "Publish as rollout")
	if got := h1(t, aliceTab); !strings.HasPrefix(got, "Rollout ") {
		t.Fatalf("after Publish as rollout the page is %q", got)
	}
	do(t, aliceTab, chromedp.Evaluate[chromedp.Void](`window.notReloaded = true`))
	do(t, aliceTab, chromedp.WaitVisible(chromedp.CSS(`[data-state="promoted"]`)))
	if !run(t, aliceTab, chromedp.Evaluate[bool](`window.notReloaded === true`)) {
		t.Error("the rollout page reloaded")
	}
	do(t, aliceTab, chromedp.Click(`//a[normalize-space()="payments.prod"]`), chromedp.WaitVisible(`//h2[normalize-space()="History"]`))
	if h := run(t, aliceTab, chromedp.Text(chromedp.CSS(`table.history`))); !strings.Contains(h, "faster retries, smaller budget") {
		t.Errorf("history lacks the change's reason:\n%s", h)
	}
	// The fleet: every client on the namespace's new revision.
	head := strings.TrimSpace(run(t, aliceTab, chromedp.Text(chromedp.CSS(`table.history tbody tr td`))))
	testutil.Eventually(t, 20*time.Second, func() bool {
		do(t, aliceTab, chromedp.Navigate(hs.URL+"/console/fleet?ns=payments.prod"))
		rows := run(t, aliceTab, chromedp.Evaluate[[]string](`[...document.querySelectorAll('table.clients tbody tr')].map(r => r.cells[2].textContent + ' ' + r.cells[4].textContent)`))
		for _, r := range rows {
			if r != head+" live" {
				return false
			}
		}
		return len(rows) == 3
	}, "every client live on revision %s", head)
	screenshot(t, aliceTab, "fleet-walk")
}
