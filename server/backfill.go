package server

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

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
// that resumes from a cursor older than the watch cache's window. A read
// of the namespace's revision at until says where the changes end, so
// that it returns as soon as that one is delivered (or at once when the
// namespace did not change), not at the next heartbeat's progress.
func backfill(src *etcd.Source, cli *clientv3.Client, log *slog.Logger) func(ctx context.Context, ns string, since, until int64, max int) ([]transport.ChangeSet, error) {
	return func(ctx context.Context, ns string, since, until int64, max int) (css []transport.ChangeSet, err error) {
		defer func() {
			if err != nil {
				log.Info("server: a client's cursor is older than the cache, and the store's history cannot fill the gap: it resnapshots", "ns", ns, "cursor", since, "cache_from", until, "err", err)
			}
		}()
		ctx, cancel := context.WithTimeout(ctx, backfillWait)
		defer cancel()
		resp, err := cli.Get(ctx, etcd.Prefix(ns), clientv3.WithPrefix(), clientv3.WithKeysOnly(), clientv3.WithRev(until),
			clientv3.WithSort(clientv3.SortByModRevision, clientv3.SortDescend), clientv3.WithLimit(1))
		if err != nil {
			return nil, err
		}
		var last int64 // the namespace's revision at until
		if len(resp.Kvs) > 0 {
			last = resp.Kvs[0].ModRevision
		}
		if last <= since {
			return nil, nil // nothing of it changed after the cursor
		}
		err = src.Watch(ctx, transport.WatchRequest{Namespace: ns, Since: since}, func(ev transport.Event) error {
			switch {
			case ev.Change == nil:
				return nil
			case ev.Change.Revision > until:
				return fmt.Errorf("server: backfill of %q: a change at %d, past %d, before the one at %d", ns, ev.Change.Revision, until, last)
			case len(css) == max:
				return fmt.Errorf("server: backfill of %q: more than %d change sets after %d", ns, max, since)
			}
			css = append(css, *ev.Change)
			if ev.Change.Revision >= last {
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

// confirmer reads a namespace's revision and the store's head,
// linearizably, in one keys-only read of one key; concurrent reads of one
// namespace share one request, so that a storm of snapshots of one
// namespace costs the store a few reads, not one each.
type confirmer struct {
	cli *clientv3.Client
	mu  sync.Mutex
	in  map[string]*confirmCall
}

type confirmCall struct {
	done      chan struct{}
	head, rev int64
	err       error
}

func newConfirmer(cli *clientv3.Client) *confirmer {
	return &confirmer{cli: cli, in: make(map[string]*confirmCall)}
}

func (c *confirmer) confirm(ctx context.Context, ns string) (head, rev int64, err error) {
	c.mu.Lock()
	call := c.in[ns]
	if call == nil {
		call = &confirmCall{done: make(chan struct{})}
		c.in[ns] = call
		c.mu.Unlock()
		// Detached from the first caller's end: the others wait on it.
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), backfillWait)
		call.head, call.rev, call.err = c.read(rctx, ns)
		cancel()
		c.mu.Lock()
		delete(c.in, ns)
		c.mu.Unlock()
		close(call.done)
	} else {
		c.mu.Unlock()
	}
	select {
	case <-call.done:
		return call.head, call.rev, call.err
	case <-ctx.Done():
		return 0, 0, ctx.Err()
	}
}

func (c *confirmer) read(ctx context.Context, ns string) (head, rev int64, err error) {
	resp, err := c.cli.Get(ctx, etcd.Prefix(ns), clientv3.WithPrefix(), clientv3.WithKeysOnly(),
		clientv3.WithSort(clientv3.SortByModRevision, clientv3.SortDescend), clientv3.WithLimit(1))
	if err != nil {
		return 0, 0, err
	}
	if len(resp.Kvs) > 0 {
		rev = resp.Kvs[0].ModRevision
	}
	return resp.Header.Revision, rev, nil
}
