package etcd

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc/metadata"

	"github.com/holdfast-dev/holdfast/transport"
)

var _ transport.StreamSource = (*Source)(nil)

// metaReadBatch is how many meta keys one heartbeat transaction reads:
// below etcd's default --max-txn-ops (128).
const metaReadBatch = 100

// streamState is what one WatchStream call knows.
type streamState struct {
	members map[string]*watchState // the namespaces still in the stream
	// pos: the watch has processed every event of the holdfast prefix up
	// to pos, so every member is complete up to it.
	pos int64
	// told is the cursor of the last StreamProgress.
	told int64
	id   string
}

// WatchStream carries every namespace of req over one etcd watch: a single
// clientv3 Watch of the whole KeyRoot prefix, from the smallest Since + 1,
// on a gRPC stream of its own (WithRequireLeader, as Watch). Events of a
// member namespace become its ChangeSets, one per revision and namespace,
// chained on the meta key as in Watch (a change at or below a member's
// own Since is dropped); events of any other namespace only move the
// stream's position. So a publish anywhere under KeyRoot advances the
// stream's cursor as soon as the watch delivers it: after every watch
// response that moves the position, WatchStream sends a StreamProgress at
// the last revision it held (never at the response's header revision,
// which a catching-up etcd watcher reports ahead of its events).
//
// Every heartbeat it confirms the stream current as Watch does, for every
// member at once: a linearizable transaction reads the members' meta keys
// (metaReadBatch per transaction; the next ones at the first one's
// revision), and when the watch has delivered every member's revision
// there, a StreamProgress at the head says so; a member whose change the
// store has and the watch has not delivered holds every confirmation back,
// and after the idle timeout the stream ends with transport.ErrStreamIdle
// (the caller resumes every member from its cursor). It asks etcd for no
// progress notifications (WithProgressRequests concerns Watch only): the
// etcd 3.4 before 3.4.25 this is tested on may send one ahead of an event,
// which the etcd client would then skip on resume.
//
// Trouble with one member is an Ended event for it, and the stream goes on
// with the others: an invalid name (before watching); a Since compacted
// away (a *transport.CompactedError: etcd cancels the watch from the
// smallest cursor, and the stream starts a new one from the smallest
// cursor of the members not compacted, which the etcd client may put on a
// new gRPC stream as it closes the old; a member that a heartbeat
// confirmed past the compaction revision goes on); a Since above the
// store's head by a linearizable read (transport.ErrCursorAhead, also when
// the store is restored from an older backup mid-stream); a change over
// the size limits (transport.ErrTooLarge) or with a malformed meta key
// (transport.ErrMalformed). A namespace named twice, more than
// transport.MaxStreamNamespaces, or a negative Since fail the whole request
// with an error wrapping transport.ErrBadRequest, before watching. The
// watch needs read access to KeyRoot as a prefix (see WithAuth): without
// it the whole stream fails with transport.ErrUnauthorized.
//
// It returns ctx.Err(), handle's error, transport.ErrStreamIdle,
// transport.ErrBadRequest, ErrClosed, or an etcd error (such as "no
// leader").
//
// The cost of the one watch is that every client receives every write
// under KeyRoot, of the namespaces it does not carry too (config writes are
// rare; the values of others are dropped unread). In exchange etcd keeps
// one watcher per client, and progress needs no request at all.
func (s *Source) WatchStream(ctx context.Context, req transport.StreamRequest, handle func(transport.StreamEvent) error) error {
	if n := len(req.Namespaces); n > transport.MaxStreamNamespaces {
		return fmt.Errorf("etcd: stream: %w: %d namespaces (at most %d)", transport.ErrBadRequest, n, transport.MaxStreamNamespaces)
	}
	seen := make(map[string]bool, len(req.Namespaces))
	for _, r := range req.Namespaces {
		if seen[r.Namespace] {
			return fmt.Errorf("etcd: stream: %w: namespace %q named twice", transport.ErrBadRequest, r.Namespace)
		}
		seen[r.Namespace] = true
		if r.Since < 0 {
			return fmt.Errorf("etcd: stream: %w: namespace %q from a negative cursor %d", transport.ErrBadRequest, r.Namespace, r.Since)
		}
	}
	if err := s.enter(); err != nil {
		return err
	}
	defer s.wg.Done()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	defer context.AfterFunc(s.base, cancel)()

	st := &streamState{members: make(map[string]*watchState, len(req.Namespaces))}
	for _, r := range req.Namespaces {
		if err := transport.ValidateNamespace(r.Namespace); err != nil {
			if err := handle(transport.StreamEvent{Ended: &transport.NamespaceEnded{Namespace: r.Namespace, Err: err}}); err != nil {
				return err
			}
			continue
		}
		st.members[r.Namespace] = &watchState{ns: r.Namespace, prefix: Prefix(r.Namespace), since: r.Since, cursor: r.Since}
	}
	st.pos = st.minCursor(0)
	st.told = st.pos

	wctx := metadata.AppendToOutgoingContext(clientv3.WithRequireLeader(ctx),
		"holdfast-watch", itoa(s.watchSeq.Add(1)))
	// The watch from rev + 1, on the gRPC stream wctx's metadata names
	// (etcdWatch): a watch started again after a compaction goes on the
	// same one while it is open.
	ew := s.startWatch(wctx, KeyRoot, clientv3.WithPrefix(), clientv3.WithRev(st.pos+1))
	defer func() { s.stopWatch(ew) }()

	ticker := time.NewTicker(s.opts.heartbeat)
	defer ticker.Stop()
	lastRecv := time.Now()
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-ticker.C:
			if idle := time.Since(lastRecv); idle > s.opts.idleTimeout {
				return fmt.Errorf("etcd: stream: %w: nothing for %v", transport.ErrStreamIdle, idle.Round(time.Millisecond))
			}
			for _, w := range st.members {
				if late := time.Since(w.pendingSince); w.pending != 0 && late > s.opts.idleTimeout {
					return fmt.Errorf("etcd: stream: %w: the store has revision %d of %q, the watch delivered nothing towards it for %v", transport.ErrStreamIdle, w.pending, w.ns, late.Round(time.Millisecond))
				}
			}
			if ew.ch == nil {
				continue // not created yet
			}
			ok, err := s.streamCheck(ctx, st, handle)
			if err != nil {
				return err
			}
			if ok {
				lastRecv = time.Now()
			}
		case ew.ch = <-ew.chc:
		case resp, ok := <-ew.ch:
			ew.created = true
			if !ok {
				if ctx.Err() != nil {
					return ctx.Err()
				}
				return errors.New("etcd: stream: watch channel closed")
			}
			lastRecv = time.Now()
			restart, err := s.streamResponse(ctx, st, &resp, handle)
			if err != nil {
				return err
			}
			if restart {
				s.stopWatch(ew)
				ew = s.startWatch(wctx, KeyRoot, clientv3.WithPrefix(), clientv3.WithRev(st.minCursor(st.pos)+1))
			}
		}
	}
}

