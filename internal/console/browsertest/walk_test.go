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
// of two keys in the console's form (a value that is not JSON first: the
// error shows next to it) under a policy that needs bob's approval; the
// change's page shows KEY: OLD → NEW and the live clients; bob, signed in
// in another browser context, sees it come into his open inbox (pushed,
// not reloaded) and approves it;
// alice publishes it as a rollout from its page; the rollout's page
// follows it to its promotion on its own; the namespace's history shows
// the revision with the reason; the fleet shows every client on it. Then
// two SDK clients whose schema rejects a value nack it, and the fleet
// page shows their reason once, with its count.
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
		req := controlapi.TokenCreateRequest{Name: name, Control: []string{"payments.*", "orders.*"}}
		if name == "svc" {
			req = controlapi.TokenCreateRequest{Name: name, Data: []string{"payments.*", "orders.*"}}
		}
		created, err := admin.CreateToken(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		secrets[name] = created.Secret
	}
	_, err = admin.Publish(ctx, "payments.prod", controlapi.PublishRequest{Puts: map[string]json.RawMessage{
		"retry-timeout-ms": json.RawMessage("200"), "circuit-breaker-budget-ms": json.RawMessage("1000")}, Reason: "first"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := admin.Publish(ctx, "orders.prod", controlapi.PublishRequest{Puts: map[string]json.RawMessage{
		"retry-timeout-ms": json.RawMessage("200")}, Reason: "first"}); err != nil {
		t.Fatal(err)
	}
	// Three real SDK clients follow payments.prod; two follow orders.prod
	// with a schema that rejects a retry timeout under 100 ms.
	follow := func(id, ns string, opts ...config.NamespaceOption) {
		cl, err := config.New(config.WithEndpoint(hs.URL), config.WithClientID(id),
			config.WithBearerToken(secrets["svc"]), config.WithCacheDir(t.TempDir()),
			config.WithStreamIdleTimeout(time.Second), config.WithReconnectBackoff(50*time.Millisecond, 400*time.Millisecond))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = cl.Close() })
		testutil.EventuallyNil(t, 20*time.Second, func() error { _, err := cl.Namespace(ctx, ns, opts...); return err })
	}
	for i := range 3 {
		follow(fmt.Sprintf("svc-%d", i), "payments.prod")
	}
	strict := config.Schema([]byte(`{"type":"object","properties":{"retry-timeout-ms":{"type":"integer","minimum":100}}}`))
	for i := range 2 {
		follow(fmt.Sprintf("orders-%d", i), "orders.prod", strict)
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
	testutil.EventuallyNil(t, 20*time.Second, func() error {
		_, err := alice.ListChanges(ctx, controlapi.ChangeListOptions{})
		return err
	})

	// Alice proposes the change in the form: two values edited, a reason.
	browser := newBrowser(t)
	// Bob's inbox is open before the change exists: it shows there
	// without a reload.
	bob := newTab(t, browser)
	signIn(t, bob, hs.URL, secrets["bob"])
	do(t, bob, chromedp.Navigate(hs.URL+"/console/changes?awaiting=me"), chromedp.WaitVisible(`//td[normalize-space()="No change."]`),
		chromedp.Evaluate[chromedp.Void](`window.notReloaded = true`))
	aliceTab := newTab(t, browser)
	signIn(t, aliceTab, hs.URL, secrets["alice"])
	do(t, aliceTab, chromedp.Navigate(hs.URL+"/console/namespaces/payments.prod"), chromedp.WaitVisible(`//h2[normalize-space()="Policy"]`))
	// The namespace's page shows the policy its changes need.
	if pol := run(t, aliceTab, chromedp.Text(chromedp.CSS(`table.policies`))); !containsAll(pol, []string{"payments", "bob"}) {
		t.Errorf("the namespace's policy is shown as\n%s", pol)
	}
	do(t, aliceTab, chromedp.Click(`//a[normalize-space()="Propose a change"]`), chromedp.WaitVisible(button("Propose")))
	// A value that is not JSON, and no reason: the form comes back with
	// the errors next to their fields.
	retry := `//textarea[@id=//label[normalize-space()="retry-timeout-ms"]/@for]`
	do(t, aliceTab, chromedp.Clear(retry), chromedp.SendKeys(retry, "50ms"))
	press(t, aliceTab, "Propose")
	if msg := run(t, aliceTab, chromedp.Text(retry+`/following-sibling::p[contains(@class,"error")]`)); !strings.Contains(msg, "not JSON") {
		t.Errorf("the error next to the value is %q", msg)
	}
	if msg := run(t, aliceTab, chromedp.Text(`//input[@id=//label[normalize-space()="Reason"]/@for]/following-sibling::*[contains(@class,"error")]`)); !strings.Contains(msg, "say why") {
		t.Errorf("the error next to the reason is %q", msg)
	}
	screenshot(t, aliceTab, "propose")
	for key, value := range map[string]string{"retry-timeout-ms": "50", "circuit-breaker-budget-ms": "800"} {
		field := fmt.Sprintf(`//textarea[@id=//label[normalize-space()=%q]/@for]`, key)
		do(t, aliceTab, chromedp.Clear(field), chromedp.SendKeys(field, value))
	}
	do(t, aliceTab, chromedp.SendKeys(`//input[@id=//label[normalize-space()="Reason"]/@for]`, "faster retries, smaller budget"))
	press(t, aliceTab, "Propose")
	heading := h1(t, aliceTab)
	id, ok := strings.CutPrefix(heading, "Change ")
	if !ok {
		t.Fatalf("after Propose the page is %q", heading)
	}
	if got := run(t, aliceTab, chromedp.Text(chromedp.CSS(`table.diff`))); !containsAll(got, []string{"retry-timeout-ms: 200 → 50", "circuit-breaker-budget-ms: 1000 → 800"}) {
		t.Errorf("the change's diff is\n%s", got)
	}
	// Its reach: the namespace's live clients, the three SDK clients.
	if reach := run(t, aliceTab, chromedp.Evaluate[[]string](`[...document.querySelector('table.reach tbody tr').cells].slice(0, 2).map(c => c.textContent.trim())`)); len(reach) != 2 || reach[0] != "payments.prod" || reach[1] != "3" {
		t.Errorf("the change's reach is %q, want payments.prod with 3 live clients", reach)
	}
	screenshot(t, aliceTab, "change")

	do(t, bob, chromedp.WaitVisible(fmt.Sprintf(`//a[normalize-space()=%q]`, id)))
	if !run(t, bob, chromedp.Evaluate[bool](`window.notReloaded === true`)) {
		t.Error("the inbox reloaded")
	}
	do(t, bob, chromedp.Click(fmt.Sprintf(`//a[normalize-space()=%q]`, id)), chromedp.WaitVisible(`//h2[normalize-space()="Diff"]`))
	diff := run(t, bob, chromedp.Text(chromedp.CSS(`table.diff`)))
	for _, want := range []string{"retry-timeout-ms: 200 → 50", "circuit-breaker-budget-ms: 1000 → 800"} {
		if !strings.Contains(diff, want) {
			t.Errorf("diff lacks %q:\n%s", want, diff)
		}
	}
	press(t, bob, "Approve")
	if st := run(t, bob, chromedp.Text(chromedp.CSS(`[data-state]`))); st != "approved" {
		t.Fatalf("after approval the change is %q", st)
	}

	do(t, aliceTab, chromedp.Navigate(hs.URL+"/console/changes/"+id),
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

	// A change the orders clients' schema rejects: the fleet page shows
	// their nacks' reason once, with its count.
	bad, err := admin.Publish(ctx, "orders.prod", controlapi.PublishRequest{Puts: map[string]json.RawMessage{
		"retry-timeout-ms": json.RawMessage("50")}, Reason: "too fast"})
	if err != nil {
		t.Fatal(err)
	}
	do(t, aliceTab, chromedp.Navigate(hs.URL+"/console/fleet?ns=orders.prod"))
	// The summary is pushed: wait for the group on the open page.
	do(t, aliceTab, chromedp.WaitVisible(`//table[contains(@class,"nacks")]//td[1][normalize-space()="2"]`))
	group := run(t, aliceTab, chromedp.Evaluate[[]string](`[...document.querySelector('table.nacks tbody tr').cells].map(c => c.textContent.trim())`))
	if len(group) != 4 || group[0] != "2" || group[1] != "orders.prod" || group[2] != fmt.Sprint(bad) || !strings.Contains(group[3], "retry-timeout-ms") {
		t.Errorf("the nack group is %q, want 2 clients of orders.prod at revision %d, the reason naming retry-timeout-ms", group, bad)
	}
	t.Logf("nack group: %q", group)
	// The namespace list counts them, live, behind and nacked.
	do(t, aliceTab, chromedp.Navigate(hs.URL+"/console/namespaces?q=orders."))
	row := run(t, aliceTab, chromedp.Evaluate[[]string](`[...document.querySelector('main table tbody tr').cells].map(c => c.textContent.trim())`))
	if len(row) < 6 || row[0] != "orders.prod" || row[3] != "2" || row[4] != "2" || row[5] != "2" {
		t.Errorf("the namespace list's row of orders.prod is %q, want 2 live clients, 2 behind, 2 nacked", row)
	}
	screenshot(t, aliceTab, "fleet-nacks")
}

// containsAll reports whether s contains every one of want.
func containsAll(s string, want []string) bool {
	for _, w := range want {
		if !strings.Contains(s, w) {
			return false
		}
	}
	return true
}
