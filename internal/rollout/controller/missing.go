package controller

import (
	"context"
	"strings"
	"time"
)

// MissingFunc is Config.Missing: how many reports of ns's clients since
// are known missing, and why.
type MissingFunc = func(ctx context.Context, ns string, since time.Time) (n int64, why string)

// JoinMissing returns a MissingFunc that sums fns' counts and joins the
// reasons of those that count some.
func JoinMissing(fns ...MissingFunc) MissingFunc {
	return func(ctx context.Context, ns string, since time.Time) (int64, string) {
		var n int64
		var whys []string
		for _, fn := range fns {
			if m, why := fn(ctx, ns, since); m > 0 {
				n += m
				whys = append(whys, why)
			}
		}
		return n, strings.Join(whys, "; ")
	}
}
