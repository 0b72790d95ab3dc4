package store

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/holdfast-dev/holdfast/controlapi"
	"github.com/holdfast-dev/holdfast/internal/rollout"
	"github.com/holdfast-dev/holdfast/transport"
	"github.com/holdfast-dev/holdfast/transport/etcd"
)

// reserved reports whether key is reserved to holdfast ("$holdfast/…",
// such as a staged rollout): such keys never show in ValuesAt, Diff or
// History, and a rollback leaves them as they are.
func reserved(key string) bool { return rollout.Reserved(key) }

// Bounds of History's limit.
const (
	DefaultHistoryLimit = 100
	MaxHistoryLimit     = 1000
)

// HistoryOptions selects the records History returns.
type HistoryOptions struct {
	// Limit bounds how many records: 0 means DefaultHistoryLimit, more
	// than MaxHistoryLimit means MaxHistoryLimit; negative is
	// ErrInvalidArgument.
	Limit int
	// Before, when positive, keeps the records of revisions below it (to
	// page: the last record's Revision). 0 means from the newest; negative
	// is ErrInvalidArgument.
	Before int64
}

// History is a namespace's change records, newest first. It has the JSON
// form of the reference server's GET /control/namespaces/{ns}/history.
type History = controlapi.History

// HistoryRecord is one change of a namespace: one revision of its meta key.
type HistoryRecord = controlapi.AuditRecord

// NamespaceValues is a namespace's content at one of its revisions. It has
// the JSON form of the reference server's GET
// /control/namespaces/{ns}/values.
type NamespaceValues = controlapi.NamespaceValues

// Diff is the semantic difference between two revisions of a namespace,
// with the JSON form of the reference server's GET
// /control/namespaces/{ns}/diff.
type Diff = controlapi.Diff

// Change is one key that differs: Old is its value at the first revision,
// New at the second; either is nil (and left out of the JSON) when the key
// was absent there.
type Change = controlapi.KeyChange

// History returns the namespace's change records, newest first, one per
// revision of its meta key, following each record's PrevRevision back:
// its publishes, rollbacks and unaudited changes, with their actor,
// reason and keys. It reads the audit log, which etcd's compaction does
// not touch: the history reaches back to the log's base (where TrimAudit
// folded older records; Truncated says so). Changes from before the log
// existed are read from etcd's revisions of the meta key, down to etcd's
// compaction point (Truncated there too); a Before below what either
// holds gives a *transport.CompactedError. A namespace never published
// gives transport.ErrNotFound; bad options, ErrInvalidArgument.
func (s *Namespaces) History(ctx context.Context, ns string, opts HistoryOptions) (*History, error) {
	if err := validNamespace(ns); err != nil {
		return nil, err
	}
	limit := opts.Limit
	switch {
	case limit < 0:
		return nil, fmt.Errorf("etcd: history of %q: %w: limit %d is negative", ns, ErrInvalidArgument, limit)
	case limit == 0:
		limit = DefaultHistoryLimit
	case limit > MaxHistoryLimit:
		limit = MaxHistoryLimit
	}
	if opts.Before < 0 {
		return nil, fmt.Errorf("etcd: history of %q: %w: before %d is negative", ns, ErrInvalidArgument, opts.Before)
	}
	if err := s.enter(); err != nil {
		return nil, err
	}
	defer s.calls.Done()
	h := &History{Namespace: ns, Revisions: []HistoryRecord{}}
	recs, err := s.auditBefore(ctx, ns, opts.Before, limit)
	if err != nil {
		return nil, err
	}
	for _, r := range recs {
		h.Revisions = append(h.Revisions, r.historyRecord())
	}
	if len(h.Revisions) == limit {
		return h, nil
	}
	before := opts.Before
	if len(recs) > 0 {
		oldest := recs[len(recs)-1]
		if oldest.PrevRevision == 0 {
			return h, nil // the namespace's first change: the whole history
		}
		before = oldest.rev
	} else if before > 0 {
		// Nothing below before: past the namespace's first change (an
		// empty page), unless the log begins later.
		p := auditPrefix(ns)
		first, err := s.auditPage(ctx, ns, p, clientv3.GetPrefixRangeEnd(p), 1, false, 0)
		if err != nil {
			return nil, err
		}
		if len(first) > 0 && first[0].PrevRevision == 0 && first[0].rev >= before {
			return h, nil
		}
	}
	if _, _, trimmed, err := s.auditBase(ctx, ns); err != nil {
		return nil, err
	} else if trimmed {
		h.Truncated = true // older records were folded into the base
		return h, nil
	}
	// Older than the log (records from before it existed): etcd's
	// revisions of the meta key, until its compaction point.
	err = s.walk(ctx, ns, before, func(rev int64, m *meta) (bool, error) {
		r, err := s.record(ctx, ns, rev, m)
		if err != nil {
			return false, err
		}
		h.Revisions = append(h.Revisions, r)
		return len(h.Revisions) < limit, nil
	})
	switch {
	case errors.Is(err, transport.ErrCompacted) && len(h.Revisions) > 0:
		h.Truncated, err = true, nil // what etcd still keeps
	case errors.Is(err, transport.ErrNotFound) && len(recs) > 0:
		err = nil
	}
	if err != nil {
		return nil, err
	}
	return h, nil
}

