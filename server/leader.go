package server

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"log/slog"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
)

// electionPrefix is where the servers of a store elect their leader.
const electionPrefix = "/holdfast-meta/leader"

// leaderTTL is the leader's session TTL: a leader killed is replaced
// within it.
const leaderTTL = 5

// leaderJob is work one server of a store does at a time. It runs until
// ctx ends (the server stops, or leads no more); every write it makes is
// conditional on leading.
type leaderJob func(ctx context.Context, leading clientv3.Cmp) error

// leader campaigns for the store's leadership, runs its jobs while it
// leads, and campaigns again when it loses the lease.
type leader struct {
	cli    *clientv3.Client
	log    *slog.Logger
	id     string
	jobs   []leaderJob
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu      sync.Mutex
	leading bool
}

func startLeader(cli *clientv3.Client, log *slog.Logger, jobs ...leaderJob) *leader {
	var b [8]byte
	_, _ = rand.Read(b[:])
	ctx, cancel := context.WithCancel(context.Background())
	l := &leader{cli: cli, log: log, id: hex.EncodeToString(b[:]), jobs: jobs, cancel: cancel}
	l.wg.Add(1)
	go func() { defer l.wg.Done(); l.run(ctx) }()
	return l
}

// Leading reports whether this server leads now.
func (l *leader) Leading() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.leading
}

func (l *leader) run(ctx context.Context) {
	for ctx.Err() == nil {
		if err := l.term(ctx); err != nil && ctx.Err() == nil {
			l.log.Warn("server: leader election", "err", err)
			select {
			case <-ctx.Done():
			case <-time.After(time.Second):
			}
		}
	}
}

// term campaigns once, leads until the session ends, and resigns.
func (l *leader) term(ctx context.Context) error {
	sess, err := concurrency.NewSession(l.cli, concurrency.WithTTL(leaderTTL), concurrency.WithContext(ctx))
	if err != nil {
		return err
	}
	defer sess.Close()
	el := concurrency.NewElection(sess, electionPrefix)
	if err := el.Campaign(ctx, l.id); err != nil {
		return err
	}
	leading := clientv3.Compare(clientv3.CreateRevision(el.Key()), "=", el.Rev())
	l.setLeading(true)
	l.log.Info("server: leading the store's servers", "id", l.id)
	jctx, stop := context.WithCancel(ctx)
	var jobs sync.WaitGroup
	for _, job := range l.jobs {
		jobs.Add(1)
		go func() {
			defer jobs.Done()
			for jctx.Err() == nil {
				if err := job(jctx, leading); err != nil && jctx.Err() == nil {
					l.log.Warn("server: a leader's job failed; again in a second", "err", err)
					select {
					case <-jctx.Done():
					case <-time.After(time.Second):
					}
				}
			}
		}()
	}
	select {
	case <-sess.Done():
		// The session is bound to ctx: a stop ends it too, which is no
		// loss to warn of.
		if ctx.Err() == nil {
			l.log.Warn("server: lost the lead (its session ended)")
		}
	case <-ctx.Done():
	}
	stop()
	jobs.Wait()
	l.setLeading(false)
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
	defer cancel()
	_ = el.Resign(rctx)
	return nil
}

func (l *leader) setLeading(on bool) {
	l.mu.Lock()
	l.leading = on
	l.mu.Unlock()
}

func (l *leader) close() {
	l.cancel()
	l.wg.Wait()
}
