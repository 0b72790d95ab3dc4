package fakeserver

import (
	"bytes"
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/holdfast-dev/holdfast/access"
	"github.com/holdfast-dev/holdfast/internal/testutil/ssetest"
	"github.com/holdfast-dev/holdfast/transport"
)

// The secrets of the tests' tokens: distinct, and long enough.
const (
	secretPayments = "s3cret-payments-svc-0001"
	secretDeploy   = "s3cret-deploy-bot-000002"
	secretOps      = "s3cret-ops-everything-03"
	secretEdge     = "s3cret-edge-relay-000004"
)

var testSecrets = []string{secretPayments, secretDeploy, secretOps, secretEdge}

func testTokens(t testing.TB) *access.Tokens {
	t.Helper()
	toks, err := access.New(
		access.Token{Name: "payments-svc", Secret: secretPayments, Data: []string{"payments.*"}},
		access.Token{Name: "deploy-bot", Secret: secretDeploy, Control: []string{"payments.*"}},
		access.Token{Name: "ops", Secret: secretOps, Control: []string{"*"}, Data: []string{"*"}},
		access.Token{Name: "edge-relay", Secret: secretEdge, Data: []string{"*"}},
	)
	if err != nil {
		t.Fatal(err)
	}
	return toks
}

// authClient is newClient sending "Authorization: Bearer secret" (none
// for "").
func authClient(t testing.TB, secret string) *http.Client {
	t.Helper()
	c := newClient(t)
	if secret != "" {
		c.Transport = bearer{c.Transport, secret}
	}
	return c
}

type bearer struct {
	rt     http.RoundTripper
	secret string
}

func (b bearer) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.secret)
	return b.rt.RoundTrip(r)
}

// syncBuffer is a log sink a test reads while the server writes.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// noSecret fails t if any test secret is in text.
func noSecret(t testing.TB, what, text string) {
	t.Helper()
	for _, s := range testSecrets {
		if strings.Contains(text, s) {
			t.Errorf("%s shows a token's secret:\n%s", what, text)
		}
	}
}

// wantRefusal checks a refusal's status and JSON body.
func wantRefusal(t testing.TB, what string, resp *http.Response, body []byte, status int, code, message string) {
	t.Helper()
	if resp.StatusCode != status {
		t.Fatalf("%s: %d %s, want %d", what, resp.StatusCode, body, status)
	}
	eb := decode[transport.ErrorBody](t, body)
	if eb.Error != code || message != "" && eb.Message != message {
		t.Fatalf("%s: %s, want error %q message %q", what, body, code, message)
	}
	noSecret(t, what, string(body))
}

