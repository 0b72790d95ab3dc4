package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/holdfast-dev/holdfast/server/store"
	"github.com/holdfast-dev/holdfast/transport/etcd"
)

// auditCursorKey is where the leader's watch for unaudited changes is up
// to, so that the next leader resumes there.
const auditCursorKey = "/holdfast-meta/audit-cursor"

// cursorEvery bounds how often the cursor is written when nothing is
// unaudited: a write per publish would double the store's writes.
const cursorEvery = 10 * time.Second

// watchUnaudited is a leader's job: it watches every key of the store and
// records in the audit log, as kind "unaudited", each change to a
// namespace written past holdfast (etcdctl, another program): one whose
// revision carries no audit record of the namespace. History then lists
// it rather than passing it off as audited or hiding it.
func watchUnaudited(cli *clientv3.Client, log *slog.Logger) leaderJob {
	return func(ctx context.Context, leading clientv3.Cmp) error {
		resp, err := cli.Get(ctx, auditCursorKey)
		if err != nil {
			return err
		}
		from := resp.Header.Revision + 1 // a first leader starts now
		if len(resp.Kvs) > 0 {
			if n, err := strconv.ParseInt(string(resp.Kvs[0].Value), 10, 64); err == nil {
				from = n + 1
			}
		}
		wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
		defer cancel()
		saved := time.Now()
		for w := range cli.Watch(wctx, "/holdfast", clientv3.WithPrefix(), clientv3.WithRev(from)) {
			if w.CompactRevision != 0 {
				log.Warn("server: the watch for unaudited changes was compacted; changes between went unchecked", "from", from, "compacted", w.CompactRevision)
				return saveCursor(ctx, cli, leading, w.CompactRevision)
			}
			if err := w.Err(); err != nil {
				return err
			}
			last, n, err := recordUnaudited(ctx, cli, leading, w.Events)
			if err != nil {
				return err
			}
			if n > 0 {
				log.Warn("server: changes written past holdfast recorded as unaudited", "count", n, "revision", last)
			}
			if n > 0 || time.Since(saved) > cursorEvery {
				if err := saveCursor(ctx, cli, leading, last); err != nil {
					return err
				}
				saved = time.Now()
			}
		}
		return ctx.Err()
	}
}

// recordUnaudited writes the audit records of the unaudited changes among
// evs, and returns the last revision seen and how many it recorded.
func recordUnaudited(ctx context.Context, cli *clientv3.Client, leading clientv3.Cmp, evs []*clientv3.Event) (last int64, n int, err error) {
	type change struct {
		puts    map[string]json.RawMessage
		deletes []string
	}
	for i := 0; i < len(evs); {
		rev := evs[i].Kv.ModRevision
		changed := map[string]*change{}
		audited := map[string]bool{}
		for ; i < len(evs) && evs[i].Kv.ModRevision == rev; i++ {
			ev, key := evs[i], string(evs[i].Kv.Key)
			if rest, ok := strings.CutPrefix(key, store.AuditRoot); ok {
				ns, _, _ := strings.Cut(rest, "/")
				audited[ns] = true
				continue
			}
			rest, ok := strings.CutPrefix(key, etcd.KeyRoot)
			if !ok {
				continue
			}
			ns, name, _ := strings.Cut(rest, "/")
			c := changed[ns]
			if c == nil {
				c = &change{puts: map[string]json.RawMessage{}}
				changed[ns] = c
			}
			switch {
			case name == "": // the meta key
			case ev.Type == mvccpb.DELETE:
				c.deletes = append(c.deletes, name)
			default:
				c.puts[name] = json.RawMessage(ev.Kv.Value)
			}
		}
		last = rev
		for ns, c := range changed {
			if audited[ns] {
				continue
			}
			prev, err := revisionBefore(ctx, cli, ns, rev)
			if err != nil {
				return 0, 0, err
			}
			key, rec, err := store.UnauditedRecord(ns, rev, prev, c.puts, c.deletes, time.Now())
			if err != nil {
				return 0, 0, err
			}
			iop, err := store.UnauditedIndexOp(ns, rev, time.Now())
			if err != nil {
				return 0, 0, err
			}
			tr, err := cli.Txn(ctx).If(leading).Then(clientv3.OpPut(key, string(rec)), iop).Commit()
			if err != nil {
				return 0, 0, err
			}
			if !tr.Succeeded {
				return 0, 0, errNotLeading
			}
			n++
		}
	}
	return last, n, nil
}

var errNotLeading = errors.New("server: no longer leading")

// revisionBefore is namespace ns's revision before revision rev (the
// highest ModRevision of its keys at rev-1), or rev-1 when etcd has
// compacted it: an upper bound, never 0, which history reads as "the
// first change".
func revisionBefore(ctx context.Context, cli *clientv3.Client, ns string, rev int64) (int64, error) {
	resp, err := cli.Get(ctx, etcd.Prefix(ns), clientv3.WithPrefix(), clientv3.WithKeysOnly(), clientv3.WithRev(rev-1),
		clientv3.WithSort(clientv3.SortByModRevision, clientv3.SortDescend), clientv3.WithLimit(1))
	switch {
	case err != nil && strings.Contains(err.Error(), "compacted"):
		return rev - 1, nil
	case err != nil:
		return 0, err
	case len(resp.Kvs) == 0:
		return 0, nil // the namespace's first change
	}
	return resp.Kvs[0].ModRevision, nil
}

func saveCursor(ctx context.Context, cli *clientv3.Client, leading clientv3.Cmp, rev int64) error {
	tr, err := cli.Txn(ctx).If(leading).Then(clientv3.OpPut(auditCursorKey, strconv.FormatInt(rev, 10))).Commit()
	if err != nil {
		return fmt.Errorf("server: the audit cursor: %w", err)
	}
	if !tr.Succeeded {
		return errNotLeading
	}
	return nil
}
