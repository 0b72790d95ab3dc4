package browsertest

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/chromedp"

	"github.com/holdfast-dev/holdfast/access"
	"github.com/holdfast-dev/holdfast/controlapi"
	"github.com/holdfast-dev/holdfast/internal/console"
	"github.com/holdfast-dev/holdfast/internal/fakeserver"
	"github.com/holdfast-dev/holdfast/internal/testutil"
)

const (
	aliceSecret  = "alice-secret-0123456789abcdefghijklmnop"
	readerSecret = "reader-secret-0123456789abcdefghijklmno"
)

// chromium returns the path of the browser; without one the test is
// skipped, or fails under CI=true (.ci/run installs Debian's chromium).
func chromium(t *testing.T) string {
	t.Helper()
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	if os.Getenv("CI") == "true" {
		t.Fatal("no Chromium on PATH (install Debian's chromium)")
	}
	t.Skip("no Chromium on PATH (install Debian's chromium)")
	return ""
}

// newBrowser starts a headless Chromium for the test and returns a tab's
// context; every chromedp action of the test is bounded by 45 s.
func newBrowser(t *testing.T) context.Context {
	t.Helper()
	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(chromium(t)), chromedp.NoSandbox,
		chromedp.DisableGPU, chromedp.WindowSize(1200, 900), chromedp.Flag("disable-dev-shm-usage", true))
	ctx, cancelTimeout := context.WithTimeout(context.Background(), 45*time.Second)
	actx, cancelAlloc := chromedp.NewExecAllocator(ctx, opts...)
	bctx, cancelBrowser := chromedp.NewContext(actx)
	t.Cleanup(func() { cancelBrowser(); cancelAlloc(); cancelTimeout() })
	if err := chromedp.Do(bctx); err != nil { // start it
		t.Fatalf("starting Chromium: %v", err)
	}
	return bctx
}

// newTab returns a tab of its own browser context (its own cookies) in
// the browser of ctx.
func newTab(t *testing.T, ctx context.Context) context.Context {
	t.Helper()
	tctx, cancel := chromedp.NewContext(ctx, chromedp.WithNewBrowserContext())
	t.Cleanup(cancel)
	return tctx
}

