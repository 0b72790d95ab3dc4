package config_test

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"

	"github.com/holdfast-dev/holdfast/config"
	"github.com/holdfast-dev/holdfast/internal/sdksuite"
	"github.com/holdfast-dev/holdfast/internal/testutil"
	"github.com/holdfast-dev/holdfast/transport"
)

// A malformed message on a watch stream is classified ErrorInvalidData, as
// a rejected update is; but it rejected no revision: once the resumed
// watch confirms the data, the error is past, though no later revision was
// applied (a quiet namespace may see none for days).
func TestMalformedStreamErrorIsPastAfterConfirmation(t *testing.T) {
	snap := &transport.Snapshot{Namespace: "q", StoreID: "s1", Revision: 3, Cursor: 3, Values: rawObject(map[string]string{"k": "v"})}
	var watches atomic.Int64
	src := &sdksuite.FuncSource{
		SnapshotFunc: func(context.Context, transport.SnapshotRequest) (*transport.Snapshot, error) { return snap, nil },
		WatchFunc: func(ctx context.Context, req transport.WatchRequest, handle func(transport.Event) error) error {
			if watches.Add(1) == 1 {
				return fmt.Errorf("transport: watch %q: %w: an event of an unknown type", req.Namespace, transport.ErrMalformed)
			}
			if err := handle(transport.Event{Progress: &transport.Progress{Namespace: "q", StoreID: "s1", Revision: 3, Cursor: 3}}); err != nil {
				return err
			}
			<-ctx.Done()
			return ctx.Err()
		},
	}
	c := sdksuite.NewClient(t, sdksuite.Source(src))
	ns := sdksuite.Open(t, c, "q")
	testutil.Eventually(t, waitLimit, func() bool {
		st := ns.Status()
		return errors.Is(st.LastError.Err, transport.ErrMalformed) && st.LastConfirmed.After(st.LastError.Time)
	}, "the malformed stream in Status, then a confirmation after it")
	if st := ns.Status(); st.LastError.Kind != config.ErrorInvalidData || !st.LastError.Recovered {
		t.Errorf("LastError %v (kind %v, recovered %v) though confirmed after it at %v; want it past",
			st.LastError, st.LastError.Kind, st.LastError.Recovered, st.LastConfirmed)
	}
}