// minCursor is the smallest cursor of the members, or def without any.
func (st *streamState) minCursor(def int64) int64 {
	first := true
	m := def
	for _, w := range st.members {
		if first || w.cursor < m {
			m, first = w.cursor, false
		}
	}
	return m
}

// end takes a member out of the stream.
func (st *streamState) end(ns string, err error, handle func(transport.StreamEvent) error) error {
	delete(st.members, ns)
	return handle(transport.StreamEvent{Ended: &transport.NamespaceEnded{Namespace: ns, Err: err}})
}

// namespaceOf returns the namespace of a key under KeyRoot ("" for a key
// that belongs to none).
func namespaceOf(key string) string {
	rest, ok := strings.CutPrefix(key, KeyRoot)
	if !ok {
		return ""
	}
	ns, _, ok := strings.Cut(rest, "/")
	if !ok {
		return ""
	}
	return ns
}

// streamResponse handles one etcd watch response of a stream. It reports
// whether the watch must start again (etcd cancelled it for compaction).
func (s *Source) streamResponse(ctx context.Context, st *streamState, resp *clientv3.WatchResponse, handle func(transport.StreamEvent) error) (bool, error) {
	if resp.CompactRevision != 0 || errors.Is(resp.Err(), rpctypes.ErrCompacted) {
		// Only the members whose Since etcd no longer has are compacted
		// (as their own Watch from Since + 1 would be); the others go on
		// on a new watch.
		cr := resp.CompactRevision
		for ns, w := range st.members {
			if w.cursor+1 < cr {
				err := fmt.Errorf("etcd: watch of %q from %d: %w", ns, w.cursor+1, &transport.CompactedError{CompactRevision: cr})
				if err := st.end(ns, err, handle); err != nil {
					return false, err
				}
			}
		}
		// Nothing of the store before the compaction is left to tell.
		st.pos = max(st.pos, cr-1)
		return true, nil
	}
	if err := resp.Err(); err != nil {
		return false, MapError("stream", "", err)
	}
	if resp.Canceled {
		return false, fmt.Errorf("etcd: stream: watch canceled by the server: %s", resp.Header.String())
	}
	st.id = s.storeID(ctx, &resp.Header)
	if resp.Created {
		return false, s.streamAhead(ctx, st, resp.Header.Revision, handle)
	}
	evs := resp.Events
	for i := 0; i < len(evs); {
		rev := evs[i].Kv.ModRevision
		j := i + 1
		for j < len(evs) && evs[j].Kv.ModRevision == rev {
			j++
		}
		if err := s.streamRevision(st, evs[i:j], handle); err != nil {
			return false, err
		}
		st.pos = max(st.pos, rev)
		i = j
	}
	return false, s.streamProgress(st, st.pos, handle)
}

