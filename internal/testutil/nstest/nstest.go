// Package nstest holds the helpers that tests of a config.Namespace share.
// It is apart from testutil because it imports config, which config's own
// internal tests could not import back.
package nstest

import (
	"context"
	"testing"
	"time"

	"github.com/holdfast-dev/holdfast/config"
)

// WaitRevision waits until ns has applied revision rev, and fails tb
// (Fatal), saying where ns is, if it has not within timeout.
func WaitRevision(tb testing.TB, ns *config.Namespace, rev int64, timeout time.Duration) {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	if err := ns.WaitForRevision(ctx, rev); err != nil {
		tb.Fatalf("revision %d not reached (at %d, status %+v): %v", rev, ns.Revision(), ns.Status(), err)
	}
}