// startScoped starts a server with testTokens, logging everything into
// the returned buffer, with payments.prod and fraud.prod published.
func startScoped(t *testing.T, opts ...Option) (*Server, *syncBuffer) {
	t.Helper()
	logs := &syncBuffer{}
	log := slog.New(slog.NewJSONHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	s := start(t, append([]Option{WithTokens(testTokens(t)), WithLogger(log), WithHeartbeat(time.Hour)}, opts...)...)
	for _, ns := range []string{"payments.prod", "fraud.prod"} {
		if _, err := s.Publish(ns, map[string]any{"k": ns}); err != nil {
			t.Fatal(err)
		}
	}
	return s, logs
}

const forbiddenFraud = `token "payments-svc" may not read namespace "fraud.prod"`

// TestDataScope: a data token for payments.* reads payments.prod and gets
// 403, with the reason and nothing of the namespace, for fraud.prod on
// every read of one namespace and a single ack; no token, or a wrong
// one, gets 401.
func TestDataScope(t *testing.T) {
	s, logs := startScoped(t)
	svc := authClient(t, secretPayments)

	resp, body := do(t, svc, "GET", s.URL()+"/sdk/snapshot?ns=payments.prod", "")
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), `"payments.prod"`) {
		t.Fatalf("snapshot in scope: %d %s", resp.StatusCode, body)
	}
	for _, path := range []string{
		"/sdk/snapshot?ns=fraud.prod",
		"/sdk/events?ns=fraud.prod&since=0&wait=0s",
		"/sdk/watch?ns=fraud.prod&since=0",
		"/sdk/snapshot?ns=fraud.none", // existing or not: the same answer
	} {
		resp, body := do(t, svc, "GET", s.URL()+path, "")
		msg := forbiddenFraud
		if strings.Contains(path, "fraud.none") {
			msg = `token "payments-svc" may not read namespace "fraud.none"`
		}
		wantRefusal(t, path, resp, body, http.StatusForbidden, transport.CodeForbidden, msg)
		if rev := resp.Header.Get(transport.HeaderRevision); rev != "0" {
			t.Errorf("%s: %s %q: a refusal tells the namespace's revision", path, transport.HeaderRevision, rev)
		}
	}
	resp, body = do(t, svc, "POST", s.URL()+"/sdk/ack", `{"client_id":"c1","ns":"fraud.prod","revision":2,"status":"ack"}`)
	wantRefusal(t, "ack of fraud.prod", resp, body, http.StatusForbidden, transport.CodeForbidden, forbiddenFraud)
	if got := s.Clients(); len(got) != 0 {
		t.Fatalf("a refused ack recorded: %+v", got)
	}

	for name, c := range map[string]*http.Client{"no token": authClient(t, ""), "a wrong token": authClient(t, "s3cret-not-a-token-at-all")} {
		resp, body := do(t, c, "GET", s.URL()+"/sdk/snapshot?ns=payments.prod", "")
		wantRefusal(t, name, resp, body, http.StatusUnauthorized, transport.CodeUnauthorized, "")
		if resp.Header.Get("WWW-Authenticate") == "" {
			t.Errorf("%s: 401 without WWW-Authenticate", name)
		}
	}
	noSecret(t, "the log", logs.String())
}

// TestDataScopeBatchedAcks: a batch's acks outside the token's scope are
// dropped; the others are recorded (one namespace's trouble does not
// refuse the others), over POST /sdk/ack and over the ack stream.
func TestDataScopeBatchedAcks(t *testing.T) {
	s, _ := startScoped(t)
	svc := authClient(t, secretPayments)
	resp, body := do(t, svc, "POST", s.URL()+"/sdk/ack",
		`{"client_id":"c1","acks":[{"ns":"payments.prod","revision":1,"status":"ack"},{"ns":"fraud.prod","revision":2,"status":"ack"}]}`)
	if resp.StatusCode != http.StatusNoContent {
		t.Fatalf("batch: %d %s", resp.StatusCode, body)
	}
	got := s.Clients()
	if len(got) != 1 || got[0].Namespace != "payments.prod" || got[0].ClientID != "c1" {
		t.Fatalf("clients after the batch: %+v", got)
	}

	// The ack stream (HTTP/2 only: served here in-process), one batch a line.
	req := httptest.NewRequest(http.MethodPost, "/sdk/ack/stream", strings.NewReader(
		`{"client_id":"c2","acks":[{"ns":"fraud.prod","revision":2,"status":"ack"},{"ns":"payments.prod","revision":1,"status":"ack"}]}`+"\n"))
	req.ProtoMajor, req.ProtoMinor = 2, 0
	req.Header.Set("Authorization", "Bearer "+secretPayments)
	w := httptest.NewRecorder()
	s.Handler().ServeHTTP(w, req)
	if w.Code != http.StatusOK {
		t.Fatalf("ack stream: %d %s", w.Code, w.Body)
	}
	got = s.Clients()
	if len(got) != 2 || got[1].ClientID != "c2" || got[1].Namespace != "payments.prod" {
		t.Fatalf("clients after the ack stream: %+v", got)
	}
}

