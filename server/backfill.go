package server

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/holdfast-dev/holdfast/transport"
	"github.com/holdfast-dev/holdfast/transport/etcd"
)

// errFilled ends a backfill's watch once it reached its revision.
var errFilled = errors.New("server: backfill complete")

// backfillWait bounds one backfill: a client waits for it before its
// stream starts.
const backfillWait = 5 * time.Second

// backfill reads ns's change sets in (since, until] from the store's
// history (etcd's revisions, until its compaction point), for a client
// that resumes from a cursor older than the watch cache's window.
func backfill(src *etcd.Source) func(ctx context.Context, ns string, since, until int64, max int) ([]transport.ChangeSet, error) {
	return func(ctx context.Context, ns string, since, until int64, max int) ([]transport.ChangeSet, error) {
		ctx, cancel := context.WithTimeout(ctx, backfillWait)
		defer cancel()
		var css []transport.ChangeSet
		err := src.Watch(ctx, transport.WatchRequest{Namespace: ns, Since: since}, func(ev transport.Event) error {
			switch {
			case ev.Change != nil && ev.Change.Revision > until:
				return errFilled
			case ev.Change != nil:
				if len(css) == max {
					return fmt.Errorf("server: backfill of %q: more than %d change sets after %d", ns, max, since)
				}
				css = append(css, *ev.Change)
				if ev.Change.Revision == until {
					return errFilled
				}
			case ev.Progress != nil && ev.Progress.Cursor >= until:
				return errFilled
			}
			return nil
		})
		if !errors.Is(err, errFilled) {
			return nil, err
		}
		return css, nil
	}
}
