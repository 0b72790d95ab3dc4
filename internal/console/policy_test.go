package console_test

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/holdfast-dev/holdfast/access"
	"github.com/holdfast-dev/holdfast/controlapi"
	"github.com/holdfast-dev/holdfast/internal/fakeserver"
	"github.com/holdfast-dev/holdfast/internal/testutil"
)

const adminSecret = "admin-secret-0123456789abcdefghijklmnop"

// governedServer starts a reference server whose tokens name root (the
// admin scope, to set policies and lints) and alice (control of
// payments.*).
func governedServer(t *testing.T) *fakeserver.Server {
	t.Helper()
	toks := access.FromAuthenticator(identities{
		adminSecret: access.NewIdentity("root", access.Scopes{Admin: true}),
		aliceSecret: access.NewIdentity("alice", access.Scopes{Control: []string{"payments.*"}}),
	}, "root", "alice")
	s, err := fakeserver.Start(fakeserver.WithTokens(toks))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// TestNamespaceShowsPolicyAndLints: a namespace's page shows the policy
// and the lints that apply to it (and not the ones that do not), read by
// an identity with control of it only.
func TestNamespaceShowsPolicyAndLints(t *testing.T) {
	s := governedServer(t)
	if _, err := s.Publish("payments.prod", map[string]any{"retry-timeout-ms": 200}); err != nil {
		t.Fatal(err)
	}
	admin, err := controlapi.NewClient(s.URL(), controlapi.WithToken(adminSecret))
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	for name, p := range map[string]controlapi.Policy{
		"payments": {Namespaces: "payments.*", Approvals: 2, Approvers: []string{"bob", "carol"}, MinSDKVersion: "0.5.0"},
		"orders":   {Namespaces: "orders.*", Approvals: 1, Approvers: []string{"dave"}},
	} {
		if _, err := admin.PutPolicy(ctx, name, p); err != nil {
			t.Fatal(err)
		}
	}
	for name, l := range map[string]controlapi.Lint{
		"retry-floor":  {Namespaces: "payments.*", Expr: `new["retry-timeout-ms"] >= 100`, Message: "retry-timeout-ms under 100 ms stormed the database", Severity: controlapi.LintBlock},
		"orders-limit": {Namespaces: "orders.*", Expr: `true`, Message: "orders only", Severity: controlapi.LintWarn},
	} {
		if _, err := admin.PutLint(ctx, name, l); err != nil {
			t.Fatal(err)
		}
	}
	c := browser(t)
	signIn(t, s, c, aliceSecret)
	_, body := get(t, c, s.URL()+"/console/namespaces/payments.prod")
	for _, want := range []string{"<h2>Policy</h2>", "<td>payments</td><td><code>payments.*</code></td><td>2</td><td>bob, carol</td>", "<td>0.5.0</td>",
		"<h2>Lints</h2>", "<td>retry-floor</td>", "<td>block</td>", "stormed the database"} {
		if !strings.Contains(body, want) {
			t.Errorf("the namespace's page lacks %q", want)
		}
	}
	for _, not := range []string{"dave", "orders-limit"} {
		if strings.Contains(body, not) {
			t.Errorf("the namespace's page shows %q, of a policy or lint of another namespace", not)
		}
	}
	// The route behind it: control of the namespace is enough.
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, s.URL()+"/control/namespaces/payments.prod/policies", nil)
	req.Header.Set("Authorization", "Bearer "+aliceSecret)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var np controlapi.NamespacePolicies
	if err := json.NewDecoder(resp.Body).Decode(&np); err != nil || resp.StatusCode != http.StatusOK || len(np.Policies) != 1 || np.Policies[0].Name != "payments" {
		t.Errorf("GET …/policies: %d %+v %v", resp.StatusCode, np, err)
	}
}

// identities authenticates secrets as their identities (the reference
// server's static tokens have no admin scope, which policies and lints
// need).
type identities map[string]access.Identity

func (ids identities) Authenticate(secret string) (access.Identity, bool) {
	id, ok := ids[secret]
	return id, ok
}

func (ids identities) AuthenticateDigest(d [sha256.Size]byte) (access.Identity, bool) {
	for secret, id := range ids {
		if sha256.Sum256([]byte(secret)) == d {
			return id, true
		}
	}
	return access.Identity{}, false
}

