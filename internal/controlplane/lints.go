package controlplane

import (
	"context"

	"github.com/holdfast-dev/holdfast/internal/lint"
)

// lintsFor returns the compiled lints that apply to namespace ns.
func (h *Handler) lintsFor(ctx context.Context, ns string) ([]*lint.Lint, error) {
	return nil, nil
}