// startServer starts the reference server with a control token (alice)
// and a data-only one (reader).
func startServer(t *testing.T) *fakeserver.Server {
	t.Helper()
	toks, err := access.New(
		access.Token{Name: "alice", Secret: aliceSecret, Control: []string{"*"}},
		access.Token{Name: "reader", Secret: readerSecret, Data: []string{"*"}},
	)
	if err != nil {
		t.Fatal(err)
	}
	s, err := fakeserver.Start(fakeserver.WithTokens(toks), fakeserver.WithHeartbeat(200*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := s.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return s
}

func do(t *testing.T, ctx context.Context, actions ...chromedp.Action[chromedp.Void]) {
	t.Helper()
	if err := chromedp.Do(ctx, actions...); err != nil {
		t.Fatal(err)
	}
}

func run[T any](t *testing.T, ctx context.Context, a chromedp.Action[T]) T {
	t.Helper()
	v, err := chromedp.Run(ctx, a)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// button is the XPath of the button whose visible text is name.
func button(name string) string { return fmt.Sprintf(`//button[normalize-space()=%q]`, name) }

// h1 is the page's one heading.
func h1(t *testing.T, ctx context.Context) string {
	t.Helper()
	return strings.TrimSpace(run(t, ctx, chromedp.Text(chromedp.CSS("h1"))))
}

// signIn signs in with secret through the form, as a person would: the
// field labelled "Token", then the Sign in button.
func signIn(t *testing.T, ctx context.Context, base, secret string) {
	t.Helper()
	do(t, ctx, chromedp.Navigate(base+"/console/signin"),
		chromedp.SendKeys(`//input[@id=//label[normalize-space()="Token"]/@for]`, secret),
	)
	press(t, ctx, "Sign in")
}

// press clicks the button named name and waits until the page its form's
// submission loads is there: a new document (the old one is marked),
// loaded.
func press(t *testing.T, ctx context.Context, name string) {
	t.Helper()
	do(t, ctx, chromedp.Evaluate[chromedp.Void](`window.beforeSubmit = true`), chromedp.Click(button(name)))
	// Evaluated again until true: an evaluation the navigation cuts
	// short fails, and is tried again.
	testutil.Eventually(t, 20*time.Second, func() bool {
		done, err := chromedp.Run(ctx, chromedp.Evaluate[bool](`window.beforeSubmit !== true && document.readyState === 'complete'`))
		return err == nil && done
	}, "the page after pressing %s", name)
}

// screenshot saves the page as DIR/name.png when HOLDFAST_SCREENSHOTS=DIR,
// under 1 MB.
func screenshot(t *testing.T, ctx context.Context, name string) {
	t.Helper()
	dir := os.Getenv("HOLDFAST_SCREENSHOTS")
	if dir == "" {
		return
	}
	png := run(t, ctx, chromedp.FullScreenshot(100))
	if len(png) >= 1<<20 {
		t.Errorf("screenshot %s: %d bytes, over 1 MB", name, len(png))
		return
	}
	if err := os.WriteFile(filepath.Join(dir, name+".png"), png, 0o644); err != nil {
		t.Error(err)
	}
}

// dialogs counts the JavaScript dialogs (alert, confirm) the tab opens.
func dialogs(t *testing.T, ctx context.Context) func() int {
	t.Helper()
	var mu sync.Mutex
	n := 0
	if err := chromedp.Listen(ctx, func(ev any) {
		if _, ok := ev.(*page.EventJavascriptDialogOpening); ok {
			mu.Lock()
			n++
			mu.Unlock()
		}
	}); err != nil {
		t.Fatal(err)
	}
	return func() int { mu.Lock(); defer mu.Unlock(); return n }
}

func TestSignInShowsValuesAsText(t *testing.T) {
	s := startServer(t)
	if _, err := s.Publish("payments.prod", map[string]any{"retry-timeout-ms": 200, "banner": "<script>alert(1)</script>",
		"limits": map[string]any{"burst": 20, "rate": 5}, "long": strings.Repeat("lorem ipsum ", 30)}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Publish("payments.prod", map[string]any{"retry-timeout-ms": 50}); err != nil {
		t.Fatal(err)
	}
	ctx := newTab(t, newBrowser(t))
	opened := dialogs(t, ctx)
	signIn(t, ctx, s.URL(), aliceSecret)
	if got := h1(t, ctx); got != "Namespaces" {
		t.Fatalf("after sign-in the page is %q, want Namespaces", got)
	}
	screenshot(t, ctx, "namespaces")
	do(t, ctx, chromedp.Click(`//a[normalize-space()="payments.prod"]`), chromedp.WaitVisible(`//h2[normalize-space()="History"]`))
	if got := h1(t, ctx); got != "payments.prod" {
		t.Fatalf("namespace page %q", got)
	}
	values := run(t, ctx, chromedp.Text(chromedp.CSS(`table.values`)))
	for _, want := range []string{"retry-timeout-ms", "int", "50", `"<script>alert(1)</script>"`} {
		if !strings.Contains(values, want) {
			t.Errorf("values lack %q:\n%s", want, values)
		}
	}
	history := run(t, ctx, chromedp.Text(chromedp.CSS(`table.history`)))
	if !strings.Contains(history, "retry-timeout-ms: 200 → 50") {
		t.Errorf("history lacks the semantic diff:\n%s", history)
	}
	screenshot(t, ctx, "namespace")
	if n := opened(); n != 0 {
		t.Errorf("%d dialogs opened: a value ran as script", n)
	}
	// The session cookie is not readable by script.
	if c := run(t, ctx, chromedp.Evaluate[string](`document.cookie`)); c != "" {
		t.Errorf("document.cookie = %q, want empty", c)
	}
	// The page's CSP forbids inline script: one put in the page does not
	// run, while htmx (a script of the console's own) did.
	ran := run(t, ctx, chromedp.Evaluate[bool](`(() => { const s = document.createElement('script'); s.textContent = 'window.inlineRan = true'; document.body.appendChild(s); return window.inlineRan === true })()`))
	if ran {
		t.Error("an inline script ran")
	}
	if !run(t, ctx, chromedp.Evaluate[bool](`typeof htmx === 'object' && htmx.config.allowEval === false && htmx.config.includeIndicatorStyles === false`)) {
		t.Error("htmx did not load with its configuration from the meta tag")
	}
}

func TestDataTokenCannotSignIn(t *testing.T) {
	s := startServer(t)
	ctx := newTab(t, newBrowser(t))
	resps := statuses(t, ctx)
	signIn(t, ctx, s.URL(), readerSecret)
	if got := h1(t, ctx); got != "Sign in" {
		t.Fatalf("a data-only token got to %q", got)
	}
	if st := resps(s.URL() + "/console/signin"); st != http.StatusForbidden {
		t.Errorf("sign-in with a data-only token: %d, want 403", st)
	}
	if msg := run(t, ctx, chromedp.Text(chromedp.CSS(`.error`))); !strings.Contains(msg, "no control scope") {
		t.Errorf("message %q", msg)
	}
}

// statuses records the status of each response the tab gets, by URL.
func statuses(t *testing.T, ctx context.Context) func(url string) int64 {
	t.Helper()
	var mu sync.Mutex
	got := map[string]int64{}
	if err := chromedp.Listen(ctx, func(ev any) {
		if e, ok := ev.(*network.EventResponseReceived); ok {
			mu.Lock()
			got[e.Response.URL] = e.Response.Status
			mu.Unlock()
		}
	}); err != nil {
		t.Fatal(err)
	}
	return func(u string) int64 { mu.Lock(); defer mu.Unlock(); return got[u] }
}

func TestCrossSitePostIsRefused(t *testing.T) {
	s := startServer(t)
	for _, v := range []int{1, 2} {
		if _, err := s.Publish("payments.prod", map[string]any{"a": v}); err != nil {
			t.Fatal(err)
		}
	}
	target := s.URL() + "/console/namespaces/payments.prod/rollback"
	// Another site (localhost, not 127.0.0.1) with a form that posts to
	// the console without the session's CSRF token.
	evil := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, `<!doctype html><form method="post" action="%s"><input name="to" value="1"><input name="reason" value="evil"><button>Go</button></form>`, target)
	}))
	t.Cleanup(evil.Close)
	evilURL := strings.Replace(evil.URL, "127.0.0.1", "localhost", 1)

	ctx := newTab(t, newBrowser(t))
	resps := statuses(t, ctx)
	signIn(t, ctx, s.URL(), aliceSecret)
	do(t, ctx, chromedp.Navigate(evilURL), chromedp.Click(button("Go")), chromedp.WaitReady(chromedp.CSS(`body`)))
	testutil.Eventually(t, 20*time.Second, func() bool { return resps(target) != 0 })
	if st := resps(target); st != http.StatusForbidden {
		t.Errorf("cross-site POST: %d, want 403", st)
	}
	// Same origin, from the console's own page, without the token: 403.
	do(t, ctx, chromedp.Navigate(s.URL()+"/console/namespaces/payments.prod"))
	st := run(t, ctx, chromedp.Evaluate[int](`fetch('/console/namespaces/payments.prod/rollback', {method: 'POST', body: new URLSearchParams({to: '1', reason: 'no token'})}).then(r => r.status)`, chromedp.EvalAwaitPromise))
	if st != http.StatusForbidden {
		t.Errorf("same-origin POST without the CSRF token: %d, want 403", st)
	}
	if ns, _ := s.Status("payments.prod"); ns.Revision != 2 {
		t.Fatalf("a refused POST wrote: revision %d, want 2", ns.Revision)
	}
	// The page's own Rollback button works.
	do(t, ctx, chromedp.SendKeys(`//table[contains(@class,"history")]//input[@name="reason"]`, "back to 1"))
	press(t, ctx, "Rollback")
	if ns, _ := s.Status("payments.prod"); ns.Revision != 3 {
		t.Fatalf("rollback: revision %d, want 3", ns.Revision)
	}
	if h := run(t, ctx, chromedp.Text(chromedp.CSS(`table.history`))); !strings.Contains(h, "alice") || !strings.Contains(h, "back to 1") {
		t.Errorf("history lacks the rollback's actor and reason:\n%s", h)
	}
}