// streamRevision delivers the ChangeSets of one revision's events, one per
// member namespace, in the order of their first key.
func (s *Source) streamRevision(st *streamState, evs []*clientv3.Event, handle func(transport.StreamEvent) error) error {
	var order []string
	byNS := make(map[string][]*clientv3.Event)
	for _, ev := range evs {
		ns := namespaceOf(string(ev.Kv.Key))
		if w := st.members[ns]; w == nil || ev.Kv.ModRevision <= w.cursor {
			continue // another namespace, or replayed below the member's cursor
		}
		if _, ok := byNS[ns]; !ok {
			order = append(order, ns)
		}
		byNS[ns] = append(byNS[ns], ev)
	}
	for _, ns := range order {
		w := st.members[ns]
		cs, err := s.changeSet(w, st.id, byNS[ns])
		if err != nil {
			// Too large, or a malformed meta key: this member cannot go on.
			if err := st.end(ns, err, handle); err != nil {
				return err
			}
			continue
		}
		if err := handle(transport.StreamEvent{Change: cs}); err != nil {
			return err
		}
		w.cursor, w.nsRev, w.known = cs.Revision, cs.Revision, true
		if w.pending != 0 {
			if cs.Revision >= w.pending {
				w.pending = 0
			} else {
				w.pendingSince = time.Now() // catching up
			}
		}
	}
	return nil
}

// streamProgress tells the stream complete up to rev, when it is news and
// no member waits for a change that a check found in the store.
func (s *Source) streamProgress(st *streamState, rev int64, handle func(transport.StreamEvent) error) error {
	return s.progressAt(st, rev, false, handle)
}

