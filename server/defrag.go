package server

import (
	"context"
	"log/slog"
	"sync/atomic"
	"time"

	"go.etcd.io/etcd/api/v3/etcdserverpb"
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

// The store's NOSPACE alarm: etcd raises it when a write would take its
// file past its quota (--quota-backend-bytes), and from then on refuses
// every write (a publish gets 507) until the alarm is disarmed, whatever
// compaction and defragmentation free. Every server checks the alarm
// every noSpaceInterval (a leader could not be elected while it holds:
// campaigning writes); while it holds, a server defragments each alarmed
// member (at once when its file shows free pages, else at most every
// noSpaceRetry, and at once after a compaction through the API: what a
// compaction frees shows in the file's figures only after a while) and
// disarms the alarm once the file is back under noSpaceHeadroom of the
// quota (etcd 3.6 and later say their quota), or, when the member does
// not say its quota, once a defragmentation shrank the file by a tenth:
// a write past the quota raises it again. Otherwise it says what to run.
const (
	DefaultNoSpaceInterval = 5 * time.Second
	noSpaceRetry           = time.Minute
	noSpaceWarnEvery       = time.Minute
)

// noSpaceHeadroom is the share of the quota (in percent) below which a
// defragmented file has the alarm disarmed.
const noSpaceHeadroom = 90

// noSpaceAdvice is what an operator runs when the server cannot free
// space by itself.
const noSpaceAdvice = "free space by compacting the store's history (POST /control/compact, or the cluster's --auto-compaction-retention): " +
	"the servers then defragment and disarm the alarm; or raise etcd's --quota-backend-bytes, restart its members " +
	"and run 'etcdctl alarm disarm'"

// noSpaceWatch is one server's watch of the NOSPACE alarm: a goroutine,
// stopped by stop.
type noSpaceWatch struct {
	cli      *clientv3.Client
	log      *slog.Logger
	interval time.Duration
	cancel   context.CancelFunc
	done     chan struct{}
	// compactedAt is when a compaction through the API last ended (unix
	// nanoseconds); wake (cap 1) has run look at once.
	compactedAt atomic.Int64
	wake        chan struct{}
	// run's alone:
	lastDefrag map[uint64]time.Time // by member id
	lastWarn   time.Time
}

func startNoSpaceWatch(cli *clientv3.Client, log *slog.Logger, interval time.Duration) *noSpaceWatch {
	ctx, cancel := context.WithCancel(context.Background())
	w := &noSpaceWatch{cli: cli, log: log, interval: interval, cancel: cancel, done: make(chan struct{}), wake: make(chan struct{}, 1),
		lastDefrag: make(map[uint64]time.Time)}
	go func() { defer close(w.done); w.run(ctx) }()
	return w
}

// compacted notes a compaction: an alarmed member is defragmented at
// once, whatever its file says is free (what a compaction frees shows
// there only after a while; a defragmentation copies what is live).
func (w *noSpaceWatch) compacted() {
	w.compactedAt.Store(time.Now().UnixNano())
	select {
	case w.wake <- struct{}{}:
	default:
	}
}

func (w *noSpaceWatch) stop() {
	w.cancel()
	<-w.done
}

func (w *noSpaceWatch) run(ctx context.Context) {
	t := time.NewTicker(w.interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-w.wake:
		}
		w.check(ctx)
	}
}

// check looks for the alarm and handles each member it holds on.
func (w *noSpaceWatch) check(ctx context.Context) {
	actx, cancel := context.WithTimeout(ctx, 10*time.Second)
	resp, err := w.cli.AlarmList(actx)
	cancel()
	if err != nil {
		w.log.Debug("server: listing the store's alarms failed", "err", err)
		return
	}
	alarmed := make(map[uint64]bool)
	for _, a := range resp.Alarms {
		if a.Alarm == etcdserverpb.AlarmType_NOSPACE {
			alarmed[a.MemberID] = true
		}
	}
	if len(alarmed) == 0 {
		clear(w.lastDefrag)
		return
	}
	for _, ep := range w.cli.Endpoints() {
		if ctx.Err() != nil {
			return
		}
		if err := w.member(ctx, ep, alarmed); err != nil && ctx.Err() == nil {
			w.log.Warn("server: handling the store's NOSPACE alarm failed", "member", ep, "err", err)
		}
	}
}

// member defragments the member at ep if the alarm holds on it, and
// disarms the alarm once its file is small enough again.
func (w *noSpaceWatch) member(ctx context.Context, ep string, alarmed map[uint64]bool) error {
	sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	st, err := w.cli.Status(sctx, ep)
	cancel()
	if err != nil {
		return err
	}
	id := st.Header.GetMemberId()
	if !alarmed[id] {
		return nil
	}
	before := st
	free := st.DbSize - st.DbSizeInUse
	last, tried := w.lastDefrag[id]
	compacted := tried && w.compactedAt.Load() > last.UnixNano()
	if free >= st.DbSize/20 || compacted || !tried || time.Since(last) >= noSpaceRetry {
		w.lastDefrag[id] = time.Now()
		dctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
		_, err := w.cli.Defragment(dctx, ep)
		cancel()
		if err != nil {
			return err
		}
		sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		st, err = w.cli.Status(sctx, ep)
		cancel()
		if err != nil {
			return err
		}
		quota := st.DbSizeQuota
		if quota > 0 && st.DbSize < quota/100*noSpaceHeadroom || quota == 0 && st.DbSize <= before.DbSize-before.DbSize/10 {
			actx, cancel := context.WithTimeout(ctx, 10*time.Second)
			_, err := w.cli.AlarmDisarm(actx, &clientv3.AlarmMember{MemberID: id, Alarm: etcdserverpb.AlarmType_NOSPACE})
			cancel()
			if err != nil {
				return err
			}
			delete(w.lastDefrag, id)
			w.log.Warn("server: the store's NOSPACE alarm disarmed: defragmenting freed space, writes are taken again",
				"member", ep, "size_before", before.DbSize, "size", st.DbSize, "quota", quota)
			return nil
		}
	}
	if time.Since(w.lastWarn) >= noSpaceWarnEvery {
		w.lastWarn = time.Now()
		w.log.Error("server: the store is out of space (etcd's NOSPACE alarm): every write is refused (507), reads are served; "+noSpaceAdvice,
			"member", ep, "size", st.DbSize, "in_use", st.DbSizeInUse, "quota", st.DbSizeQuota)
	}
	return nil
}
