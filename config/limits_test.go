package config_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/holdfast-dev/holdfast/config"
	"github.com/holdfast-dev/holdfast/internal/sdksuite"
	"github.com/holdfast-dev/holdfast/internal/testutil"
	"github.com/holdfast-dev/holdfast/internal/testutil/nstest"
	"github.com/holdfast-dev/holdfast/transport"
)

// TestOversizedSnapshotBacksOffToTheMaximum (hole 4, the client's part):
// a snapshot over the size limit is refused with ErrTooLarge in Status,
// the last good keeps serving, and it is not downloaded again on every
// step of a growing backoff: the next try waits the longest backoff.
// Before: 5, 10, 20, 40 ms... eight downloads in the first second and a half.
func TestOversizedSnapshotBacksOffToTheMaximum(t *testing.T) {
	srv := sdksuite.StartReference(t)
	sdksuite.Publish(t, srv, "big", map[string]any{"k": "small"})
	dir, _ := syncedCacheDir(t, srv, "big")
	sdksuite.Publish(t, srv, "big", map[string]any{"k": string(make([]byte, 4096))})
	before := srv.Stats().Snapshots
	c := sdksuite.NewClient(t, sdksuite.Endpoint(srv.URL()), config.WithCacheDir(dir), config.WithMaxSnapshotBytes(1024),
		config.WithReconnectBackoff(5*time.Millisecond, time.Second))

	ns := sdksuite.Open(t, c, "big")
	testutil.Eventually(t, waitLimit, func() bool { return errors.Is(ns.Status().LastError.Err, transport.ErrTooLarge) }, "ErrTooLarge in Status")
	start := time.Now()
	testutil.Consistently(t, 1500*time.Millisecond, func() error {
		if got := ns.String("k", ""); got != "small" {
			return fmt.Errorf("serves %q", got)
		}
		return nil
	}, "the last good must keep serving")
	if n := srv.Stats().Snapshots - before; n > 3 {
		t.Errorf("%d snapshot downloads in %v; want the longest backoff (1s ± 25%%) between them", n, time.Since(start).Round(time.Millisecond))
	}
	if st := ns.Status(); st.LastError.Kind != config.ErrorInvalidData || !strings.Contains(st.LastError.Message, "1024") {
		t.Errorf("LastError = %v %q; want invalid_data naming the 1024-byte limit", st.LastError.Kind, st.LastError.Message)
	}
}

// TestSnapshotKeyLimitIsAClientOption (hole 4): the key limit that bounds
// what decoding costs is reachable from config, not only from a hand-built
// transport.HTTPSource: over it, ErrTooLarge in Status naming the limit,
// and the last good keeps serving.
func TestSnapshotKeyLimitIsAClientOption(t *testing.T) {
	srv := sdksuite.StartReference(t)
	sdksuite.Publish(t, srv, "keys", map[string]any{"a": 1})
	dir, _ := syncedCacheDir(t, srv, "keys")
	sdksuite.Publish(t, srv, "keys", map[string]any{"b": 2, "c": 3})
	c := sdksuite.NewClient(t, sdksuite.Endpoint(srv.URL()), config.WithCacheDir(dir), config.WithMaxSnapshotKeys(2))
	ns := sdksuite.Open(t, c, "keys")
	testutil.Eventually(t, waitLimit, func() bool { return errors.Is(ns.Status().LastError.Err, transport.ErrTooLarge) }, "ErrTooLarge in Status")
	if msg := ns.Status().LastError.Message; !strings.Contains(msg, "2 keys") {
		t.Errorf("LastError %q does not name the 2-key limit", msg)
	}
	if ns.Int("a", 0) != 1 || ns.Revision() != 1 {
		t.Errorf("serves a=%d at %d; want the last good a=1 at 1", ns.Int("a", 0), ns.Revision())
	}
}

// TestOversizedEventResnapshots (hole 4, events): a change over the event
// limit ends the watch; resuming from the cursor would meet it again, so
// the client resnapshots (the snapshot has its own, larger limit) and
// converges. Before: it resumed into the same event forever.
func TestOversizedEventResnapshots(t *testing.T) {
	srv := sdksuite.StartReference(t)
	sdksuite.Publish(t, srv, "ev", map[string]any{"k": "small"})
	c := sdksuite.NewClient(t, sdksuite.Endpoint(srv.URL()), config.WithMaxEventBytes(512))
	ns := sdksuite.Open(t, c, "ev")
	big := strings.Repeat("x", 2048)
	rev := sdksuite.Publish(t, srv, "ev", map[string]any{"k": big})
	nstest.WaitRevision(t, ns, rev, waitLimit)
	if ns.String("k", "") != big {
		t.Errorf("serves %d bytes of k; want the 2048 of the oversized change", len(ns.String("k", "")))
	}
}
