package control

import (
	"context"
	"errors"
	"fmt"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/holdfast-dev/holdfast/internal/controlplane"
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
		return 0, controlplane.Mark(controlplane.ErrInvalid, fmt.Errorf("revision %d is above the store's head %d", rev, head))
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
// carries no compaction point: a read at a revision below it is refused,
// so a binary search of reads of one key (count only) finds it in about
// log2(head) small requests, whatever the history's length.
func Points(ctx context.Context, cli *clientv3.Client) (head, compact int64, err error) {
	resp, err := cli.Get(ctx, etcd.StoreIDKey, clientv3.WithCountOnly())
	if err != nil {
		return 0, 0, fmt.Errorf("control: the store's head: %w", err)
	}
	head = resp.Header.Revision
	readable := func(rev int64) (bool, error) {
		_, err := cli.Get(ctx, etcd.StoreIDKey, clientv3.WithCountOnly(), clientv3.WithRev(rev))
		switch {
		case errors.Is(err, rpctypes.ErrCompacted):
			return false, nil
		case err != nil:
			return false, fmt.Errorf("control: the store's compaction point: %w", err)
		}
		return true, nil
	}
	if ok, err := readable(1); err != nil || ok {
		return head, 0, err
	}
	lo, hi := int64(1), head // lo unreadable, hi readable: the point is in (lo, hi]
	for hi-lo > 1 {
		mid := lo + (hi-lo)/2
		ok, err := readable(mid)
		if err != nil {
			return 0, 0, err
		}
		if ok {
			hi = mid
		} else {
			lo = mid
		}
	}
	return head, hi, nil
}
