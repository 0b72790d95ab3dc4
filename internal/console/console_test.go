package console_test

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"go.uber.org/goleak"

	"github.com/holdfast-dev/holdfast/access"
	"github.com/holdfast-dev/holdfast/controlapi"
	"github.com/holdfast-dev/holdfast/internal/console"
	"github.com/holdfast-dev/holdfast/internal/fakeserver"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const (
	aliceSecret  = "alice-secret-0123456789abcdefghijklmnop"
	bobSecret    = "bob-secret-0123456789abcdefghijklmnopqr"
	readerSecret = "reader-secret-0123456789abcdefghijklmno"
)

// startServer starts the reference server with a control token (alice)
// and a data-only one (reader), closed at the end of the test.
func startServer(t *testing.T) *fakeserver.Server {
	t.Helper()
	toks, err := access.New(
		access.Token{Name: "alice", Secret: aliceSecret, Control: []string{"*"}},
		access.Token{Name: "bob", Secret: bobSecret, Control: []string{"*"}},
		access.Token{Name: "reader", Secret: readerSecret, Data: []string{"*"}},
	)
	if err != nil {
		t.Fatal(err)
	}
	s, err := fakeserver.Start(fakeserver.WithTokens(toks))
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

// browser is an HTTP client with a cookie jar that does not follow
// redirects, its connections closed at the end of the test.
func browser(t *testing.T) *http.Client {
	t.Helper()
	jar, _ := cookiejar.New(nil)
	tr := &http.Transport{}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Jar: jar, Transport: tr, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
}

func get(t *testing.T, c *http.Client, u string) (*http.Response, string) {
	t.Helper()
	resp, err := c.Get(u)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, string(b)
}

func post(t *testing.T, c *http.Client, u string, form url.Values, hdr http.Header) (*http.Response, string) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, u, strings.NewReader(form.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	for k, v := range hdr {
		req.Header[k] = v
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, string(b)
}

var csrfField = regexp.MustCompile(`name="csrf" value="([^"]+)"`)

func signIn(t *testing.T, s *fakeserver.Server, c *http.Client, secret string) *http.Response {
	t.Helper()
	resp, _ := post(t, c, s.URL()+"/console/signin", url.Values{"token": {secret}}, nil)
	return resp
}

func TestSignInAndOut(t *testing.T) {
	s := startServer(t)
	c := browser(t)
	if resp, _ := get(t, c, s.URL()+"/console/namespaces"); resp.StatusCode != http.StatusSeeOther || resp.Header.Get("Location") != "/console/signin" {
		t.Fatalf("not signed in: %d %s, want a redirect to the sign-in page", resp.StatusCode, resp.Header.Get("Location"))
	}
	resp := signIn(t, s, c, aliceSecret)
	if resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("sign in: %d", resp.StatusCode)
	}
	var ck *http.Cookie
	for _, x := range resp.Cookies() {
		if x.Name == console.CookieName {
			ck = x
		}
	}
	if ck == nil || !ck.HttpOnly || ck.SameSite != http.SameSiteStrictMode || ck.Path != "/console/" || ck.MaxAge <= 0 {
		t.Fatalf("session cookie %+v: want HttpOnly, SameSite=Strict, path /console/, expiring", ck)
	}
	if strings.Contains(ck.Value, aliceSecret) {
		t.Fatal("the cookie carries the token")
	}
	resp, body := get(t, c, s.URL()+"/console/namespaces")
	if resp.StatusCode != http.StatusOK || !strings.Contains(body, "Signed in as <strong>alice</strong>") {
		t.Fatalf("namespaces: %d\n%s", resp.StatusCode, body)
	}
	if csp := resp.Header.Get("Content-Security-Policy"); !strings.Contains(csp, "script-src 'self'") || strings.Contains(csp, "unsafe-inline") {
		t.Errorf("CSP %q", csp)
	}
	// The cookie is never a credential of the control API.
	req, _ := http.NewRequest(http.MethodGet, s.URL()+"/control/clients", nil)
	req.AddCookie(&http.Cookie{Name: console.CookieName, Value: ck.Value})
	if r2, err := c.Transport.RoundTrip(req); err != nil || r2.StatusCode != http.StatusUnauthorized {
		t.Fatalf("/control/ with the session cookie: %v %v, want 401", r2.StatusCode, err)
	} else {
		r2.Body.Close()
	}
	// Sign out ends the session on the server: the old cookie no longer
	// works.
	m := csrfField.FindStringSubmatch(body)
	if m == nil {
		t.Fatal("no CSRF field on the page")
	}
	if resp, _ := post(t, c, s.URL()+"/console/signout", url.Values{"csrf": {m[1]}}, nil); resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("sign out: %d", resp.StatusCode)
	}
	old := browser(t)
	u, _ := url.Parse(s.URL() + "/console/")
	old.Jar.SetCookies(u, []*http.Cookie{{Name: console.CookieName, Value: ck.Value, Path: "/console/"}})
	if resp, _ := get(t, old, s.URL()+"/console/namespaces"); resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("after sign-out the old cookie got %d, want a redirect to sign in", resp.StatusCode)
	}
}

