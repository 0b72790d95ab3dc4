package server_test

import (
	"context"
	"testing"
	"time"

	"github.com/holdfast-dev/holdfast/access"
	"github.com/holdfast-dev/holdfast/internal/controltest"
	"github.com/holdfast-dev/holdfast/server/store"
)

// TestControlConformance: holdfast server passes the control API's
// conformance suite, open and with tokens (its token store's routes
// with them).
func TestControlConformance(t *testing.T) {
	t.Run("Open", func(t *testing.T) {
		controltest.Run(t, func(t *testing.T) *controltest.Server {
			_, url := startServer(t, store.Config{Kind: store.KindMemory})
			return &controltest.Server{URL: url}
		})
	})
	t.Run("Tokens", func(t *testing.T) {
		controltest.Run(t, func(t *testing.T) *controltest.Server {
			s, url := startServer(t, store.Config{Kind: store.KindMemory})
			tok := &controltest.Tokens{Control: "ct-control-secret-0000001", Scoped: "ct-scoped-secret-00000002",
				Data: "ct-data-secret-0000000003", Admin: "ct-admin-secret-000000004",
				ControlName: "ct-control", Reviewer: "ct-review-secret-00000005", ReviewerName: "ct-reviewer"}
			ctx := context.Background()
			now := time.Now().UTC()
			for _, rec := range []access.Record{
				{Name: "ct-control", Hash: access.HashSecret(tok.Control), Scopes: access.Scopes{Control: []string{"*"}}},
				{Name: "ct-scoped", Hash: access.HashSecret(tok.Scoped), Scopes: access.Scopes{Control: []string{"scoped.*"}}},
				{Name: "ct-data", Hash: access.HashSecret(tok.Data), Scopes: access.Scopes{Data: []string{"*"}}},
				{Name: "ct-admin", Hash: access.HashSecret(tok.Admin), Scopes: access.Scopes{Admin: true}},
				{Name: "ct-reviewer", Hash: access.HashSecret(tok.Reviewer), Scopes: access.Scopes{Control: []string{"*"}}},
			} {
				rec.Created = now
				if err := s.Tokens().Create(ctx, rec); err != nil {
					t.Fatal(err)
				}
			}
			return &controltest.Server{URL: url, Tokens: tok, OverdueReviews: s.OverdueReviews}
		})
	})
}