func TestSignOutEndsTheSession(t *testing.T) {
	s := startServer(t)
	ctx := newTab(t, newBrowser(t))
	signIn(t, ctx, s.URL(), aliceSecret)
	cookies, err := chromedp.Call(ctx, network.GetCookies, network.GetCookiesParams{})
	if err != nil {
		t.Fatal(err)
	}
	var value string
	for _, c := range cookies.Cookies {
		if c.Name == console.CookieName {
			value = c.Value
			if !c.HTTPOnly || c.SameSite != network.CookieSameSiteStrict {
				t.Errorf("cookie %+v: want HttpOnly and SameSite=Strict", c)
			}
		}
	}
	if value == "" {
		t.Fatal("no session cookie")
	}
	press(t, ctx, "Sign out")
	// The old cookie, replayed past the browser, no longer opens a page.
	req, _ := http.NewRequest(http.MethodGet, s.URL()+"/console/namespaces", nil)
	req.AddCookie(&http.Cookie{Name: console.CookieName, Value: value})
	resp, err := (&http.Transport{}).RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusSeeOther || resp.Header.Get("Location") != "/console/signin" {
		t.Errorf("the signed-out session: %d %s, want a redirect to sign in", resp.StatusCode, resp.Header.Get("Location"))
	}
}

func TestRolloutPageUpdatesOnItsOwn(t *testing.T) {
	s := startServer(t)
	if _, err := s.Publish("payments.prod", map[string]any{"retry-timeout-ms": 200}); err != nil {
		t.Fatal(err)
	}
	api, err := controlapi.NewClient(s.URL(), controlapi.WithToken(aliceSecret))
	if err != nil {
		t.Fatal(err)
	}
	started, err := api.StartRollout(t.Context(), "payments.prod", controlapi.RolloutRequest{
		Puts: map[string]json.RawMessage{"retry-timeout-ms": json.RawMessage("50")}, Stages: []float64{10, 50, 100}, Bake: "1h", Reason: "faster retries"})
	if err != nil {
		t.Fatal(err)
	}
	ctx := newTab(t, newBrowser(t))
	signIn(t, ctx, s.URL(), aliceSecret)
	do(t, ctx, chromedp.Navigate(s.URL()+"/console/rollouts"), chromedp.Click(fmt.Sprintf(`//a[normalize-space()=%q]`, started.ID)),
		chromedp.WaitVisible(chromedp.CSS(`[data-state="running"]`)))
	screenshot(t, ctx, "rollout")
	// A mark on the page: it survives only if the page is not reloaded.
	do(t, ctx, chromedp.Evaluate[chromedp.Void](`window.notReloaded = true`))
	if _, err := api.PromoteRollout(t.Context(), "payments.prod", started.ID, controlapi.RolloutActionRequest{Reason: "looks good"}); err != nil {
		t.Fatal(err)
	}
	do(t, ctx, chromedp.WaitVisible(chromedp.CSS(`[data-state="promoted"]`)))
	if !run(t, ctx, chromedp.Evaluate[bool](`window.notReloaded === true`)) {
		t.Error("the page reloaded")
	}
	if d := run(t, ctx, chromedp.Text(chromedp.CSS(`table.decisions`))); !strings.Contains(d, "looks good") {
		t.Errorf("decisions lack the promotion's reason:\n%s", d)
	}
}