// TestStreamScope: on the multi-namespace stream (SSE and long-poll) a
// namespace outside the token's scope ends alone, code forbidden, with
// the reason; the others stream on.
func TestStreamScope(t *testing.T) {
	s, _ := startScoped(t)
	svc := authClient(t, secretPayments)
	head := s.Head()

	st := ssetest.Open(t, svc, streamURL(s.URL(), transport.PathStream, pair("payments.prod", head), pair("fraud.prod", 0)), "")
	ev := nextStream(t, st)
	if ev.ended == nil || ev.ended.Namespace != "fraud.prod" || ev.ended.Code != transport.CodeForbidden || ev.ended.Message != forbiddenFraud {
		t.Fatalf("first event %+v, want fraud.prod ended forbidden", ev)
	}
	if ev := nextStream(t, st); ev.progress == nil {
		t.Fatalf("then %+v, want progress", ev)
	}
	s.Publish("fraud.prod", map[string]any{"k": 3})
	rev, _ := s.Publish("payments.prod", map[string]any{"k": 4})
	for {
		ev := nextStream(t, st)
		if ev.ended != nil || ev.change != nil && ev.change.Namespace != "payments.prod" {
			t.Fatalf("after the ended: %+v", ev)
		}
		if ev.change != nil && ev.change.Revision == rev {
			break
		}
	}

	poll, _ := pollStream(t, svc, streamURL(s.URL(), transport.PathStreamEvents, pair("payments.prod", 0), pair("fraud.prod", 0))+"&wait=0s")
	if len(poll.Ended) != 1 || poll.Ended[0].Namespace != "fraud.prod" || poll.Ended[0].Code != transport.CodeForbidden || poll.Ended[0].Message != forbiddenFraud {
		t.Fatalf("long-poll ended %+v", poll.Ended)
	}
	for _, c := range poll.Changes {
		if c.Namespace != "payments.prod" {
			t.Fatalf("long-poll sent a change of %q", c.Namespace)
		}
	}
	if len(poll.Changes) == 0 {
		t.Fatal("long-poll sent no change of payments.prod")
	}

	// Through the SDK's transport: the namespace's error is ErrUnauthorized.
	src, err := transport.NewHTTPSource(s.URL(), transport.WithBearerToken(secretPayments))
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req := transport.StreamRequest{Namespaces: []transport.WatchRequest{{Namespace: "payments.prod", Since: s.Head()}, {Namespace: "fraud.prod"}}}
	var endedErr error
	err = src.WatchStream(ctx, req, func(ev transport.StreamEvent) error {
		if ev.Ended != nil {
			endedErr = ev.Ended.Err
			if ev.Ended.Namespace != "fraud.prod" {
				t.Errorf("ended %q", ev.Ended.Namespace)
			}
		}
		if ev.Progress != nil {
			return context.Canceled // the ended events come before the first progress
		}
		return nil
	})
	if !errorsIs(endedErr, transport.ErrUnauthorized) || !strings.Contains(endedErr.Error(), forbiddenFraud) || err == nil {
		t.Fatalf("ended error %v (stream %v), want ErrUnauthorized with the reason", endedErr, err)
	}
}

