package control

import (
	"context"
	"fmt"
	"strconv"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// Compact compacts the store's history to revision rev (0: the head) and
// records the point under compactKey, where status reads it. A revision at
// or below the recorded point is already compacted: Compact returns that
// point. One above the head is refused.
func Compact(ctx context.Context, cli *clientv3.Client, rev int64) (int64, error) {
	resp, err := cli.Get(ctx, compactKey)
	if err != nil {
		return 0, fmt.Errorf("control: compact: %w", err)
	}
	var done int64
	if len(resp.Kvs) > 0 {
		done, _ = strconv.ParseInt(string(resp.Kvs[0].Value), 10, 64)
	}
	head := resp.Header.Revision
	switch {
	case rev == 0:
		rev = head
	case rev > head:
		return 0, badRequest("revision %d is above the store's head %d", rev, head)
	}
	if rev <= done {
		return done, nil
	}
	// The record first: a compaction that then fails leaves a point
	// recorded above the real one, which history treats as gone anyway.
	if _, err := cli.Put(ctx, compactKey, strconv.FormatInt(rev, 10)); err != nil {
		return 0, fmt.Errorf("control: compact: %w", err)
	}
	if _, err := cli.Compact(ctx, rev, clientv3.WithCompactPhysical()); err != nil {
		return 0, fmt.Errorf("control: compact to %d: %w", rev, err)
	}
	return rev, nil
}