func TestFleetUpdatesOnItsOwn(t *testing.T) {
	// An open server: it takes acks from any client, and says so on every
	// page.
	s, err := fakeserver.Start(fakeserver.WithHeartbeat(200 * time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	for _, v := range []int{200, 50} {
		if _, err := s.Publish("payments.prod", map[string]any{"retry-timeout-ms": v}); err != nil {
			t.Fatal(err)
		}
	}
	ctx := newTab(t, newBrowser(t))
	do(t, ctx, chromedp.Navigate(s.URL()+"/console/fleet"), chromedp.WaitVisible(`//p[contains(., "This server is open")]`))
	if got := h1(t, ctx); got != "Fleet" {
		t.Fatalf("page %q", got)
	}
	do(t, ctx, chromedp.Evaluate[chromedp.Void](`window.notReloaded = true`))
	tr := &http.Transport{}
	t.Cleanup(tr.CloseIdleConnections)
	for i := range 3 {
		body := fmt.Sprintf(`{"client_id":"c%d","ns":"payments.prod","revision":2,"status":"nack","error":"retry-timeout-ms: must be ≥ 100"}`, i)
		resp, err := (&http.Client{Transport: tr}).Post(s.URL()+"/sdk/ack", "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusNoContent {
			t.Fatalf("nack: %d", resp.StatusCode)
		}
	}
	do(t, ctx, chromedp.WaitVisible(`//table[contains(@class,"nacks")]//tr[td[1][normalize-space()="3"] and td[4][normalize-space()="retry-timeout-ms: must be ≥ 100"]]`))
	if !run(t, ctx, chromedp.Evaluate[bool](`window.notReloaded === true`)) {
		t.Error("the page reloaded")
	}
	screenshot(t, ctx, "fleet")
}