// historyRecord is the HistoryRecord of an audit record.
func (r auditRecord) historyRecord() HistoryRecord {
	return HistoryRecord{
		Revision: r.rev, PrevRevision: r.PrevRevision, CommittedAt: r.CommittedAt,
		Actor: r.Actor, OnBehalfOf: r.OnBehalfOf, Reason: r.Reason, Kind: r.Kind, RollbackOf: r.RollbackOf, Change: r.Change,
		Puts: visible(r.Puts), Deletes: visible(r.Deletes),
	}
}

// ValuesAt returns the namespace's content at revision rev: at its last
// change at or before rev. It reads etcd's revisions, and below etcd's
// compaction point replays the audit log (its base and the records after
// it). A rev below 1 gives ErrInvalidArgument; one beyond the cluster's
// head, or at which the namespace had no key, transport.ErrNotFound; one
// that neither etcd nor the log holds (below the log's base, or before
// the log existed, and compacted), a *transport.CompactedError, unless
// the namespace did not change between rev and the compaction point:
// then its content is still known.
func (s *Namespaces) ValuesAt(ctx context.Context, ns string, rev int64) (*NamespaceValues, error) {
	if err := validNamespace(ns); err != nil {
		return nil, err
	}
	if rev <= 0 {
		return nil, fmt.Errorf("etcd: values of %q: %w: revision %d", ns, ErrInvalidArgument, rev)
	}
	if err := s.enter(); err != nil {
		return nil, err
	}
	defer s.calls.Done()
	return s.valuesAt(ctx, "values", ns, rev)
}

// ValuesAtTime returns the namespace's content as it was at time at: at
// its last change committed at or before at (by the commit times of the
// audit records, newest first, then of etcd's revisions of the meta key
// for changes older than the log). A zero at gives ErrInvalidArgument; a
// time before the namespace's first revision, transport.ErrNotFound; a
// time whose change neither the log nor etcd holds, a
// *transport.CompactedError. It reads one record per change newer than
// at.
func (s *Namespaces) ValuesAtTime(ctx context.Context, ns string, at time.Time) (*NamespaceValues, error) {
	if err := validNamespace(ns); err != nil {
		return nil, err
	}
	if at.IsZero() {
		return nil, fmt.Errorf("etcd: values of %q: %w: zero time", ns, ErrInvalidArgument)
	}
	if err := s.enter(); err != nil {
		return nil, err
	}
	defer s.calls.Done()
	found, complete, err := s.auditAt(ctx, ns, at)
	switch {
	case err != nil:
		return nil, err
	case found > 0:
		return s.valuesAt(ctx, "values", ns, found)
	case complete:
		return nil, &NotFoundError{Namespace: ns, What: "no revision committed at or before " + at.Format(time.RFC3339Nano)}
	}
	err = s.walk(ctx, ns, 0, func(rev int64, m *meta) (bool, error) {
		if !m.CommittedAt.After(at) {
			found = rev
			return false, nil
		}
		return true, nil
	})
	if err != nil {
		return nil, err
	}
	if found == 0 {
		return nil, &NotFoundError{Namespace: ns, What: "no revision committed at or before " + at.Format(time.RFC3339Nano)}
	}
	return s.valuesAt(ctx, "values", ns, found)
}