// progressAt is streamProgress; a heartbeat (again) also repeats the
// cursor last told, so that a quiet stream still hears, every heartbeat,
// that it is alive and current (as the reference server's stream does).
func (s *Source) progressAt(st *streamState, rev int64, again bool, handle func(transport.StreamEvent) error) error {
	if rev < st.told || rev == st.told && !again {
		return nil
	}
	for _, w := range st.members {
		if w.pending != 0 {
			return nil
		}
	}
	st.told, st.pos = rev, max(st.pos, rev)
	for _, w := range st.members {
		w.cursor = max(w.cursor, rev)
	}
	return handle(transport.StreamEvent{Progress: &transport.StreamProgress{StoreID: st.id, Cursor: rev}})
}

// streamAhead ends the members whose cursor is above head, after a
// linearizable read confirms that head (see checkAhead).
func (s *Source) streamAhead(ctx context.Context, st *streamState, head int64, handle func(transport.StreamEvent) error) error {
	ahead := false
	for _, w := range st.members {
		ahead = ahead || w.cursor > head
	}
	if !ahead {
		return nil
	}
	rctx, cancel := s.requestCtx(ctx)
	resp, err := s.cli.Get(rctx, KeyRoot, clientv3.WithCountOnly())
	cancel()
	if err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return MapError("stream", "", err)
	}
	return s.endAhead(st, resp.Header.Revision, handle)
}

// endAhead ends the members whose cursor is above head, a linearizable
// read's revision.
func (s *Source) endAhead(st *streamState, head int64, handle func(transport.StreamEvent) error) error {
	for ns, w := range st.members {
		if w.cursor > head {
			err := fmt.Errorf("etcd: watch of %q: %w: cursor %d, the store's head %d (restored from an older backup?)", ns, transport.ErrCursorAhead, w.cursor, head)
			if err := st.end(ns, err, handle); err != nil {
				return err
			}
		}
	}
	return nil
}

// streamCheck is a stream's heartbeat: it reads every member's meta key
// at the head and confirms the stream up to the head when the watch has
// delivered all of them (see WatchStream). It reports whether the reads
// succeeded.
func (s *Source) streamCheck(ctx context.Context, st *streamState, handle func(transport.StreamEvent) error) (bool, error) {
	names := make([]string, 0, len(st.members))
	for ns := range st.members {
		names = append(names, ns)
	}
	var head int64
	metaRevs := make(map[string]int64, len(names))
	for i := 0; i == 0 || i < len(names); i += metaReadBatch {
		batch := names[i:min(i+metaReadBatch, len(names))]
		var revOpt []clientv3.OpOption
		if head != 0 {
			revOpt = []clientv3.OpOption{clientv3.WithRev(head)}
		}
		ops := make([]clientv3.Op, 0, max(len(batch), 1))
		for _, ns := range batch {
			ops = append(ops, clientv3.OpGet(Prefix(ns), append(revOpt, clientv3.WithKeysOnly())...))
		}
		if len(ops) == 0 {
			// No member left: the head alone.
			ops = append(ops, clientv3.OpGet(KeyRoot, clientv3.WithCountOnly()))
		}
		rctx, cancel := s.requestCtx(ctx)
		resp, err := s.cli.Txn(rctx).Then(ops...).Commit()
		cancel()
		if err != nil {
			if ctx.Err() != nil {
				return false, ctx.Err()
			}
			s.log.Debug("etcd: stream progress read failed", "err", err)
			return false, nil
		}
		if head == 0 {
			head = resp.Header.Revision
			st.id = s.storeID(ctx, resp.Header)
		}
		for k, ns := range batch {
			if r := resp.Responses[k].GetResponseRange(); r != nil && len(r.Kvs) > 0 {
				metaRevs[ns] = r.Kvs[0].ModRevision
			}
		}
	}
	// A head below a member's cursor: the store's history is not the one
	// the cursor came from (the reads are linearizable).
	if err := s.endAhead(st, head, handle); err != nil {
		return true, err
	}
	if head < st.pos {
		return true, nil // restored below what the watch saw: confirm nothing
	}
	for _, w := range st.members {
		s.delivered(w, metaRevs[w.ns], "stream") // a pending member holds progressAt back
	}
	return true, s.progressAt(st, head, true, handle)
}
