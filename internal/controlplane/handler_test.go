package controlplane

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/holdfast-dev/holdfast/access"
	"github.com/holdfast-dev/holdfast/controlapi"
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