// TestRolloutShowsGates: a rollout's page shows each gate's last value
// (the record keeps the gates' last checks with the step it commits: the
// stage's bake is short).
func TestRolloutShowsGates(t *testing.T) {
	prom := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"status":"success","data":{"resultType":"scalar","result":[` +
			strconv.FormatInt(time.Now().Unix(), 10) + `,"0.02"]}}`))
	}))
	t.Cleanup(prom.Close)
	s := startServer(t)
	if _, err := s.Publish("payments.prod", map[string]any{"retry-timeout-ms": 200}); err != nil {
		t.Fatal(err)
	}
	api, err := controlapi.NewClient(s.URL(), controlapi.WithToken(aliceSecret))
	if err != nil {
		t.Fatal(err)
	}
	ro, err := api.StartRollout(t.Context(), "payments.prod", controlapi.RolloutRequest{
		Puts: map[string]json.RawMessage{"retry-timeout-ms": json.RawMessage("150")}, Stages: []float64{10, 100}, Bake: "1s", Reason: "slower",
		Gates: []json.RawMessage{json.RawMessage(`{"prometheus":"` + prom.URL + `","query":"rate(errors[5m])","max":0.05}`)}})
	if err != nil {
		t.Fatal(err)
	}
	c := browser(t)
	signIn(t, s, c, aliceSecret)
	var body string
	testutil.Eventually(t, 20*time.Second, func() bool {
		_, body = get(t, c, s.URL()+"/console/namespaces/payments.prod/rollouts/"+ro.ID)
		return strings.Contains(body, "<h2>Gates</h2>")
	}, "the rollout's gates on its page")
	for _, want := range []string{"<th>Last value</th>", "<code>rate(errors[5m])</code>", "<td>0.05</td>", "<td>0.02"} {
		if !strings.Contains(body, want) {
			t.Errorf("the rollout's page lacks %q\n%s", want, body)
		}
	}
}

// TestChangesArePushed: the changes list's stream sends the list again
// when a change is proposed.
func TestChangesArePushed(t *testing.T) {
	s := startServer(t)
	if _, err := s.Publish("payments.prod", map[string]any{"retry-timeout-ms": 200}); err != nil {
		t.Fatal(err)
	}
	c := browser(t)
	signIn(t, s, c, aliceSecret)
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, s.URL()+"/console/changes/events", nil)
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if ct := resp.Header.Get("Content-Type"); resp.StatusCode != http.StatusOK || ct != "text/event-stream" {
		t.Fatalf("events: %d %s", resp.StatusCode, ct)
	}
	lines := bufio.NewScanner(resp.Body)
	// until reads the stream until an event's data contains want.
	until := func(want string) {
		t.Helper()
		var data strings.Builder
		for lines.Scan() {
			line := lines.Text()
			if line == "" {
				if strings.Contains(data.String(), want) {
					return
				}
				data.Reset()
			}
			data.WriteString(strings.TrimPrefix(line, "data: "))
		}
		t.Fatalf("the stream ended (%v) before an event with %q", lines.Err(), want)
	}
	until("No change.")
	api, err := controlapi.NewClient(s.URL(), controlapi.WithToken(aliceSecret))
	if err != nil {
		t.Fatal(err)
	}
	st, _ := s.Status("payments.prod")
	ch, err := api.ProposeChange(ctx, controlapi.ChangeRequest{Reason: "pushed", Namespaces: map[string]controlapi.NamespaceChange{
		"payments.prod": {BaseRevision: st.Revision, Puts: map[string]json.RawMessage{"retry-timeout-ms": json.RawMessage("50")}}}})
	if err != nil {
		t.Fatal(err)
	}
	until(ch.ID)
}

// TestRollbackUnderAPolicyIsAChange: on a namespace a policy governs, the
// Rollback button proposes the change that restores the revision's
// content (the keys that differ put back, the keys added since deleted),
// which its page shows for review; nothing is written until it is
// approved and published.
func TestRollbackUnderAPolicyIsAChange(t *testing.T) {
	s := governedServer(t)
	first, err := s.Publish("payments.prod", map[string]any{"retry-timeout-ms": 200})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Publish("payments.prod", map[string]any{"retry-timeout-ms": 50, "burst": 3}); err != nil {
		t.Fatal(err)
	}
	admin, err := controlapi.NewClient(s.URL(), controlapi.WithToken(adminSecret))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := admin.PutPolicy(t.Context(), "payments", controlapi.Policy{Namespaces: "payments.*", Approvals: 1, Approvers: []string{"bob"}}); err != nil {
		t.Fatal(err)
	}
	c := browser(t)
	signIn(t, s, c, aliceSecret)
	_, body := get(t, c, s.URL()+"/console/namespaces/payments.prod")
	m := csrfField.FindStringSubmatch(body)
	if m == nil {
		t.Fatalf("no CSRF field:\n%s", body)
	}
	form := url.Values{"to": {strconv.FormatInt(first, 10)}, "reason": {"INC-7"}, "csrf": {m[1]}}
	resp, body := post(t, c, s.URL()+"/console/namespaces/payments.prod/rollback", form, nil)
	if loc := resp.Header.Get("Location"); resp.StatusCode != http.StatusSeeOther || !strings.HasPrefix(loc, "/console/changes/") {
		t.Fatalf("rollback under a policy: %d to %q, want a change's page\n%s", resp.StatusCode, loc, body)
	}
	_, body = get(t, c, s.URL()+resp.Header.Get("Location"))
	for _, want := range []string{"retry-timeout-ms", "50", "200", "burst", "rollback to revision", "INC-7"} {
		if !strings.Contains(body, want) {
			t.Errorf("the change's page lacks %q", want)
		}
	}
	snap, err := s.Snapshot("payments.prod")
	if err != nil {
		t.Fatal(err)
	}
	var vals map[string]json.RawMessage
	if err := json.Unmarshal(snap.Values, &vals); err != nil || string(vals["retry-timeout-ms"]) != "50" {
		t.Fatalf("the rollback wrote before its approval: %s (%v)", snap.Values, err)
	}
}
