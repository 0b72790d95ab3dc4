package etcd

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc/metadata"

	"github.com/holdfast-dev/holdfast/transport"
)

// watchState is what one Watch call knows about its namespace.
type watchState struct {
	ns     string
	prefix string
	since  int64
	// cursor: every change of the namespace up to it was delivered.
	cursor int64
	// nsRev is the namespace's revision as of cursor, when known: the last
	// change delivered, or a progress check's answer.
	nsRev int64
	known bool
	// pending is a namespace revision that a check found in the store but
	// the watch has not delivered (0: none); pendingSince is when it was
	// found, or when the watch last delivered a change since.
	pending      int64
	pendingSince time.Time
	// notified: a progress notification came since the last heartbeat.
	notified bool
	asked    bool
}

// Watch delivers the namespace's changes after req.Since, and progress,
// until ctx ends, handle fails, or the watch fails. It is one etcd watch of
// the namespace's prefix from revision Since+1 (WithPrefix,
// WithProgressNotify, WithRequireLeader: a member that loses its leader
// ends the watch instead of going quiet), on a gRPC stream of its own.
//
// Events of one revision become one ChangeSet (etcd never splits a
// revision across watch responses). Its PrevRevision comes from the meta
// key (a Meta) that the writer puts in the same transaction, so it chains
// exactly as over HTTP.
//
// Every heartbeat, Watch confirms the namespace current: by default with a
// linearizable read of the namespace's meta key, which gives the head
// revision and the namespace's revision there; when the watch has
// delivered that revision, the view is complete up to the head, and a
// transport.Progress says so. A read needs quorum, so a partitioned member
// confirms nothing. With WithProgressRequests it asks etcd for a progress
// notification instead (see there for the etcd versions it needs), each
// checked by a serializable read of the meta key at its revision; requests
// that go unanswered (etcd's grpc-proxy), and notifications below the
// cursor, fall back to the read.
//
// A check tells what the store holds, not how far the watch has got: a
// namespace revision that the watch has not delivered yet is a change in
// flight (a watch that the etcd client resumes after a dropped connection
// lags the reads), or one the watch skipped. Either way Watch confirms
// nothing past what it delivered and waits; if the watch delivers nothing
// for the idle timeout while the change is pending, Watch ends with
// transport.ErrStreamIdle, and the client's resume from its cursor, a new
// etcd watch that replays the store's history, delivers it.
//
// Watch never confirms past the store's head: when a linearizable read's
// header revision is below the cursor (the cluster was restored from a
// backup: same cluster id, lower revisions), it ends with
// transport.ErrCursorAhead.
//
// It returns ctx.Err(), handle's error, a *transport.CompactedError,
// transport.ErrCursorAhead, transport.ErrStreamIdle (nothing received, or
// a pending change not delivered, for the idle timeout),
// transport.ErrTooLarge, or an etcd error.
func (s *Source) Watch(ctx context.Context, req transport.WatchRequest, handle func(transport.Event) error) error {
	if err := transport.ValidateNamespace(req.Namespace); err != nil {
		return err
	}
	if err := s.enter(); err != nil {
		return err
	}
	defer s.wg.Done()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	defer context.AfterFunc(s.base, cancel)()

	// A stream of its own: progress requests then concern this watch only,
	// and the server cancels it when its member loses the leader.
	wctx := metadata.AppendToOutgoingContext(clientv3.WithRequireLeader(ctx),
		"holdfast-watch", itoa(s.watchSeq.Add(1)))
	w := &watchState{ns: req.Namespace, prefix: Prefix(req.Namespace), since: req.Since, cursor: req.Since}
	ew := s.startWatch(wctx, w.prefix, clientv3.WithPrefix(), clientv3.WithRev(req.Since+1), clientv3.WithProgressNotify())
	defer s.stopWatch(ew)

	ticker := time.NewTicker(s.opts.heartbeat)
	defer ticker.Stop()
	lastRecv := time.Now()
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-ticker.C:
			if idle := time.Since(lastRecv); idle > s.opts.idleTimeout {
				return fmt.Errorf("etcd: watch of %q: %w: nothing for %v", w.ns, transport.ErrStreamIdle, idle.Round(time.Millisecond))
			}
			if w.pending != 0 {
				if late := time.Since(w.pendingSince); late > s.opts.idleTimeout {
					return fmt.Errorf("etcd: watch of %q: %w: the store has revision %d of the namespace, the watch delivered nothing towards it for %v", w.ns, transport.ErrStreamIdle, w.pending, late.Round(time.Millisecond))
				}
			}
			if ew.ch == nil {
				continue // not created yet
			}
			if !s.opts.progressRequests || !w.notified && w.asked {
				// By default, and when the last request went unanswered:
				// confirm by a read.
				ok, err := s.readProgress(ctx, w, handle)
				if err != nil {
					return err
				}
				if ok {
					lastRecv = time.Now()
				}
			}
			if !s.opts.progressRequests {
				continue
			}
			w.notified, w.asked = false, true
			// Bounded: while the client reconnects, the request waits.
			rctx, rcancel := context.WithTimeout(wctx, s.opts.heartbeat)
			if err := s.cli.RequestProgress(rctx); err != nil && ctx.Err() == nil {
				s.log.Debug("etcd: progress request failed", "ns", w.ns, "err", err)
			}
			rcancel()
		case ew.ch = <-ew.chc:
		case resp, ok := <-ew.ch:
			ew.created = true
			if !ok {
				if ctx.Err() != nil {
					return ctx.Err()
				}
				return fmt.Errorf("etcd: watch of %q: channel closed", w.ns)
			}
			lastRecv = time.Now()
			if err := s.watchResponse(ctx, w, &resp, handle); err != nil {
				return err
			}
		}
	}
}

