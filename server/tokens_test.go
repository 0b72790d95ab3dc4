package server_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/holdfast-dev/holdfast/controlapi"
	"github.com/holdfast-dev/holdfast/internal/testutil"
	"github.com/holdfast-dev/holdfast/internal/tokentable"
	"github.com/holdfast-dev/holdfast/relay"
	"github.com/holdfast-dev/holdfast/server"
	"github.com/holdfast-dev/holdfast/server/store"
	"github.com/holdfast-dev/holdfast/server/tokens"
	"github.com/holdfast-dev/holdfast/transport"
)

// authCall sends a control or data request with secret as its bearer
// token ("" for none) and decodes a 2xx JSON reply into out.
func authCall(t *testing.T, method, url, secret string, body, out any) int {
	t.Helper()
	var rd io.Reader
	if body != nil {
		j, err := json.Marshal(body)
		if err != nil {
			t.Fatal(err)
		}
		rd = bytes.NewReader(j)
	}
	req, err := http.NewRequest(method, url, rd)
	if err != nil {
		t.Fatal(err)
	}
	if secret != "" {
		req.Header.Set("Authorization", "Bearer "+secret)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	if out != nil && resp.StatusCode < 300 {
		if err := json.Unmarshal(data, out); err != nil {
			t.Fatalf("%s %s: %v: %s", method, url, err, data)
		}
	}
	return resp.StatusCode
}

// startServers starts n servers over one etcd the test owns.
func startServers(t *testing.T, n int) []string {
	_, _, urls := startServersWith(t, n, nil)
	return urls
}

// startServersWith is startServers with each server's config changed by
// edit (when set); it returns the etcd they share and the servers too.
func startServersWith(t *testing.T, n int, edit func(*server.Config)) (*store.Store, []*server.Server, []string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	etcdStore, err := store.Open(ctx, store.Config{Kind: store.KindEmbedded, DataDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = etcdStore.Close() })
	var servers []*server.Server
	var urls []string
	for range n {
		cfg := server.Config{Store: store.Config{Kind: store.KindExternal, Endpoints: etcdStore.Endpoints},
			Heartbeat: 200 * time.Millisecond, TokenUseInterval: 100 * time.Millisecond}
		if edit != nil {
			edit(&cfg)
		}
		s, err := server.New(ctx, cfg)
		if err != nil {
			t.Fatal(err)
		}
		hs := httptest.NewServer(s.Handler())
		t.Cleanup(func() {
			hs.CloseClientConnections()
			hs.Close()
			if err := s.Close(); err != nil {
				t.Error(err)
			}
		})
		servers = append(servers, s)
		urls = append(urls, hs.URL)
	}
	return etcdStore, servers, urls
}

func createToken(t *testing.T, base, admin string, req controlapi.TokenCreateRequest) string {
	t.Helper()
	created, err := controlClient(t, base, admin).CreateToken(t.Context(), req)
	if err != nil {
		t.Fatalf("creating token %q: %v", req.Name, err)
	}
	if !strings.HasPrefix(created.Secret, "hfs_") || created.Name != req.Name {
		t.Fatalf("created %+v", created)
	}
	return created.Secret
}

// TestTokensInTheStore: the first admin token closes an open store on
// every server; a token created through one server works on the other;
// one revoked through one server is refused by the other within 5 s.
func TestTokensInTheStore(t *testing.T) {
	urls := startServers(t, 2)
	a, b := urls[0], urls[1]
	change := controlapi.PublishRequest{Puts: testutil.JSONValues(t, map[string]any{"k": 1})}
	// publishAs publishes change to ns through base as the token secret
	// ("": none), and returns the call's error.
	publishAs := func(base, secret, ns string) error {
		_, err := controlClient(t, base, secret).Publish(t.Context(), ns, change)
		return err
	}

	// Open: anyone may publish.
	if err := publishAs(b, "", "payments.prod"); err != nil {
		t.Fatalf("open store: publish: %v", err)
	}
	admin := createToken(t, a, "", controlapi.TokenCreateRequest{Name: "root", Admin: true})
	for _, base := range urls {
		testutil.Eventually(t, 5*time.Second, func() bool {
			return statusOf(publishAs(base, "", "payments.prod")) == http.StatusUnauthorized
		}, "the store requires tokens once it has an admin token")
	}
	// The admin token has no control scope.
	if err := publishAs(a, admin, "payments.prod"); statusOf(err) != http.StatusForbidden {
		t.Fatalf("admin-only token publishing: %v, want 403", err)
	}

	deploy := createToken(t, a, admin, controlapi.TokenCreateRequest{Name: "deploy", Control: []string{"payments.*"}, Data: []string{"payments.*"}})
	testutil.Eventually(t, 5*time.Second, func() bool {
		return publishAs(b, deploy, "payments.prod") == nil
	}, "a token created through one server works on the other")
	if err := publishAs(b, deploy, "fraud.prod"); statusOf(err) != http.StatusForbidden {
		t.Fatalf("publish outside the scope: %v, want 403", err)
	}
	if _, err := controlClient(t, b, deploy).ListTokens(t.Context()); statusOf(err) != http.StatusForbidden {
		t.Fatalf("listing tokens without admin scope: %v, want 403", err)
	}
	if st := authCall(t, "GET", b+"/sdk/snapshot?ns=payments.prod", deploy, nil, nil); st != http.StatusOK {
		t.Fatalf("data plane read in scope: status %d", st)
	}
	if st := authCall(t, "GET", b+"/sdk/snapshot?ns=fraud.prod", deploy, nil, nil); st != http.StatusForbidden {
		t.Fatalf("data plane read outside the scope: status %d, want 403", st)
	}
	adminA := controlClient(t, a, admin)
	if _, err := adminA.CreateToken(t.Context(), controlapi.TokenCreateRequest{Name: "deploy", Data: []string{"x"}}); statusOf(err) != http.StatusConflict {
		t.Fatalf("creating an existing name: %v, want 409", err)
	}

	// The list: names and scopes, last use, never a secret or a hash.
	var list controlapi.TokenList
	testutil.Eventually(t, 5*time.Second, func() bool {
		list.Tokens, _ = adminA.ListTokens(t.Context())
		for _, tok := range list.Tokens {
			if tok.Name == "deploy" && !tok.LastUsed.IsZero() {
				return true
			}
		}
		return false
	}, "the list shows deploy's last use")
	raw, _ := json.Marshal(list)
	if bytes.Contains(raw, []byte("hfs_")) || bytes.Contains(raw, []byte("sha256")) {
		t.Fatalf("the list shows a secret or a hash: %s", raw)
	}

	// Revoked through a, refused by b within 5 s.
	if err := adminA.RevokeToken(t.Context(), "deploy"); err != nil {
		t.Fatalf("revoke: %v", err)
	}
	revoked := time.Now()
	if err := publishAs(a, deploy, "payments.prod"); statusOf(err) != http.StatusUnauthorized {
		t.Fatalf("the revoking server still accepts the token: %v", err)
	}
	testutil.Eventually(t, 5*time.Second, func() bool {
		return statusOf(publishAs(b, deploy, "payments.prod")) == http.StatusUnauthorized &&
			authCall(t, "GET", b+"/sdk/snapshot?ns=payments.prod", deploy, nil, nil) == http.StatusUnauthorized
	}, "the other server refuses a revoked token within 5 s")
	t.Logf("revoked token refused by the other server %v after the revoke's reply", time.Since(revoked).Round(time.Millisecond))
	if err := adminA.RevokeToken(t.Context(), "deploy"); statusOf(err) != http.StatusNotFound {
		t.Fatalf("revoking again: %v, want 404", err)
	}
}

// TestTokenExpires: an expired token is refused, and listed as expired.
func TestTokenExpires(t *testing.T) {
	urls := startServers(t, 1)
	admin := createToken(t, urls[0], "", controlapi.TokenCreateRequest{Name: "root", Admin: true})
	short := createToken(t, urls[0], admin, controlapi.TokenCreateRequest{Name: "short", Data: []string{"*"}, ExpiresIn: "1s"})
	snap := urls[0] + "/sdk/snapshot?ns=a.b"
	// Authenticated: past the gate, to a namespace that does not exist
	// (404, or 503 while the server's follower is still asking its store:
	// the token's second is too short to wait that out on a loaded
	// machine, as CI found).
	if st := authCall(t, "GET", snap, short, nil, nil); st != http.StatusNotFound && st != http.StatusServiceUnavailable {
		t.Fatalf("before expiry: status %d, want 404 (or 503)", st)
	}
	testutil.Eventually(t, 5*time.Second, func() bool { return authCall(t, "GET", snap, short, nil, nil) == http.StatusUnauthorized },
		"an expired token is refused")
	c := controlClient(t, urls[0], admin)
	if info, err := c.GetToken(t.Context(), "short"); err != nil || !info.Expired {
		t.Fatalf("get: %v, %+v", err, info)
	}
	if _, err := c.CreateToken(t.Context(), controlapi.TokenCreateRequest{Name: "bad", Data: []string{"["}}); statusOf(err) != http.StatusBadRequest {
		t.Fatalf("a bad pattern: %v, want 400", err)
	}
	if _, err := c.CreateToken(t.Context(), controlapi.TokenCreateRequest{Name: ".hidden", Data: []string{"*"}}); statusOf(err) != http.StatusBadRequest {
		t.Fatalf("a bad name: %v, want 400", err)
	}
}

// TestBootstrap: -bootstrap-token-file's two forms, and that a store with
// an admin token is left alone.
func TestBootstrap(t *testing.T) {
	ctx := context.Background()
	s, _ := startServer(t, store.Config{Kind: store.KindMemory})
	dir := t.TempDir()
	write := func(name string, data []byte) error { return os.WriteFile(name, data, 0o600) }

	// A file with a secret: the token is made with it.
	given := filepath.Join(dir, "given")
	if err := os.WriteFile(given, []byte("hfs_a-secret-of-enough-length-0123456789\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	created, err := s.Tokens().Bootstrap(ctx, given, write)
	if err != nil || !created {
		t.Fatalf("bootstrap: %v, %v", created, err)
	}
	if id, ok := s.Tokens().Table().Authenticate("hfs_a-secret-of-enough-length-0123456789"); !ok || !id.IsAdmin() || id.Name != tokens.BootstrapName {
		t.Fatalf("the bootstrap token: %+v %v", id, ok)
	}
	// Again: the store has an admin token; nothing happens.
	missing := filepath.Join(dir, "missing")
	if created, err := s.Tokens().Bootstrap(ctx, missing, write); err != nil || created {
		t.Fatalf("second bootstrap: %v, %v", created, err)
	}
	if _, err := os.Stat(missing); !os.IsNotExist(err) {
		t.Fatalf("the second bootstrap wrote its file: %v", err)
	}

	// A missing file on a store without an admin token: a new secret,
	// written to it.
	s2, _ := startServer(t, store.Config{Kind: store.KindMemory})
	if created, err := s2.Tokens().Bootstrap(ctx, missing, write); err != nil || !created {
		t.Fatalf("bootstrap with a new secret: %v, %v", created, err)
	}
	data, err := os.ReadFile(missing)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := s2.Tokens().Table().Authenticate(strings.TrimSpace(string(data))); !ok {
		t.Fatal("the secret written does not authenticate")
	}
}

// TestRelayRefusesARevokedToken: a relay checks its clients' data tokens
// against the store's records, through its server (relay scope); a token
// revoked at the server is refused by the relay within 5 s.
func TestRelayRefusesARevokedToken(t *testing.T) {
	urls := startServers(t, 1)
	origin := urls[0]
	admin := createToken(t, origin, "", controlapi.TokenCreateRequest{Name: "root", Admin: true, Control: []string{"*"}})
	relaySecret := createToken(t, origin, admin, controlapi.TokenCreateRequest{Name: "relay-1", Relay: true, Data: []string{"*"}})
	client := createToken(t, origin, admin, controlapi.TokenCreateRequest{Name: "payments-svc", Data: []string{"payments.*"}})
	adminC := controlClient(t, origin, admin)
	if _, err := adminC.Publish(t.Context(), "payments.prod", controlapi.PublishRequest{Puts: testutil.JSONValues(t, map[string]any{"k": 1})}); err != nil {
		t.Fatalf("publish: %v", err)
	}

	remote, err := tokentable.NewRemote(tokentable.RemoteConfig{URLs: []string{origin}, Secret: relaySecret})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(remote.Close)
	src, err := transport.NewHTTPSource(origin, transport.WithBearerToken(relaySecret))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = src.Close() })
	r, err := relay.New(src, relay.WithTokens(remote.Tokens()))
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(r.Handler())
	t.Cleanup(func() {
		hs.CloseClientConnections()
		hs.Close()
		_ = r.Close()
	})
	snap := hs.URL + "/sdk/snapshot?ns=payments.prod"
	testutil.Eventually(t, 10*time.Second, func() bool { return authCall(t, "GET", snap, client, nil, nil) == http.StatusOK },
		"the relay serves a client with a valid token")
	if st := authCall(t, "GET", hs.URL+"/sdk/snapshot?ns=fraud.prod", client, nil, nil); st != http.StatusForbidden {
		t.Fatalf("outside the token's scope: status %d, want 403", st)
	}
	if st := authCall(t, "GET", snap, "hfs_not-a-token-of-the-store-000000", nil, nil); st != http.StatusUnauthorized {
		t.Fatalf("an unknown token: status %d, want 401", st)
	}
	// The relay's uses reach the store as last uses.
	testutil.Eventually(t, 10*time.Second, func() bool {
		info, err := adminC.GetToken(t.Context(), "payments-svc")
		return err == nil && !info.LastUsed.IsZero()
	}, "the relay reports its clients' uses")

	// A token without the relay scope may not sync.
	if _, err := controlClient(t, origin, client).SyncTokens(t.Context(), controlapi.TokenSyncRequest{}); statusOf(err) != http.StatusForbidden {
		t.Fatalf("sync without the relay scope: %v, want 403", err)
	}

	if err := adminC.RevokeToken(t.Context(), "payments-svc"); err != nil {
		t.Fatalf("revoke: %v", err)
	}
	revoked := time.Now()
	testutil.Eventually(t, 5*time.Second, func() bool { return authCall(t, "GET", snap, client, nil, nil) == http.StatusUnauthorized },
		"the relay refuses a revoked token within 5 s")
	t.Logf("revoked token refused by the relay %v after the revoke's reply", time.Since(revoked).Round(time.Millisecond))
}

// TestAuditActorIsTheToken: on a store that requires tokens the audit's
// actor is the token's name and the request's actor is on_behalf_of; on
// an open store the actor is the one the request names.
func TestAuditActorIsTheToken(t *testing.T) {
	urls := startServers(t, 1)
	base := urls[0]
	const ns = "payments.prod"
	first, err := controlClient(t, base).Publish(t.Context(), ns, controlapi.PublishRequest{Puts: testutil.JSONValues(t, map[string]any{"k": 0}), Actor: "alice"})
	if err != nil {
		t.Fatalf("open publish: %v", err)
	}
	admin := createToken(t, base, "", controlapi.TokenCreateRequest{Name: "root", Admin: true})
	deploy := controlClient(t, base, createToken(t, base, admin, controlapi.TokenCreateRequest{Name: "deploy-bot", Control: []string{"payments.*"}}))
	if _, err := deploy.Publish(t.Context(), ns, controlapi.PublishRequest{Puts: testutil.JSONValues(t, map[string]any{"k": 1}), Actor: "alice"}); err != nil {
		t.Fatalf("publish: %v", err)
	}
	if _, err := deploy.Publish(t.Context(), ns, controlapi.PublishRequest{Puts: testutil.JSONValues(t, map[string]any{"k": 2})}); err != nil {
		t.Fatalf("publish: %v", err)
	}
	if _, err := deploy.Rollback(t.Context(), ns, controlapi.RollbackRequest{To: &first, Actor: "bob"}); err != nil {
		t.Fatalf("rollback: %v", err)
	}
	h, err := deploy.History(t.Context(), ns, controlapi.HistoryOptions{})
	if err != nil {
		t.Fatalf("history: %v", err)
	}
	type who struct{ actor, onBehalfOf string }
	var got []who
	for _, r := range h.Revisions {
		got = append(got, who{r.Actor, r.OnBehalfOf})
	}
	want := []who{{"deploy-bot", "bob"}, {"deploy-bot", ""}, {"deploy-bot", "alice"}, {"alice", ""}}
	if len(got) != len(want) {
		t.Fatalf("history %+v", got)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("history %+v, want %+v", got, want)
		}
	}
}