// TestControlScope: the control API needs a control token (401 without
// one, 403 for a data token); a control token limited to payments.*
// changes those namespaces only, runs no store-wide operation, and lists
// only its namespaces' clients; the pattern "*" may do everything.
func TestControlScope(t *testing.T) {
	s, logs := startScoped(t)
	none, svc, deploy, ops := authClient(t, ""), authClient(t, secretPayments), authClient(t, secretDeploy), authClient(t, secretOps)
	publish := func(c *http.Client, ns string) (*http.Response, []byte) {
		return do(t, c, "POST", s.URL()+"/control/namespaces/"+ns+"/publish", `{"puts":{"k":1}}`)
	}

	resp, body := publish(none, "payments.prod")
	wantRefusal(t, "publish without a token", resp, body, http.StatusUnauthorized, transport.CodeUnauthorized, "")
	if resp.Header.Get("WWW-Authenticate") == "" {
		t.Error("401 without WWW-Authenticate")
	}
	resp, body = publish(svc, "payments.prod")
	wantRefusal(t, "publish with a data token", resp, body, http.StatusForbidden, transport.CodeForbidden, `token "payments-svc" has no control scope`)

	if resp, body := publish(deploy, "payments.prod"); resp.StatusCode != http.StatusOK {
		t.Fatalf("publish in scope: %d %s", resp.StatusCode, body)
	}
	resp, body = publish(deploy, "fraud.prod")
	wantRefusal(t, "publish outside the scope", resp, body, http.StatusForbidden, transport.CodeForbidden, `token "deploy-bot" may not control namespace "fraud.prod"`)
	for _, r := range []struct{ method, path, body string }{
		{"POST", "/control/namespaces/fraud.prod/rollback", `{"to_revision":1}`},
		{"PUT", "/control/namespaces/fraud.prod/schema", `{}`},
		{"GET", "/control/namespaces/fraud.prod/status", ""},
	} {
		resp, body := do(t, deploy, r.method, s.URL()+r.path, r.body)
		wantRefusal(t, r.path, resp, body, http.StatusForbidden, transport.CodeForbidden, `token "deploy-bot" may not control namespace "fraud.prod"`)
	}
	for _, r := range []struct{ path, body string }{{"/control/compact", ""}, {"/control/faults", `{"drop_streams":true}`}} {
		resp, body := do(t, deploy, "POST", s.URL()+r.path, r.body)
		wantRefusal(t, r.path, resp, body, http.StatusForbidden, transport.CodeForbidden, `token "deploy-bot" may not control the whole store (it needs the pattern "*")`)
	}
	if resp, body := do(t, deploy, "GET", s.URL()+"/control/namespaces/payments.prod/status", ""); resp.StatusCode != http.StatusOK {
		t.Fatalf("status in scope: %d %s", resp.StatusCode, body)
	}

	// Clients: the limited token sees its namespaces' only.
	do(t, authClient(t, secretOps), "POST", s.URL()+"/sdk/ack",
		`{"client_id":"c1","acks":[{"ns":"payments.prod","revision":1,"status":"ack"},{"ns":"fraud.prod","revision":2,"status":"ack"}]}`)
	type clients struct {
		Clients []ClientState `json:"clients"`
	}
	resp, body = do(t, deploy, "GET", s.URL()+"/control/clients", "")
	if got := decode[clients](t, body).Clients; resp.StatusCode != http.StatusOK || len(got) != 1 || got[0].Namespace != "payments.prod" {
		t.Fatalf("clients for deploy-bot: %d %s", resp.StatusCode, body)
	}
	resp, body = do(t, ops, "GET", s.URL()+"/control/clients", "")
	if got := decode[clients](t, body).Clients; resp.StatusCode != http.StatusOK || len(got) != 2 {
		t.Fatalf("clients for ops: %d %s", resp.StatusCode, body)
	}
	noSecret(t, "/control/clients", string(body))
	resp, body = do(t, svc, "GET", s.URL()+"/control/clients", "")
	wantRefusal(t, "clients with a data token", resp, body, http.StatusForbidden, transport.CodeForbidden, "")

	if resp, body := publish(ops, "fraud.prod"); resp.StatusCode != http.StatusOK {
		t.Fatalf("publish with \"*\": %d %s", resp.StatusCode, body)
	}
	if resp, body := do(t, ops, "POST", s.URL()+"/control/compact", ""); resp.StatusCode != http.StatusOK {
		t.Fatalf("compact with \"*\": %d %s", resp.StatusCode, body)
	}
	noSecret(t, "the log", logs.String())
}

// TestIdentityFrom: a write records the name of its token's identity as
// its actor (the actor the body names on its behalf), and none gets in
// without a valid token.
func TestIdentityFrom(t *testing.T) {
	s, _ := startScoped(t)
	for _, c := range []struct {
		secret, named, actor, onBehalfOf string
		status                           int
	}{
		{secretDeploy, "", "deploy-bot", "", http.StatusOK},
		{secretDeploy, "alice", "deploy-bot", "alice", http.StatusOK},
		{"", "alice", "", "", http.StatusUnauthorized},
	} {
		resp, body := do(t, authClient(t, c.secret), "POST", s.URL()+"/control/namespaces/payments.prod/publish", `{"puts":{"a":1},"actor":"`+c.named+`"}`)
		if resp.StatusCode != c.status {
			t.Fatalf("token %q: %d %s, want %d", c.secret, resp.StatusCode, body, c.status)
		}
		if c.status != http.StatusOK {
			continue
		}
		h, err := s.History("payments.prod", 1, 0)
		if err != nil {
			t.Fatal(err)
		}
		if r := h.Revisions[0]; r.Actor != c.actor || r.OnBehalfOf != c.onBehalfOf {
			t.Errorf("token %q naming %q: actor %q on behalf of %q; want %q, %q", c.secret, c.named, r.Actor, r.OnBehalfOf, c.actor, c.onBehalfOf)
		}
	}
}