// Diff returns the keys whose values differ between the namespace's
// content at revision from and at revision to (each as ValuesAt reads it,
// with its errors), sorted by key. Values compare as JSON text with
// insignificant space removed.
func (s *Namespaces) Diff(ctx context.Context, ns string, from, to int64) (*Diff, error) {
	if err := validNamespace(ns); err != nil {
		return nil, err
	}
	if from <= 0 || to <= 0 {
		return nil, fmt.Errorf("etcd: diff of %q: %w: revisions %d and %d", ns, ErrInvalidArgument, from, to)
	}
	if err := s.enter(); err != nil {
		return nil, err
	}
	defer s.calls.Done()
	a, err := s.valuesAt(ctx, "diff", ns, from)
	if err != nil {
		return nil, err
	}
	b, err := s.valuesAt(ctx, "diff", ns, to)
	if err != nil {
		return nil, err
	}
	d := &Diff{Namespace: ns, From: a.Revision, To: b.Revision, Changes: []Change{}}
	for k, old := range a.Values {
		if cur, ok := b.Values[k]; !ok || !sameJSON(old, cur) {
			d.Changes = append(d.Changes, Change{Key: k, Old: old, New: cur})
		}
	}
	for k, cur := range b.Values {
		if _, ok := a.Values[k]; !ok {
			d.Changes = append(d.Changes, Change{Key: k, New: cur})
		}
	}
	slices.SortFunc(d.Changes, func(x, y Change) int { return strings.Compare(x.Key, y.Key) })
	return d, nil
}

func validNamespace(ns string) error {
	if err := transport.ValidateNamespace(ns); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalidArgument, err)
	}
	return nil
}

// valuesAt reads the namespace's content at rev, reserved keys left out:
// from etcd's revisions, or past etcd's compaction point from the audit
// log.
func (s *Namespaces) valuesAt(ctx context.Context, op, ns string, rev int64) (*NamespaceValues, error) {
	v, err := s.etcdValuesAt(ctx, op, ns, rev)
	if !errors.Is(err, transport.ErrCompacted) {
		return v, err
	}
	rv, ok, rerr := s.replay(ctx, ns, rev)
	switch {
	case rerr != nil:
		return nil, rerr
	case !ok:
		return nil, err
	}
	for k := range rv.Values {
		if reserved(k) {
			delete(rv.Values, k)
		}
	}
	return rv, nil
}

// etcdValuesAt reads the namespace's content at rev from etcd's
// revisions, reserved keys left out.
func (s *Namespaces) etcdValuesAt(ctx context.Context, op, ns string, rev int64) (*NamespaceValues, error) {
	prefix := etcd.Prefix(ns)
	kvs, err := s.rangeAt(ctx, op, ns, prefix, rev, true)
	if err != nil {
		return nil, err
	}
	if len(kvs) == 0 {
		return nil, &NotFoundError{Namespace: ns, What: fmt.Sprintf("no content at revision %d (not published yet then, or never)", rev)}
	}
	values, nsRev, err := s.visibleContent(ns, prefix, kvs)
	if err != nil {
		return nil, err
	}
	v := &NamespaceValues{Namespace: ns, Revision: nsRev, Values: values}
	for _, kv := range kvs {
		if string(kv.Key) == prefix && kv.ModRevision == nsRev {
			var m meta
			if err := json.Unmarshal(kv.Value, &m); err != nil {
				return nil, fmt.Errorf("%w: meta key of %q at %d: %v", transport.ErrMalformed, ns, nsRev, err)
			}
			v.CommittedAt = m.CommittedAt
		}
	}
	return v, nil
}

// walk calls fn with the namespace's meta records newest first, from the
// last one below before (0: from the newest), following PrevRevision, until
// fn says stop, the first record, or etcd's compaction point (a
// *transport.CompactedError).
func (s *Namespaces) walk(ctx context.Context, ns string, before int64, fn func(rev int64, m *meta) (more bool, err error)) error {
	key := etcd.Prefix(ns)
	kvs, err := s.rangeAt(ctx, "history", ns, key, 0, false)
	if err != nil {
		return err
	}
	if len(kvs) == 0 {
		return &NotFoundError{Namespace: ns} // never published
	}
	if before > 0 && before <= kvs[0].ModRevision {
		if before == 1 {
			return nil
		}
		if kvs, err = s.rangeAt(ctx, "history", ns, key, before-1, false); err != nil {
			return err
		}
	}
	for len(kvs) > 0 {
		kv := kvs[0]
		var m meta
		if err := json.Unmarshal(kv.Value, &m); err != nil {
			return fmt.Errorf("%w: meta key of %q at %d: %v", transport.ErrMalformed, ns, kv.ModRevision, err)
		}
		if more, err := fn(kv.ModRevision, &m); err != nil || !more {
			return err
		}
		// PrevRevision is the revision of the previous meta record unless
		// a key was written past Publish in between: then the read at it
		// finds the record before, as it should.
		next := min(m.PrevRevision, kv.ModRevision-1)
		if next <= 0 {
			return nil
		}
		if kvs, err = s.rangeAt(ctx, "history", ns, key, next, false); err != nil {
			return err
		}
	}
	return nil // the meta key did not exist then: deleted past Publish
}