// watchResponse handles one etcd watch response.
func (s *Source) watchResponse(ctx context.Context, w *watchState, resp *clientv3.WatchResponse, handle func(transport.Event) error) error {
	if resp.CompactRevision != 0 {
		return fmt.Errorf("etcd: watch of %q from %d: %w", w.ns, w.since+1, &transport.CompactedError{CompactRevision: resp.CompactRevision})
	}
	if err := resp.Err(); err != nil {
		if errors.Is(err, rpctypes.ErrCompacted) {
			return &transport.CompactedError{CompactRevision: resp.CompactRevision}
		}
		return MapError("watch", w.ns, err)
	}
	if resp.Canceled {
		return fmt.Errorf("etcd: watch of %q canceled by the server: %s", w.ns, resp.Header.String())
	}
	if resp.Created {
		if w.since > resp.Header.Revision {
			return s.checkAhead(ctx, w)
		}
		return nil
	}
	id := s.storeID(ctx, &resp.Header)
	evs := resp.Events
	for i := 0; i < len(evs); {
		j := i + 1
		for j < len(evs) && evs[j].Kv.ModRevision == evs[i].Kv.ModRevision {
			j++
		}
		cs, err := s.changeSet(w, id, evs[i:j])
		if err != nil {
			return err
		}
		i = j
		if cs.Revision <= w.cursor {
			continue // replayed by a resumed etcd watch
		}
		if err := handle(transport.Event{Change: cs}); err != nil {
			return err
		}
		w.cursor, w.nsRev, w.known = cs.Revision, cs.Revision, true
		if w.pending != 0 {
			if cs.Revision >= w.pending {
				// Delivered; or skipped, and this change does not chain:
				// the client resnapshots.
				w.pending = 0
			} else {
				w.pendingSince = time.Now() // catching up
			}
		}
	}
	if resp.IsProgressNotify() {
		return s.progress(ctx, w, id, resp.Header.Revision, handle)
	}
	return nil
}

// changeSet builds the ChangeSet of one revision's events.
func (s *Source) changeSet(w *watchState, id string, evs []*clientv3.Event) (*transport.ChangeSet, error) {
	cs := &transport.ChangeSet{Namespace: w.ns, Revision: evs[0].Kv.ModRevision, StoreID: id}
	var m *Meta
	total := 0
	for _, ev := range evs {
		key := string(ev.Kv.Key)
		if key == w.prefix {
			if ev.Type == mvccpb.PUT {
				m = new(Meta)
				if err := json.Unmarshal(ev.Kv.Value, m); err != nil {
					return nil, fmt.Errorf("%w: meta key of %q at %d: %v", transport.ErrMalformed, w.ns, cs.Revision, err)
				}
			}
			continue
		}
		name := key[len(w.prefix):]
		if err := transport.ValidateKey(name); err != nil {
			s.log.Warn("etcd: skipping a key that is not a valid holdfast key", "ns", w.ns, "key", key, "err", err)
			continue
		}
		switch ev.Type {
		case mvccpb.PUT:
			if len(ev.Kv.Value) > s.opts.maxValueBytes {
				return nil, fmt.Errorf("%w: %q in namespace %q at %d holds %d bytes (limit %d)", transport.ErrTooLarge, name, w.ns, cs.Revision, len(ev.Kv.Value), s.opts.maxValueBytes)
			}
			if total += len(ev.Kv.Value); total > s.opts.maxEventBytes {
				return nil, fmt.Errorf("%w: change %d of %q exceeds %d bytes", transport.ErrTooLarge, cs.Revision, w.ns, s.opts.maxEventBytes)
			}
			if cs.Puts == nil {
				cs.Puts = make(map[string]json.RawMessage)
			}
			cs.Puts[name] = json.RawMessage(ev.Kv.Value)
		case mvccpb.DELETE:
			cs.Deletes = append(cs.Deletes, name)
		}
	}
	switch {
	case m != nil:
		cs.PrevRevision, cs.CommittedAt = m.PrevRevision, m.CommittedAt
	case w.known:
		// A write without the meta key: it chains on what this watch delivered.
		cs.PrevRevision, cs.CommittedAt = w.nsRev, time.Now()
	default:
		// Unknown: the client sees a gap and resnapshots.
		cs.CommittedAt = time.Now()
	}
	return cs, nil
}