// TestOpenSaysSo: without tokens the server is open, and its log says so
// at Warn; with them it names the tokens, not their secrets; WithTokens
// and WithBearerToken exclude each other.
func TestOpenSaysSo(t *testing.T) {
	for _, c := range []struct {
		name string
		opts []Option
		want string
	}{
		{"open", nil, `"level":"WARN","msg":"fakeserver: no tokens configured: the data plane and the control API are open`},
		{"bearer", []Option{WithBearerToken(secretPayments)}, `"level":"WARN","msg":"fakeserver: no tokens configured: the data plane takes one bearer token, and the control API is open`},
		{"tokens", []Option{WithTokens(testTokens(t))}, `"level":"INFO","msg":"fakeserver: access control on","tokens":["payments-svc","deploy-bot","ops","edge-relay"]`},
	} {
		logs := &syncBuffer{}
		start(t, append(c.opts, WithLogger(slog.New(slog.NewJSONHandler(logs, nil))))...)
		if !strings.Contains(logs.String(), c.want) {
			t.Errorf("%s: the log has no %s:\n%s", c.name, c.want, logs)
		}
		noSecret(t, c.name+": the log", logs.String())
	}
	if _, err := Start(WithTokens(testTokens(t)), WithBearerToken(secretPayments)); err == nil {
		t.Fatal("WithTokens and WithBearerToken together: no error")
	}
}

// TestBearerTokenStillOpensControl: WithBearerToken keeps its meaning:
// the data plane needs the one token, the control API stays open.
func TestBearerTokenStillOpensControl(t *testing.T) {
	s := start(t, WithBearerToken(secretPayments))
	s.Publish("app", map[string]any{"k": 1})
	if resp, body := do(t, authClient(t, ""), "POST", s.URL()+"/control/namespaces/app/publish", `{"puts":{"k":2}}`); resp.StatusCode != http.StatusOK {
		t.Fatalf("publish without a token: %d %s", resp.StatusCode, body)
	}
	for _, c := range []struct {
		secret string
		status int
	}{{secretPayments, 200}, {"", 401}, {secretPayments + "x", 401}, {secretPayments[:5], 401}} {
		if resp, body := do(t, authClient(t, c.secret), "GET", s.URL()+"/sdk/snapshot?ns=app", ""); resp.StatusCode != c.status {
			t.Errorf("token %q: %d %s, want %d", c.secret, resp.StatusCode, body, c.status)
		}
	}
}

// TestActorIsTheToken: a commit's actor is the authenticated token's
// name (never its secret); the actor a body names is recorded as
// on_behalf_of, for a rollback too.
func TestActorIsTheToken(t *testing.T) {
	s, _ := startScoped(t)
	c := newClient(t)
	u := s.URL() + "/control/namespaces/payments.prod/publish"
	if resp, data := do(t, c, "POST", u, `{"puts":{"a":1},"reason":"r"}`, "Authorization", "Bearer "+secretDeploy); resp.StatusCode != 200 {
		t.Fatalf("publish: %d %s", resp.StatusCode, data)
	}
	if resp, data := do(t, c, "POST", u, `{"puts":{"a":2},"actor":"alice"}`, "Authorization", "Bearer "+secretDeploy); resp.StatusCode != 200 {
		t.Fatalf("publish: %d %s", resp.StatusCode, data)
	}
	if resp, data := do(t, c, "POST", s.URL()+"/control/namespaces/payments.prod/rollback", `{"to_revision":1,"actor":"bob"}`, "Authorization", "Bearer "+secretDeploy); resp.StatusCode != 200 {
		t.Fatalf("rollback: %d %s", resp.StatusCode, data)
	}
	h, err := s.History("payments.prod", 3, 0)
	if err != nil {
		t.Fatal(err)
	}
	type who struct{ actor, onBehalfOf string }
	var got []who
	for _, r := range h.Revisions {
		got = append(got, who{r.Actor, r.OnBehalfOf})
	}
	if want := []who{{"deploy-bot", "bob"}, {"deploy-bot", "alice"}, {"deploy-bot", ""}}; !slices.Equal(got, want) {
		t.Fatalf("actors %+v, want %+v", got, want)
	}
}
