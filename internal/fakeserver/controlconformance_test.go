package fakeserver

import (
	"testing"

	"github.com/holdfast-dev/holdfast/access"
	"github.com/holdfast-dev/holdfast/internal/controltest"
)

// TestControlConformance: the reference server passes the control API's
// conformance suite, open and with tokens (no token store: its token
// routes are 404).
func TestControlConformance(t *testing.T) {
	t.Run("Open", func(t *testing.T) {
		controltest.Run(t, func(t *testing.T) *controltest.Server {
			return &controltest.Server{URL: start(t).URL()}
		})
	})
	t.Run("Tokens", func(t *testing.T) {
		controltest.Run(t, func(t *testing.T) *controltest.Server {
			ids := idTable{
				"ct-control-secret-0000001": access.NewIdentity("ct-control", access.Scopes{Control: []string{"*"}}),
				"ct-scoped-secret-00000002": access.NewIdentity("ct-scoped", access.Scopes{Control: []string{"scoped.*"}}),
				"ct-data-secret-0000000003": access.NewIdentity("ct-data", access.Scopes{Data: []string{"*"}}),
				"ct-admin-secret-000000004": access.NewIdentity("ct-admin", access.Scopes{Admin: true}),
				"ct-review-secret-00000005": access.NewIdentity("ct-reviewer", access.Scopes{Control: []string{"*"}}),
			}
			s := start(t, WithTokens(access.FromAuthenticator(ids)))
			return &controltest.Server{URL: s.URL(), Tokens: &controltest.Tokens{
				Control: "ct-control-secret-0000001", Scoped: "ct-scoped-secret-00000002", Data: "ct-data-secret-0000000003",
				Admin: "ct-admin-secret-000000004", ControlName: "ct-control", Reviewer: "ct-review-secret-00000005", ReviewerName: "ct-reviewer"},
				OverdueReviews: s.OverdueReviews}
		})
	})
}

// idTable authenticates a secret by a table: identities of any scope
// (and of any name).
type idTable map[string]access.Identity

func (t idTable) Authenticate(secret string) (access.Identity, bool) {
	id, ok := t[secret]
	return id, ok
}
