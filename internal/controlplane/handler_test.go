package controlplane

import (
	"context"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"

	"github.com/holdfast-dev/holdfast/access"
	"github.com/holdfast-dev/holdfast/controlapi"
	"github.com/holdfast-dev/holdfast/internal/authlimit"
)

// statusStore answers Status alone, with the caller's identity as the
// namespace's store id.
type statusStore struct{ Store }

func (statusStore) Status(ctx context.Context, ns string) (controlapi.NamespaceStatus, error) {
	id, _ := access.FromContext(ctx)
	return controlapi.NamespaceStatus{Namespace: ns, StoreID: id.Name}, nil
}

// headerAuth authenticates the header X-Who as a token of that name with
// control of every namespace.
type headerAuth struct{ t *testing.T }

func (a headerAuth) AuthenticateRequest(r *http.Request) (access.Identity, bool) {
	name := r.Header.Get("X-Who")
	if name == "" {
		return access.Identity{}, false
	}
	toks, err := access.New(access.Token{Name: name, Secret: "a-secret-long-enough-0123456789", Control: []string{"*"}})
	if err != nil {
		a.t.Fatal(err)
	}
	return toks.AuthenticateHeader("Bearer a-secret-long-enough-0123456789")
}

// TestIdentityIsASeam: the handler reads the caller's identity from the
// request's context: one a front end put there is used as it is, else
// the Authenticator's; without either the request is refused.
func TestIdentityIsASeam(t *testing.T) {
	h, err := New(Config{Store: statusStore{}, Authenticator: headerAuth{t}})
	if err != nil {
		t.Fatal(err)
	}
	front, ok := headerAuth{t}.AuthenticateRequest(&http.Request{Header: http.Header{"X-Who": {"front"}}})
	if !ok {
		t.Fatal("no identity")
	}
	for _, c := range []struct {
		name, header string
		ctxID        bool
		status       int
		want         string
	}{
		{"the authenticator's", "alice", false, http.StatusOK, "alice"},
		{"the front end's", "alice", true, http.StatusOK, "front"},
		{"none", "", false, http.StatusUnauthorized, ""},
	} {
		req := httptest.NewRequest("GET", "/control/namespaces/ns/status", nil)
		if c.header != "" {
			req.Header.Set("X-Who", c.header)
		}
		if c.ctxID {
			req = req.WithContext(access.NewContext(req.Context(), front))
		}
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		if rec.Code != c.status || c.status == http.StatusOK && !strings.Contains(rec.Body.String(), `"store_id":"`+c.want+`"`) {
			t.Errorf("%s: %d %s; want %d naming %q", c.name, rec.Code, rec.Body, c.status, c.want)
		}
	}
}

// TestWrongTokensAreSlowedPerPeer: with an AuthLimit, a peer past its
// failures gets 429 with Retry-After before its token is looked at;
// another peer's right token is served.
func TestWrongTokensAreSlowedPerPeer(t *testing.T) {
	const secret = "s3cret-control-token-0001"
	toks, err := access.New(access.Token{Name: "ops", Secret: secret, Control: []string{"*"}})
	if err != nil {
		t.Fatal(err)
	}
	h, err := New(Config{Store: statusStore{}, Authenticator: toks, AuthLimit: authlimit.New(authlimit.Config{Burst: 3, Rate: 0.1})})
	if err != nil {
		t.Fatal(err)
	}
	call := func(peer, token string) *httptest.ResponseRecorder {
		req := httptest.NewRequest("GET", "/control/namespaces/ns/status", nil)
		req.RemoteAddr = peer + ":5000"
		req.Header.Set("Authorization", "Bearer "+token)
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		return rec
	}
	var codes []int
	for range 5 {
		codes = append(codes, call("192.0.2.1", "s3cret-wrong-0000000000").Code)
	}
	if want := []int{401, 401, 401, 429, 429}; !slices.Equal(codes, want) {
		t.Errorf("a peer's wrong tokens: %v, want %v", codes, want)
	}
	if rec := call("192.0.2.1", secret); rec.Code != http.StatusTooManyRequests || rec.Header().Get("Retry-After") == "" {
		t.Errorf("the limited peer, even with a right token: %d (Retry-After %q), want 429 with Retry-After", rec.Code, rec.Header().Get("Retry-After"))
	}
	if rec := call("192.0.2.2", secret); rec.Code != http.StatusOK {
		t.Errorf("another peer's right token: %d %s", rec.Code, rec.Body)
	}
}

// TestWrongTokenIsNotAccepted: a token sent and not accepted is said so;
// "needs a bearer token" is for a request that sent none.
func TestWrongTokenIsNotAccepted(t *testing.T) {
	toks, err := access.New(access.Token{Name: "ops", Secret: "s3cret-control-token-0001", Control: []string{"*"}})
	if err != nil {
		t.Fatal(err)
	}
	h, err := New(Config{Store: statusStore{}, Authenticator: toks})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ header, want string }{
		{"Bearer s3cret-wrong-0000000000", `"message":"the bearer token was not accepted (unknown, revoked, expired or mistyped)"`},
		{"", `"message":"the control API needs a bearer token"`},
	} {
		req := httptest.NewRequest("GET", "/control/namespaces/ns/status", nil)
		if c.header != "" {
			req.Header.Set("Authorization", c.header)
		}
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		if rec.Code != http.StatusUnauthorized || !strings.Contains(rec.Body.String(), c.want) {
			t.Errorf("%q: %d %s; want 401 with %s", c.header, rec.Code, rec.Body, c.want)
		}
	}
}
