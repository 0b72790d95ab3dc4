package config_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/holdfast-dev/holdfast/config"
	"github.com/holdfast-dev/holdfast/internal/sdksuite"
	"github.com/holdfast-dev/holdfast/internal/testutil/nstest"
	"github.com/holdfast-dev/holdfast/transport"
)

// A fail-open namespace whose first snapshot was rejected opens on its
// Defaults: it does not serve data of its config plane, so CheckReady,
// which promises "ready when each serves data of its own config plane",
// must not call it ready.
func TestCheckReadyIsNotReadyOnDefaults(t *testing.T) {
	srv := sdksuite.StartReference(t)
	sdksuite.Publish(t, srv, "svc", map[string]any{"port": "not-a-number"})
	c := sdksuite.NewClient(t, sdksuite.Endpoint(srv.URL()))
	ns := sdksuite.Open(t, c, "svc", config.Schema([]byte(`{"type":"object","properties":{"port":{"type":"integer"}}}`)),
		config.Defaults(map[string]any{"port": 8080}))

	if st := ns.Status(); st.Origin != config.OriginDefaults {
		t.Fatalf("origin %v; want defaults", st.Origin)
	}
	err := c.CheckReady(0, "svc")
	var nr *config.NotReadyError
	if !errors.As(err, &nr) || !strings.Contains(nr.NotReady[0].Reason, "Defaults") {
		t.Fatalf("CheckReady on a namespace serving its Defaults = %v; want not ready, saying Defaults", err)
	}
	rev := sdksuite.Publish(t, srv, "svc", map[string]any{"port": 9090})
	nstest.WaitRevision(t, ns, rev, waitLimit)
	if err := c.CheckReady(0, "svc"); err != nil {
		t.Errorf("after a revision that passes: %v", err)
	}
}

// A last-good file confirmed in the future has an unknown age (Staleness
// and LastConfirmed zero): it is not within any staleness limit the probe
// sets.
func TestCheckReadyRefusesDataOfUnknownAge(t *testing.T) {
	dir := t.TempDir()
	sdksuite.WriteCacheFile(t, dir, "future", "s1", 3, map[string]string{"k": "v"}, time.Now().Add(time.Hour))
	down := &sdksuite.FuncSource{SnapshotFunc: func(context.Context, transport.SnapshotRequest) (*transport.Snapshot, error) {
		return nil, errors.New("connection refused")
	}}
	c := sdksuite.NewClient(t, sdksuite.Source(down), config.WithCacheDir(dir))
	ns := sdksuite.Open(t, c, "future")
	if st := ns.Status(); !st.LastConfirmed.IsZero() || ns.String("k", "") != "v" {
		t.Fatalf("status %v; want the file served with an unknown age", st)
	}
	if err := c.CheckReady(time.Minute, "future"); err == nil {
		t.Errorf("CheckReady(1m) of data of unknown age = nil; want not ready")
	}
	if err := c.CheckReady(0, "future"); err != nil {
		t.Errorf("CheckReady(0) (no staleness limit) = %v; want ready", err)
	}
}

// With no names, the not-ready namespaces come in a stable order (sorted
// by name), so the probe's body does not reshuffle on every request.
func TestCheckReadyListsTheNotReadySortedByName(t *testing.T) {
	srv := sdksuite.StartReference(t)
	names := []string{"e", "d", "c", "b", "a"}
	c := sdksuite.NewClient(t, sdksuite.Endpoint(srv.URL()))
	for _, n := range names {
		sdksuite.Publish(t, srv, n, map[string]any{"k": 1})
		sdksuite.Open(t, c, n)
	}
	_ = c.Close()
	for range 20 {
		var nr *config.NotReadyError
		if !errors.As(c.CheckReady(0), &nr) {
			t.Fatal("a closed client is ready")
		}
		var got []string
		for _, r := range nr.NotReady {
			got = append(got, r.Namespace)
		}
		if !slices.IsSorted(got) || len(got) != len(names) {
			t.Fatalf("not ready in order %v; want sorted", got)
		}
	}
}
