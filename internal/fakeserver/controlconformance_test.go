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
			toks, err := access.New(
				access.Token{Name: "ct-control", Secret: "ct-control-secret-0000001", Control: []string{"*"}},
				access.Token{Name: "ct-scoped", Secret: "ct-scoped-secret-00000002", Control: []string{"scoped.*"}},
				access.Token{Name: "ct-data", Secret: "ct-data-secret-0000000003", Data: []string{"*"}},
			)
			if err != nil {
				t.Fatal(err)
			}
			s := start(t, WithTokens(toks))
			return &controltest.Server{URL: s.URL(), Tokens: &controltest.Tokens{
				Control: "ct-control-secret-0000001", Scoped: "ct-scoped-secret-00000002", Data: "ct-data-secret-0000000003"}}
		})
	})
}