// progress turns a progress notification at revision rev into a
// transport.Progress once a read of the meta key at rev confirms that every
// change up to rev was delivered (see Watch).
func (s *Source) progress(ctx context.Context, w *watchState, id string, rev int64, handle func(transport.Event) error) error {
	w.notified = true
	if rev < w.cursor {
		// etcd may report a revision below an event's (a known etcd bug
		// before 3.4.25 and 3.5.8: a progress notification ahead of an event),
		// and a store restored from a backup reports its own, lower, head:
		// only a linearizable read tells them apart.
		_, err := s.readProgress(ctx, w, handle)
		return err
	}
	rctx, cancel := s.requestCtx(ctx)
	resp, err := s.cli.Get(rctx, w.prefix, clientv3.WithRev(rev), clientv3.WithSerializable(), clientv3.WithKeysOnly())
	cancel()
	if err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		// A member behind rev, or unreachable: confirm nothing this time.
		s.log.Debug("etcd: progress check failed", "ns", w.ns, "revision", rev, "err", err)
		return nil
	}
	return s.confirm(w, id, rev, metaRevision(resp), handle)
}

// readProgress stands in for progress notifications that do not come (etcd's
// grpc-proxy does not answer progress requests): a linearizable read of the
// meta key gives the head revision and the namespace's revision there; when
// the watch has delivered that revision, the view is complete up to the
// head. A read needs quorum, so a partitioned member confirms nothing. A
// head below the cursor is transport.ErrCursorAhead: the read is
// linearizable, so the store's history is not the one the cursor came
// from. It reports whether the read succeeded.
func (s *Source) readProgress(ctx context.Context, w *watchState, handle func(transport.Event) error) (bool, error) {
	rctx, cancel := s.requestCtx(ctx)
	resp, err := s.cli.Get(rctx, w.prefix, clientv3.WithKeysOnly())
	cancel()
	if err != nil {
		if ctx.Err() != nil {
			return false, ctx.Err()
		}
		s.log.Debug("etcd: progress read failed", "ns", w.ns, "err", err)
		return false, nil
	}
	if head := resp.Header.Revision; head < w.cursor {
		return true, fmt.Errorf("etcd: watch of %q: %w: cursor %d, the store's head %d (restored from an older backup?)", w.ns, transport.ErrCursorAhead, w.cursor, head)
	}
	return true, s.confirm(w, s.storeID(ctx, resp.Header), resp.Header.Revision, metaRevision(resp), handle)
}

func metaRevision(resp *clientv3.GetResponse) int64 {
	if len(resp.Kvs) > 0 {
		return resp.Kvs[0].ModRevision
	}
	return 0
}

// confirm emits progress up to rev when the namespace's revision there,
// metaRev, was delivered. Otherwise the change at metaRev is pending: it
// confirms nothing, and Watch waits for the watch to deliver it (see
// Watch).
func (s *Source) confirm(w *watchState, id string, rev, metaRev int64, handle func(transport.Event) error) error {
	if !s.delivered(w, metaRev, "watch") {
		return nil
	}
	w.cursor = rev // callers check rev >= w.cursor
	return handle(transport.Event{Progress: &transport.Progress{Namespace: w.ns, StoreID: id, Revision: w.nsRev, Cursor: rev}})
}

// delivered reports whether the namespace's revision in the store,
// metaRev, was delivered (by what, "watch" or "stream", for the log): then
// nothing is pending. Otherwise the change at metaRev is pending from now
// (or since it was first found) and confirms nothing.
func (s *Source) delivered(w *watchState, metaRev int64, by string) bool {
	switch {
	case w.known && metaRev <= w.nsRev:
	case !w.known && metaRev <= w.since:
		w.nsRev, w.known = metaRev, true
	default:
		if w.pending == 0 {
			w.pendingSince = time.Now()
			s.log.Debug("etcd: the store has a change the "+by+" has not delivered yet; waiting for it", "ns", w.ns, "revision", metaRev, "delivered", w.nsRev)
		}
		w.pending = max(w.pending, metaRev)
		return false
	}
	w.pending = 0
	return true
}

// checkAhead handles a watch from a cursor beyond the head the member
// reported: after a linearizable read, a cursor still ahead means the
// cluster lost its history (restored from an older backup, or rebuilt):
// transport.ErrCursorAhead.
func (s *Source) checkAhead(ctx context.Context, w *watchState) error {
	rctx, cancel := s.requestCtx(ctx)
	defer cancel()
	resp, err := s.cli.Get(rctx, w.prefix, clientv3.WithCountOnly())
	if err != nil {
		return MapError("watch", w.ns, err)
	}
	if w.since > resp.Header.Revision {
		return fmt.Errorf("etcd: watch of %q: %w: cursor %d, the store's head %d (restored from an older backup?)", w.ns, transport.ErrCursorAhead, w.since, resp.Header.Revision)
	}
	return nil
}
