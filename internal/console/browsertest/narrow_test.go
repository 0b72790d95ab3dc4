package browsertest

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/chromedp/chromedp"

	"github.com/holdfast-dev/holdfast/controlapi"
)

// TestKeyboardAndNarrowScreen signs in with the keyboard alone (Tab to
// the field labelled "Token", type, Tab to Sign in, Enter) in a 400 px
// wide window, then opens every page: none is wider than the window (a
// table may scroll sideways inside its own box), and Tab reaches every
// action button of each.
func TestKeyboardAndNarrowScreen(t *testing.T) {
	s := startServer(t)
	if _, err := s.Publish("payments.prod", map[string]any{"retry-timeout-ms": 200, "limit": 5,
		"endpoints": strings.Repeat(`"https://payments.internal.example/v1/very-long-path",`, 5)}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Publish("payments.prod", map[string]any{"retry-timeout-ms": 150}); err != nil {
		t.Fatal(err)
	}
	api, err := controlapi.NewClient(s.URL(), controlapi.WithToken(aliceSecret))
	if err != nil {
		t.Fatal(err)
	}
	st, _ := s.Status("payments.prod")
	ch, err := api.ProposeChange(t.Context(), controlapi.ChangeRequest{Reason: "faster retries", Namespaces: map[string]controlapi.NamespaceChange{
		"payments.prod": {BaseRevision: st.Revision, Puts: map[string]json.RawMessage{"retry-timeout-ms": json.RawMessage("50")}}}})
	if err != nil {
		t.Fatal(err)
	}
	ro, err := api.StartRollout(t.Context(), "payments.prod", controlapi.RolloutRequest{
		Puts: map[string]json.RawMessage{"limit": json.RawMessage("10")}, Stages: []float64{10, 100}, Bake: "1h", Reason: "more"})
	if err != nil {
		t.Fatal(err)
	}

	ctx := newTab(t, newBrowser(t))
	do(t, ctx, chromedp.EmulateViewport(400, 800), chromedp.Navigate(s.URL()+"/console/signin"))
	// The keyboard only: Tab until the token's field has the focus.
	focused := func() string {
		return run(t, ctx, chromedp.Evaluate[string](`(e => e ? e.tagName + ':' + (e.labels && e.labels[0] ? e.labels[0].textContent.trim() : e.textContent.trim()) : '')(document.activeElement)`))
	}
	tabTo := func(want string) {
		t.Helper()
		for range 20 {
			do(t, ctx, chromedp.KeyEvent("\t"))
			if focused() == want {
				return
			}
		}
		t.Fatalf("Tab never reached %s (at %s)", want, focused())
	}
	tabTo("INPUT:Token")
	do(t, ctx, chromedp.KeyEvent(aliceSecret))
	tabTo("BUTTON:Sign in")
	do(t, ctx, chromedp.Evaluate[chromedp.Void](`window.beforeSubmit = true`), chromedp.KeyEvent("\r"))
	do(t, ctx, chromedp.WaitVisible(`//h1[normalize-space()="Namespaces"]`))

	for _, path := range []string{"/console/namespaces", "/console/namespaces/payments.prod", "/console/namespaces/payments.prod/propose",
		"/console/changes", "/console/changes/" + ch.ID, "/console/rollouts", "/console/namespaces/payments.prod/rollouts/" + ro.ID,
		"/console/fleet", "/console/audit"} {
		do(t, ctx, chromedp.Navigate(s.URL()+path), chromedp.WaitVisible("h1"))
		if w := run(t, ctx, chromedp.Evaluate[int](`document.documentElement.scrollWidth`)); w > 400 {
			wide := run(t, ctx, chromedp.Evaluate[[]string](`[...document.querySelectorAll("body *")].filter(e => e.getBoundingClientRect().right > 401 && e.parentElement.getBoundingClientRect().right <= 401).slice(0, 5).map(e => e.tagName + "." + e.className + " " + Math.round(e.getBoundingClientRect().right) + " in " + e.parentElement.tagName + "." + e.parentElement.className + " " + getComputedStyle(e.parentElement).overflowX + " " + Math.round(e.parentElement.getBoundingClientRect().right))`))
			t.Errorf("%s: %d px wide in a 400 px window; wider than it: %q", path, w, wide)
		}
		// Mark what the focus reaches, then Tab through the page.
		n := run(t, ctx, chromedp.Evaluate[int](`document.addEventListener('focusin', e => e.target.dataset.tabbed = '1');
			document.querySelectorAll('a[href], button, input:not([type=hidden]), select, textarea, summary').length`))
		do(t, ctx, chromedp.KeyEvent(strings.Repeat("\t", n+2)))
		missed := run(t, ctx, chromedp.Evaluate[[]string](`[...document.querySelectorAll('button')].filter(b => b.dataset.tabbed !== '1').map(b => b.textContent.trim())`))
		buttons := run(t, ctx, chromedp.Evaluate[int](`document.querySelectorAll('button').length`))
		if len(missed) > 0 {
			t.Errorf("%s: Tab does not reach %q", path, missed)
		}
		t.Logf("%s: %d action buttons reached by Tab", path, buttons)
	}
}
