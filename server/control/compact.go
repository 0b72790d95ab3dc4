package control

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/holdfast-dev/holdfast/transport/etcd"
)

// Compact compacts the store's history to revision rev (0: the head) and
// returns the compaction point. A revision at or below the point is
// already compacted: Compact returns the point. One above the head is
// refused.
func Compact(ctx context.Context, cli *clientv3.Client, rev int64) (int64, error) {
	head, done, err := Points(ctx, cli)
	if err != nil {
		return 0, err
	}
	switch {
	case rev == 0:
		rev = head
	case rev > head:
		return 0, badRequest("revision %d is above the store's head %d", rev, head)
	}
	if rev <= done {
		return done, nil
	}
	if _, err := cli.Compact(ctx, rev, clientv3.WithCompactPhysical()); err != nil && !errors.Is(err, rpctypes.ErrCompacted) {
		return 0, fmt.Errorf("control: compact to %d: %w", rev, err)
	}
	return rev, nil
}

// Points reads the store's head and its compaction point. etcd's status
// carries no compaction point: a watch from revision 1 of the store id's
// key (written once, when the store began) tells it: refused as compacted
// at the point, or answered with the key's creation when nothing is.
func Points(ctx context.Context, cli *clientv3.Client) (head, compact int64, err error) {
	resp, err := cli.Get(ctx, etcd.StoreIDKey)
	if err != nil {
		return 0, 0, fmt.Errorf("control: the store's head: %w", err)
	}
	wctx, cancel := context.WithTimeout(clientv3.WithRequireLeader(ctx), 5*time.Second)
	defer cancel()
	for w := range cli.Watch(wctx, etcd.StoreIDKey, clientv3.WithRev(1)) {
		if w.CompactRevision != 0 {
			return resp.Header.Revision, w.CompactRevision, nil
		}
		if err := w.Err(); err != nil {
			return 0, 0, fmt.Errorf("control: the store's compaction point: %w", err)
		}
		if len(w.Events) > 0 {
			return resp.Header.Revision, 0, nil
		}
	}
	return 0, 0, fmt.Errorf("control: the store's compaction point: %w", wctx.Err())
}