func TestDataTokenCannotSignIn(t *testing.T) {
	s := startServer(t)
	c := browser(t)
	if resp := signIn(t, s, c, readerSecret); resp.StatusCode != http.StatusForbidden {
		t.Fatalf("data-only token: %d, want 403", resp.StatusCode)
	}
	if resp := signIn(t, s, c, "not-a-token-at-all-0123456789"); resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("unknown token: %d, want 401", resp.StatusCode)
	}
}

func TestCSRF(t *testing.T) {
	s := startServer(t)
	if _, err := s.Publish("payments.prod", map[string]any{"a": 1}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Publish("payments.prod", map[string]any{"a": 2}); err != nil {
		t.Fatal(err)
	}
	c := browser(t)
	signIn(t, s, c, aliceSecret)
	_, body := get(t, c, s.URL()+"/console/namespaces/payments.prod")
	m := csrfField.FindStringSubmatch(body)
	if m == nil {
		t.Fatalf("no CSRF field:\n%s", body)
	}
	rollback := s.URL() + "/console/namespaces/payments.prod/rollback"
	form := url.Values{"to": {"1"}, "reason": {"test"}}
	// Same site, no token: 403.
	if resp, _ := post(t, c, rollback, form, nil); resp.StatusCode != http.StatusForbidden {
		t.Fatalf("no CSRF token: %d, want 403", resp.StatusCode)
	}
	// Cross-site, with the token: refused before (Sec-Fetch-Site).
	form.Set("csrf", m[1])
	if resp, _ := post(t, c, rollback, form, http.Header{"Sec-Fetch-Site": {"cross-site"}}); resp.StatusCode != http.StatusForbidden {
		t.Fatalf("cross-site: %d, want 403", resp.StatusCode)
	}
	if st, _ := s.Status("payments.prod"); st.Revision != 2 {
		t.Fatalf("refused requests wrote: revision %d", st.Revision)
	}
	// The header works as the field does.
	form.Del("csrf")
	if resp, body := post(t, c, rollback, form, http.Header{console.CSRFHeader: {m[1]}}); resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("with the CSRF header: %d\n%s", resp.StatusCode, body)
	}
	if st, _ := s.Status("payments.prod"); st.Revision != 3 {
		t.Fatalf("rollback: revision %d, want 3", st.Revision)
	}
	_, body = get(t, c, s.URL()+"/console/namespaces/payments.prod")
	if !strings.Contains(body, "<td>alice</td>") || !strings.Contains(body, "<td>test</td>") {
		t.Errorf("history does not show the rollback by alice:\n%s", body)
	}
}

