package control

import (
	"context"
	"errors"
	"time"

	"github.com/holdfast-dev/holdfast/access"
	"github.com/holdfast-dev/holdfast/controlapi"
	"github.com/holdfast-dev/holdfast/internal/controlplane"
	"github.com/holdfast-dev/holdfast/server/tokens"
)

// tokenStore is the control API's token store (controlplane.TokenStore):
// the store's tokens, their errors in the API's terms.
type tokenStore struct{ ts *tokens.Store }

var _ controlplane.TokenStore = tokenStore{}

func (t tokenStore) Create(ctx context.Context, rec access.Record) error {
	return tokenError(t.ts.Create(ctx, rec))
}

func (t tokenStore) List(ctx context.Context) ([]controlapi.TokenInfo, error) { return t.ts.List(ctx) }

func (t tokenStore) Revoke(ctx context.Context, name string) error {
	return tokenError(t.ts.Revoke(ctx, name))
}

func (t tokenStore) NoteUses(names []string, at time.Time) { t.ts.NoteUses(names, at) }

func (t tokenStore) Sync(ctx context.Context, after int64, maxWait time.Duration) controlapi.TokenSync {
	return t.ts.Wait(ctx, after, maxWait)
}

// tokenError maps the token store's errors.
func tokenError(err error) error {
	switch {
	case errors.Is(err, tokens.ErrExists):
		return controlplane.Mark(controlplane.ErrExists, err)
	case errors.Is(err, tokens.ErrNotFound):
		return controlplane.Mark(controlplane.ErrNotFound, err)
	case errors.Is(err, tokens.ErrTooMany):
		return controlplane.Mark(controlplane.ErrFull, err)
	}
	return err
}