// record turns a meta record into a HistoryRecord. A record of a version
// without the audit (no kind) gets its keys from etcd's revisions: those
// of the namespace changed at rev, and those gone since rev-1.
func (s *Namespaces) record(ctx context.Context, ns string, rev int64, m *meta) (HistoryRecord, error) {
	r := HistoryRecord{
		Revision: rev, PrevRevision: m.PrevRevision, CommittedAt: m.CommittedAt,
		Actor: m.Actor, OnBehalfOf: m.OnBehalfOf, Reason: m.Reason, Kind: m.Kind, RollbackOf: m.RollbackOf, Change: m.Change,
		Puts: visible(m.Puts), Deletes: visible(m.Deletes),
	}
	if m.Kind != "" {
		return r, nil
	}
	r.Kind = KindPublish
	prefix := etcd.Prefix(ns)
	keysAt := func(at int64) (map[string]int64, error) {
		rctx, cancel := s.requestCtx(ctx)
		defer cancel()
		resp, err := s.cli.Get(rctx, prefix, clientv3.WithPrefix(), clientv3.WithKeysOnly(), clientv3.WithRev(at))
		if err != nil {
			return nil, err
		}
		keys := make(map[string]int64, len(resp.Kvs))
		for _, kv := range resp.Kvs {
			if k := string(kv.Key); k != prefix {
				keys[k[len(prefix):]] = kv.ModRevision
			}
		}
		return keys, nil
	}
	now, err := keysAt(rev)
	if errors.Is(err, rpctypes.ErrCompacted) {
		return r, nil // the keys are compacted away: unknown
	}
	if err != nil {
		return r, etcd.MapError("history", ns, err)
	}
	var puts, deletes []string
	for k, mod := range now {
		if mod == rev {
			puts = append(puts, k)
		}
	}
	if rev > 1 {
		before, err := keysAt(rev - 1)
		switch {
		case errors.Is(err, rpctypes.ErrCompacted):
		case err != nil:
			return r, etcd.MapError("history", ns, err)
		}
		for k := range before {
			if _, ok := now[k]; !ok {
				deletes = append(deletes, k)
			}
		}
	}
	slices.Sort(puts)
	slices.Sort(deletes)
	r.Puts, r.Deletes = visible(puts), visible(deletes)
	return r, nil
}

// rangeAt reads key, or the range it prefixes, at revision rev (0: now).
// Below etcd's compaction point it reads at the compaction point instead,
// which holds the same content when nothing of the range changed between
// rev and it; otherwise it gives a *transport.CompactedError. Beyond the
// cluster's head it gives transport.ErrNotFound.
func (s *Namespaces) rangeAt(ctx context.Context, op, ns, key string, rev int64, prefix bool) ([]*mvccpb.KeyValue, error) {
	get := func(at int64) (*clientv3.GetResponse, error) {
		rctx, cancel := s.requestCtx(ctx)
		defer cancel()
		var opts []clientv3.OpOption
		if prefix {
			opts = append(opts, clientv3.WithPrefix())
		}
		if at > 0 {
			opts = append(opts, clientv3.WithRev(at))
		}
		return s.cli.Get(rctx, key, opts...)
	}
	resp, err := get(rev)
	switch {
	case errors.Is(err, rpctypes.ErrCompacted):
		c := s.compactRevision(ctx, ns)
		if c > rev {
			if resp, err := get(c); err == nil && maxModRevision(resp.Kvs) <= rev {
				return resp.Kvs, nil
			}
		}
		return nil, fmt.Errorf("etcd: %s of %q at %d: %w", op, ns, rev, &transport.CompactedError{CompactRevision: c})
	case errors.Is(err, rpctypes.ErrFutureRev):
		return nil, &NotFoundError{Namespace: ns, What: fmt.Sprintf("revision %d is above the store's head", rev)}
	case err != nil:
		return nil, etcd.MapError(op, ns, err)
	}
	return resp.Kvs, nil
}

func maxModRevision(kvs []*mvccpb.KeyValue) int64 {
	var m int64
	for _, kv := range kvs {
		m = max(m, kv.ModRevision)
	}
	return m
}

// visible returns keys without those reserved to holdfast, never nil.
func visible(keys []string) []string {
	out := make([]string, 0, len(keys))
	for _, k := range keys {
		if !reserved(k) {
			out = append(out, k)
		}
	}
	return out
}

// sameJSON reports whether a and b are the same JSON text but for
// insignificant space.
func sameJSON(a, b json.RawMessage) bool {
	if bytes.Equal(a, b) {
		return true
	}
	var ca, cb bytes.Buffer
	if json.Compact(&ca, a) != nil || json.Compact(&cb, b) != nil {
		return false
	}
	return bytes.Equal(ca.Bytes(), cb.Bytes())
}