func TestValuesEscaped(t *testing.T) {
	s := startServer(t)
	if _, err := s.Publish("web", map[string]any{"banner": "<script>alert(1)</script>", "n": 5, "long": strings.Repeat("x", 300)}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Publish("web", map[string]any{"n": "five"}); err != nil {
		t.Fatal(err)
	}
	c := browser(t)
	signIn(t, s, c, aliceSecret)
	_, body := get(t, c, s.URL()+"/console/namespaces/web")
	if strings.Contains(body, "<script>alert(1)") {
		t.Fatal("the value is in the page as markup")
	}
	for _, want := range []string{"&lt;script&gt;alert(1)&lt;/script&gt;", "<details><summary>string, 302 bytes</summary>",
		"<code>n</code>: 5 → &#34;five&#34; (type int → string)"} {
		if !strings.Contains(body, want) {
			t.Errorf("page lacks %q\n%s", want, body)
		}
	}
}

func TestOpenServer(t *testing.T) {
	s, err := fakeserver.Start()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	if _, err := s.Publish("a", map[string]any{"k": 1}); err != nil {
		t.Fatal(err)
	}
	c := browser(t)
	for _, p := range []string{"namespaces", "namespaces/a", "fleet", "audit", "rollouts"} {
		resp, body := get(t, c, s.URL()+"/console/"+p)
		if resp.StatusCode != http.StatusOK || !strings.Contains(body, "This server is open") || strings.Count(body, "<h1>") != 1 {
			t.Errorf("%s: %d, want 200, one <h1> and the open server's notice\n%s", p, resp.StatusCode, body)
		}
	}
}

func TestFleetGroupsNackReasons(t *testing.T) {
	// An open server: acks are taken from any client.
	s, err := fakeserver.Start()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	for _, v := range []int{200, 50} {
		if _, err := s.Publish("payments.prod", map[string]any{"retry-timeout-ms": v}); err != nil {
			t.Fatal(err)
		}
	}
	c := browser(t)
	for i, ack := range []string{
		`"status":"nack","error":"retry-timeout-ms: must be ≥ 100"`, `"status":"nack","error":"retry-timeout-ms: must be ≥ 100"`,
		`"status":"nack","error":"retry-timeout-ms: must be ≥ 100"`, `"status":"nack","error":"unknown key"`, `"status":"ack"`,
	} {
		body := `{"client_id":"c` + string(rune('1'+i)) + `","ns":"payments.prod","revision":2,` + ack + `}`
		req, _ := http.NewRequest(http.MethodPost, s.URL()+"/sdk/ack", strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusNoContent {
			t.Fatalf("ack: %d %s", resp.StatusCode, b)
		}
	}
	resp, body := get(t, c, s.URL()+"/console/fleet?ns=payments.prod")
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("fleet: %d\n%s", resp.StatusCode, body)
	}
	for _, want := range []string{"<tr><td>3</td><td>payments.prod</td><td>2</td><td>retry-timeout-ms: must be ≥ 100</td></tr>",
		"<tr><td>1</td><td>payments.prod</td><td>2</td><td>unknown key</td></tr>", "<code>c5</code>"} {
		if !strings.Contains(body, want) {
			t.Errorf("fleet page lacks %q\n%s", want, body)
		}
	}
	// The API behind the page: a page of the clients, their total and
	// summary, in the order of namespace and id.
	_, raw := get(t, c, s.URL()+"/control/clients?ns=payments.prod&offset=1&limit=2&summary=1")
	var page controlapi.Clients
	if err := json.Unmarshal([]byte(raw), &page); err != nil {
		t.Fatalf("%v\n%s", err, raw)
	}
	var ids []string
	for _, cl := range page.Clients {
		ids = append(ids, cl.ClientID)
	}
	if page.Total != 5 || fmt.Sprint(ids) != "[c2 c3]" || page.Summary == nil || len(page.Summary.Nacks) != 2 ||
		page.Summary.Nacks[0] != (controlapi.NackGroup{Namespace: "payments.prod", Revision: 2, Error: "retry-timeout-ms: must be ≥ 100", Count: 3}) {
		t.Errorf("a page of the clients: total %d, %v, summary %+v", page.Total, ids, page.Summary)
	}
	// Its count of the namespace's clients is the namespace status's.
	_, raw = get(t, c, s.URL()+"/control/namespaces/payments.prod/status")
	var st controlapi.NamespaceStatus
	if err := json.Unmarshal([]byte(raw), &st); err != nil {
		t.Fatal(err)
	}
	if got, want := page.Summary.Namespaces["payments.prod"], (controlapi.NamespaceClients{Live: st.Live, Acked: st.Acked, Nacked: st.Nacked,
		Behind: st.Behind, Stale: st.Stale}); got != want {
		t.Errorf("the summary counts payments.prod's clients %+v, its status %+v", got, want)
	}
	for _, q := range []string{"limit=0", "limit=1001", "offset=1", "other=1"} {
		if resp, _ := get(t, c, s.URL()+"/control/clients?"+q); resp.StatusCode != http.StatusBadRequest {
			t.Errorf("clients?%s: %d, want 400", q, resp.StatusCode)
		}
	}
	if resp, body := get(t, c, s.URL()+"/console/fleet?ns=payments.prod&page=2"); resp.StatusCode != http.StatusOK || strings.Contains(body, "<code>c1</code>") {
		t.Errorf("the fleet's second page of five clients: %d", resp.StatusCode)
	}
	for _, p := range []string{"namespaces", "audit", "rollouts", "fleet?state=live"} {
		if resp, body := get(t, c, s.URL()+"/console/"+p); resp.StatusCode != http.StatusOK || strings.Count(body, "<h1>") != 1 {
			t.Errorf("%s: %d\n%s", p, resp.StatusCode, body)
		}
	}
}

func TestSignInGuessesAreLimited(t *testing.T) {
	s := startServer(t)
	c := browser(t)
	for i := range 200 {
		resp := signIn(t, s, c, fmt.Sprintf("wrong-guess-%04d-0123456789", i))
		if resp.StatusCode == http.StatusTooManyRequests {
			if resp.Header.Get("Retry-After") == "" {
				t.Error("429 without Retry-After")
			}
			return
		}
		if resp.StatusCode != http.StatusUnauthorized {
			t.Fatalf("guess %d: %d", i, resp.StatusCode)
		}
	}
	t.Fatal("200 wrong tokens from one peer, none refused")
}

// TestChangeInTheConsole: a change of two keys proposed through the API
// by alice shows its semantic diff, reach and her actions (not Approve:
// she is its author) on its page, and she publishes it with the page's
// Publish button.
func TestChangeInTheConsole(t *testing.T) {
	s := startServer(t)
	if _, err := s.Publish("payments.prod", map[string]any{"retry-timeout-ms": 200, "limit": 5}); err != nil {
		t.Fatal(err)
	}
	api, err := controlapi.NewClient(s.URL(), controlapi.WithToken(aliceSecret))
	if err != nil {
		t.Fatal(err)
	}
	st, _ := s.Status("payments.prod")
	ch, err := api.ProposeChange(t.Context(), controlapi.ChangeRequest{Reason: "faster retries", Namespaces: map[string]controlapi.NamespaceChange{
		"payments.prod": {BaseRevision: st.Revision, Puts: map[string]json.RawMessage{"retry-timeout-ms": json.RawMessage("50"), "limit": json.RawMessage("10")}}}})
	if err != nil {
		t.Fatal(err)
	}
	alice := browser(t)
	signIn(t, s, alice, aliceSecret)
	page := s.URL() + "/console/changes/" + ch.ID
	_, body := get(t, alice, page)
	for _, want := range []string{"retry-timeout-ms: 200 → 50", "limit: 5 → 10", "faster retries", "<h1>Change " + ch.ID + "</h1>",
		">Publish</button>", ">Publish as rollout</button>", ">Withdraw</button>", "<th>Live clients</th>"} {
		if !strings.Contains(body, want) {
			t.Errorf("change page lacks %q", want)
		}
	}
	if strings.Contains(body, ">Approve</button>") {
		t.Error("the author is offered Approve")
	}
	if _, list := get(t, alice, s.URL()+"/console/changes"); !strings.Contains(list, ch.ID) {
		t.Errorf("the list lacks the change\n%s", list)
	}
	csrf := csrfField.FindStringSubmatch(body)[1]
	if resp, body := post(t, alice, page+"/publish", url.Values{"csrf": {csrf}}, nil); resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("publish: %d\n%s", resp.StatusCode, body)
	}
	if got, _ := s.Status("payments.prod"); got.Revision <= st.Revision {
		t.Fatalf("revision %d after the publish, want above %d", got.Revision, st.Revision)
	}
	if _, body = get(t, alice, page); !strings.Contains(body, `data-state="published"`) {
		t.Errorf("change not shown as published\n%s", body)
	}
}

