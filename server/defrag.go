package server

import (
	"context"
	"log/slog"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// Defragmentation defaults: etcd keeps its file at its largest size until
// a member is defragmented, so once trimming and compaction have freed
// this much of it (and at least half), the leader defragments it.
const (
	DefaultDefragInterval = 10 * time.Minute
	DefaultDefragMinFree  = 64 << 20
)

// defragment is a leader's job: every interval it asks each member of the
// store how much of its file is free, and defragments a member, one at a
// time, once at least minFree bytes and half its file are. A member
// blocks its reads and writes while it defragments: one member at a time
// leaves a cluster's others serving.
func defragment(cli *clientv3.Client, log *slog.Logger, interval time.Duration, minFree int64) leaderJob {
	return func(ctx context.Context, _ clientv3.Cmp) error {
		t := time.NewTicker(interval)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return nil
			case <-t.C:
			}
			for _, ep := range cli.Endpoints() {
				if err := defragmentMember(ctx, cli, log, ep, minFree); err != nil && ctx.Err() == nil {
					log.Warn("server: defragmenting the store failed", "member", ep, "err", err)
				}
			}
		}
	}
}

func defragmentMember(ctx context.Context, cli *clientv3.Client, log *slog.Logger, ep string, minFree int64) error {
	sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	st, err := cli.Status(sctx, ep)
	cancel()
	if err != nil {
		return err
	}
	free := st.DbSize - st.DbSizeInUse
	log.Debug("server: a store member's file", "member", ep, "size", st.DbSize, "in_use", st.DbSizeInUse)
	if free < minFree || free < st.DbSize/2 {
		return nil
	}
	dctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	started := time.Now()
	if _, err := cli.Defragment(dctx, ep); err != nil {
		return err
	}
	log.Info("server: defragmented the store", "member", ep, "size_before", st.DbSize, "in_use", st.DbSizeInUse,
		"took", time.Since(started).Round(time.Millisecond))
	return nil
}