func TestProposeInTheConsole(t *testing.T) {
	s := startServer(t)
	if _, err := s.Publish("payments.prod", map[string]any{"retry-timeout-ms": 200, "limit": 5, "old-flag": true}); err != nil {
		t.Fatal(err)
	}
	alice := browser(t)
	signIn(t, s, alice, aliceSecret)
	if _, ns := get(t, alice, s.URL()+"/console/namespaces/payments.prod"); !strings.Contains(ns, `href="/console/namespaces/payments.prod/propose">Propose a change</a>`) {
		t.Fatal("the namespace's page has no Propose a change link")
	}
	form := s.URL() + "/console/namespaces/payments.prod/propose"
	_, body := get(t, alice, form)
	for _, want := range []string{"<h1>Propose a change to payments.prod</h1>", `<label for="value-1"><code>old-flag</code></label>`,
		`name="value.2" rows="1"`, ">5</textarea>", "New key", `<label for="reason">Reason</label>`, ">Propose</button>"} {
		if !strings.Contains(body, want) {
			t.Errorf("the form lacks %q\n%s", want, body)
		}
	}
	st, _ := s.Status("payments.prod")
	fields := func(reason, retry string) url.Values {
		// Rows: limit (0), old-flag (1), retry-timeout-ms (2), then new rows.
		return url.Values{"csrf": {csrfField.FindStringSubmatch(body)[1]}, "base": {strconv.FormatInt(st.Revision, 10)}, "n": {"6"},
			"key.0": {"limit"}, "value.0": {"5"}, "key.1": {"old-flag"}, "value.1": {"true"}, "delete.1": {"1"},
			"key.2": {"retry-timeout-ms"}, "value.2": {retry},
			"new.3": {"1"}, "key.3": {"new-key"}, "value.3": {`"on"`}, "new.4": {"1"}, "new.5": {"1"}, "reason": {reason}}
	}
	// Not JSON, and no reason: the form again, each error by its field,
	// what was typed kept, nothing proposed.
	resp, again := post(t, alice, form, fields("", "50ms"), nil)
	if resp.StatusCode != http.StatusUnprocessableEntity {
		t.Fatalf("a bad form: %d, want 422\n%s", resp.StatusCode, again)
	}
	for _, want := range []string{`aria-describedby="value-err-2"`, `id="value-err-2">not JSON: `, ">50ms</textarea>",
		`id="reason-err">say why`, `value="new-key"`} {
		if !strings.Contains(again, want) {
			t.Errorf("the form shown again lacks %q\n%s", want, again)
		}
	}
	api, err := controlapi.NewClient(s.URL(), controlapi.WithToken(aliceSecret))
	if err != nil {
		t.Fatal(err)
	}
	if list, err := api.ListChanges(t.Context(), controlapi.ChangeListOptions{}); err != nil || len(list) != 0 {
		t.Fatalf("after a bad form: %v changes, %v", list, err)
	}
	resp, _ = post(t, alice, form, fields("faster retries", "50"), nil)
	loc := resp.Header.Get("Location")
	if resp.StatusCode != http.StatusSeeOther || !strings.HasPrefix(loc, "/console/changes/") {
		t.Fatalf("a good form: %d to %q", resp.StatusCode, loc)
	}
	_, page := get(t, alice, s.URL()+loc)
	for _, want := range []string{"retry-timeout-ms: 200 → 50", "removed (was true)", "added &#34;on&#34;", "faster retries", "<th>Live clients</th>"} {
		if !strings.Contains(page, want) {
			t.Errorf("the change's page lacks %q\n%s", want, page)
		}
	}
	if strings.Contains(page, "limit:") {
		t.Error("an unchanged key is part of the change")
	}
}
