package store

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/holdfast-dev/holdfast/transport"
	"github.com/holdfast-dev/holdfast/transport/etcd"
)

// The audit log: every Publish and Rollback writes, in its transaction,
// a record of the change (its meta record and the values it put) under
// AuditRoot, which etcd's compaction does not touch, so that History,
// ValuesAt, ValuesAtTime and Diff answer for every revision the log
// keeps, not only for those etcd's history still holds. TrimAudit keeps
// the log bounded: it folds the oldest records into the namespace's base
// (its content at the last record folded) under AuditBaseRoot.
const (
	AuditRoot     = "/holdfast-audit/"
	AuditBaseRoot = "/holdfast-audit-base/"
)

// auditPrefix is the prefix of namespace ns's records. A record's key
// ends with the revision its publish read the namespace at (16 hex
// digits): unique and increasing, since a publish commits only if nothing
// of the namespace changed since that read; the record's own revision is
// its key's CreateRevision.
func auditPrefix(ns string) string { return AuditRoot + ns + "/" }

func auditKey(ns string, readAt int64) string { return fmt.Sprintf("%s%016x", auditPrefix(ns), readAt) }

// auditEntry is a record of the log: the meta record and the values put.
// Revision is set in the records of unaudited changes alone, written after
// their change: a publish's record shares its change's revision, its key's
// CreateRevision.
type auditEntry struct {
	meta
	Values   map[string]json.RawMessage `json:"values,omitempty"`
	Revision int64                      `json:"revision,omitempty"`
}

// encodeAudit encodes a record as its values were written: without
// encoding/json's HTML escaping, which would store "<" as "\u003c" and
// make a value read back from the log differ from the key's.
func encodeAudit(e auditEntry) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(e); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n")), nil
}

// auditRecord is a record with its key and revision.
type auditRecord struct {
	key  string
	rev  int64
	size int64 // of its key and value in the store
	auditEntry
}

// auditBase is a namespace's content at the last record TrimAudit folded.
// Unknown: the log began after the namespace did and etcd has compacted
// what came before, so the content there cannot be told; the base still
// bounds the log (history is truncated there), and values at or before it
// are compacted.
type auditBase struct {
	Revision    int64                      `json:"revision"`
	CommittedAt time.Time                  `json:"committed_at"`
	Values      map[string]json.RawMessage `json:"values"`
	Unknown     bool                       `json:"unknown,omitempty"`
}

func decodeAudit(ns string, kv *mvccpb.KeyValue) (auditRecord, error) {
	r := auditRecord{key: string(kv.Key), rev: kv.CreateRevision, size: int64(len(kv.Key) + len(kv.Value))}
	if err := json.Unmarshal(kv.Value, &r.auditEntry); err != nil {
		return r, fmt.Errorf("%w: audit record %s of %q: %v", transport.ErrMalformed, kv.Key, ns, err)
	}
	if r.Revision != 0 {
		r.rev = r.Revision
	}
	return r, nil
}

// auditPage reads up to limit records of ns whose keys are in [from, to),
// newest first when desc, at store revision rev (0: now).
func (s *Namespaces) auditPage(ctx context.Context, ns, from, to string, limit int64, desc bool, rev int64) ([]auditRecord, error) {
	order := clientv3.SortAscend
	if desc {
		order = clientv3.SortDescend
	}
	rctx, cancel := s.requestCtx(ctx)
	defer cancel()
	opts := []clientv3.OpOption{clientv3.WithRange(to), clientv3.WithSort(clientv3.SortByKey, order), clientv3.WithLimit(limit)}
	if rev > 0 {
		opts = append(opts, clientv3.WithRev(rev))
	}
	resp, err := s.cli.Get(rctx, from, opts...)
	if err != nil {
		return nil, etcd.MapError("audit", ns, err)
	}
	out := make([]auditRecord, 0, len(resp.Kvs))
	for _, kv := range resp.Kvs {
		r, err := decodeAudit(ns, kv)
		if err != nil {
			return nil, err
		}
		out = append(out, r)
	}
	return out, nil
}

// auditBefore reads up to limit records of ns of revisions below before
// (0: from the newest), newest first.
func (s *Namespaces) auditBefore(ctx context.Context, ns string, before int64, limit int) ([]auditRecord, error) {
	p := auditPrefix(ns)
	to := clientv3.GetPrefixRangeEnd(p)
	if before > 0 {
		// A record's key is below its revision: a record of a revision
		// at or above before has a key below before only if its publish
		// read the namespace below before, which one record at most did.
		to = auditKey(ns, before)
	}
	recs, err := s.auditPage(ctx, ns, p, to, int64(limit)+1, true, 0)
	if err != nil {
		return nil, err
	}
	out := recs[:0]
	for _, r := range recs {
		if before == 0 || r.rev < before {
			out = append(out, r)
		}
	}
	return out[:min(len(out), limit)], nil
}

// auditBase reads ns's audit base (ok false: none), its key's
// ModRevision, and the store revision of the read (at: the records read
// at it match the base).
func (s *Namespaces) auditBase(ctx context.Context, ns string) (b auditBase, modRev int64, ok bool, err error) {
	b, modRev, ok, _, err = s.auditBaseAt(ctx, ns)
	return b, modRev, ok, err
}

func (s *Namespaces) auditBaseAt(ctx context.Context, ns string) (b auditBase, modRev int64, ok bool, at int64, err error) {
	rctx, cancel := s.requestCtx(ctx)
	defer cancel()
	resp, err := s.cli.Get(rctx, AuditBaseRoot+ns)
	if err != nil {
		return b, 0, false, 0, etcd.MapError("audit", ns, err)
	}
	if len(resp.Kvs) == 0 {
		return b, 0, false, resp.Header.Revision, nil
	}
	if err := json.Unmarshal(resp.Kvs[0].Value, &b); err != nil {
		return b, 0, false, 0, fmt.Errorf("%w: audit base of %q: %v", transport.ErrMalformed, ns, err)
	}
	return b, resp.Kvs[0].ModRevision, true, resp.Header.Revision, nil
}

// replay reads ns's content at revision rev from the audit log: its base
// and the records after it up to rev, all read at one store revision (a
// trim between would fold records the replay then misses). ok is false
// when the log cannot tell: no record at or before rev and no base that
// starts it, or a break in the records' chain (a change the log does not
// hold).
func (s *Namespaces) replay(ctx context.Context, ns string, rev int64) (v *NamespaceValues, ok bool, err error) {
	b, _, hasBase, at, err := s.auditBaseAt(ctx, ns)
	if err != nil {
		return nil, false, err
	}
	v = &NamespaceValues{Namespace: ns, Values: map[string]json.RawMessage{}}
	known := false
	if hasBase && b.Unknown {
		return nil, false, nil // the content at the base cannot be told, nor after it
	}
	if hasBase && b.Revision <= rev {
		v.Revision, v.CommittedAt, v.Values, known = b.Revision, b.CommittedAt, maps.Clone(b.Values), true
	}
	p := auditPrefix(ns)
	from, to := p, clientv3.GetPrefixRangeEnd(p)
	var pages auditPager
	for {
		limit := pages.limit(1000)
		recs, err := s.auditPage(ctx, ns, from, to, limit, false, at)
		if err != nil {
			return nil, false, err
		}
		pages.weigh(recs)
		for _, r := range recs {
			if r.rev > rev {
				return v, known, nil
			}
			if hasBase && r.rev <= b.Revision {
				continue
			}
			if !known && r.PrevRevision != 0 || known && r.PrevRevision != v.Revision {
				return nil, false, nil // the log starts after the namespace did, or misses a change
			}
			known = true
			for k, val := range r.Values {
				v.Values[k] = val
			}
			for _, k := range r.Deletes {
				delete(v.Values, k)
			}
			v.Revision, v.CommittedAt = r.rev, r.CommittedAt
		}
		if int64(len(recs)) < limit {
			return v, known, nil
		}
		from = recs[len(recs)-1].key + "\x00"
	}
}

// auditPageBytes bounds what one page of audit records read at once
// weighs, about: a record holds the values its publish wrote, up to the
// store's request size, and a page of 1,000 records of 600 KB each would
// take 600 MB of the server's heap (and etcd's) for one read.
const auditPageBytes = 4 << 20

// auditPager sizes the pages of a read of many audit records by what the
// records read so far weighed: as many as auditPageBytes holds, at least
// one; a first page of a few.
type auditPager struct{ n, bytes int64 }

// limit is the next page's size, of at most want records.
func (p *auditPager) limit(want int64) int64 {
	if p.n == 0 {
		return max(min(want, 8), 1)
	}
	return max(min(want, auditPageBytes/max(p.bytes/p.n, 1)), 1)
}

func (p *auditPager) weigh(recs []auditRecord) {
	for _, r := range recs {
		p.n++
		p.bytes += r.size
	}
}

// AuditLimit bounds a namespace's audit log: its newest Records records
// and, of those, no more than Bytes bytes of keys and values in the store
// (0: no bound in bytes). The newest record is always kept.
type AuditLimit struct {
	Records int
	Bytes   int64
}

// TrimAudit bounds namespace ns's audit log to limit: it folds older
// records, a thousand at most per call, read a page at a time (of about
// auditPageBytes), into the namespace's base, in one
// transaction that commits only if no other trim moved the base meanwhile
// (then it returns 0 and no error: the other did the work). It returns
// how many records it folded. History then reports the log as truncated
// before the base, and ValuesAt answers from the base on. With a bound in
// bytes it reads the records it keeps, newest first, to weigh them.
func (s *Namespaces) TrimAudit(ctx context.Context, ns string, limit AuditLimit) (int, error) {
	if err := validNamespace(ns); err != nil {
		return 0, err
	}
	if limit.Records < 1 || limit.Bytes < 0 {
		return 0, fmt.Errorf("etcd: trim of %q: %w: keep %d records, %d bytes", ns, ErrInvalidArgument, limit.Records, limit.Bytes)
	}
	if err := s.enter(); err != nil {
		return 0, err
	}
	defer s.calls.Done()
	p := auditPrefix(ns)
	rctx, cancel := s.requestCtx(ctx)
	resp, err := s.cli.Get(rctx, p, clientv3.WithPrefix(), clientv3.WithCountOnly())
	cancel()
	if err != nil {
		return 0, etcd.MapError("trim", ns, err)
	}
	keep := min(int64(limit.Records), resp.Count)
	var pages auditPager
	if limit.Bytes > 0 {
		if keep, err = s.auditKeptWithin(ctx, ns, keep, limit.Bytes, &pages); err != nil {
			return 0, err
		}
	}
	extra := min(resp.Count-keep, 1000)
	if extra <= 0 {
		return 0, nil
	}
	b, baseRev, hasBase, err := s.auditBase(ctx, ns)
	if err != nil {
		return 0, err
	}
	// The records to fold, oldest first, a page at a time (auditPager):
	// only the base's values are kept between pages.
	from, to := p, clientv3.GetPrefixRangeEnd(p)
	var folded int64
	var firstKey, lastKey string
	for folded < extra {
		recs, err := s.auditPage(ctx, ns, from, to, pages.limit(extra-folded), false, 0)
		if err != nil {
			return 0, err
		}
		if len(recs) == 0 {
			break
		}
		pages.weigh(recs)
		if folded == 0 {
			firstKey = recs[0].key
			if !hasBase {
				if b, err = s.baseBefore(ctx, ns, recs[0]); err != nil {
					return 0, err
				}
			}
		}
		for _, r := range recs {
			if r.rev <= b.Revision {
				continue
			}
			if r.PrevRevision != b.Revision {
				return 0, fmt.Errorf("etcd: trim of %q: the audit log misses a change between revisions %d and %d; not trimmed", ns, b.Revision, r.rev)
			}
			for k, v := range r.Values {
				b.Values[k] = v
			}
			for _, k := range r.Deletes {
				delete(b.Values, k)
			}
			b.Revision, b.CommittedAt = r.rev, r.CommittedAt
		}
		folded += int64(len(recs))
		lastKey = recs[len(recs)-1].key
		from = lastKey + "\x00"
	}
	if folded == 0 {
		return 0, nil
	}
	data, err := json.Marshal(b)
	if err != nil {
		return 0, err
	}
	rctx, cancel = s.requestCtx(ctx)
	defer cancel()
	tr, err := s.cli.Txn(rctx).
		If(clientv3.Compare(clientv3.ModRevision(AuditBaseRoot+ns), "=", baseRev)).
		Then(clientv3.OpPut(AuditBaseRoot+ns, string(data)),
			clientv3.OpDelete(firstKey, clientv3.WithRange(lastKey+"\x00"))).
		Commit()
	if err != nil {
		return 0, etcd.MapError("trim", ns, err)
	}
	if !tr.Succeeded {
		return 0, nil
	}
	return int(folded), nil
}

// baseBefore is the base of ns's audit log before its first record,
// first, when the log has no base yet: empty when the record is the
// namespace's first change; else the namespace's content then, from
// etcd's history, or unknown once etcd compacted it (the log starts after
// the namespace did: records from before the log existed).
func (s *Namespaces) baseBefore(ctx context.Context, ns string, first auditRecord) (auditBase, error) {
	b := auditBase{Values: map[string]json.RawMessage{}}
	if first.PrevRevision == 0 {
		return b, nil
	}
	v, err := s.valuesAt(ctx, "trim", ns, first.PrevRevision)
	switch {
	case errors.Is(err, transport.ErrCompacted):
		b.Revision, b.Unknown = first.PrevRevision, true
	case err != nil:
		return b, fmt.Errorf("etcd: trim of %q: the content before its first audit record: %w", ns, err)
	default:
		b.Revision, b.CommittedAt, b.Values = v.Revision, v.CommittedAt, v.Values
	}
	return b, nil
}

// auditKeptWithin weighs ns's newest records, newest first, and returns
// how many of the newest n fit in budget bytes (the newest one always).
// pages weighs the records read, for the caller's next pages.
func (s *Namespaces) auditKeptWithin(ctx context.Context, ns string, n, budget int64, pages *auditPager) (int64, error) {
	p := auditPrefix(ns)
	to := clientv3.GetPrefixRangeEnd(p)
	var kept, used int64
	for kept < n {
		recs, err := s.auditPage(ctx, ns, p, to, pages.limit(min(n-kept, 1000)), true, 0)
		if err != nil {
			return 0, err
		}
		pages.weigh(recs)
		if len(recs) == 0 {
			return kept, nil
		}
		for _, r := range recs {
			if used += r.size; used > budget && kept > 0 {
				return kept, nil
			}
			kept++
		}
		to = recs[len(recs)-1].key
	}
	return kept, nil
}

// auditAt finds in ns's audit log the revision of its last change
// committed at or before at (found 0: none in the log); complete says the
// log reaches the namespace's first change, so that none found means none
// there was.
func (s *Namespaces) auditAt(ctx context.Context, ns string, at time.Time) (found int64, complete bool, err error) {
	p := auditPrefix(ns)
	from, to := p, clientv3.GetPrefixRangeEnd(p)
	var pages auditPager
	for {
		limit := pages.limit(1000)
		recs, err := s.auditPage(ctx, ns, from, to, limit, true, 0)
		if err != nil {
			return 0, false, err
		}
		pages.weigh(recs)
		for _, r := range recs {
			if !r.CommittedAt.After(at) {
				return r.rev, true, nil
			}
			if r.PrevRevision == 0 {
				return 0, true, nil
			}
		}
		if int64(len(recs)) < limit {
			// The log ends above at: its base, if it covers at; else the
			// caller reads etcd's history.
			b, _, trimmed, err := s.auditBase(ctx, ns)
			if err == nil && trimmed && !b.Unknown && !b.CommittedAt.After(at) {
				return b.Revision, true, nil
			}
			return 0, false, err
		}
		to = recs[len(recs)-1].key
	}
}

// auditChange decodes an audit record (a value under AuditRoot) into the
// change it records: the value its publish wrote to the namespace's meta
// key (nil for an unaudited change, which wrote none), the values it put,
// the keys it deleted, and its revision when the record names it (an
// unaudited change's; else the record's own CreateRevision). Import
// writes changes again from it.
func auditChange(record []byte) (metaValue []byte, puts map[string]json.RawMessage, deletes []string, rev int64, err error) {
	var e auditEntry
	if err := json.Unmarshal(record, &e); err != nil {
		return nil, nil, nil, 0, fmt.Errorf("%w: audit record: %v", transport.ErrMalformed, err)
	}
	if e.Kind != KindUnaudited {
		if metaValue, err = json.Marshal(e.meta); err != nil {
			return nil, nil, nil, 0, err
		}
	}
	return metaValue, e.Values, e.Deletes, e.Revision, nil
}

// UnauditedRecord returns the audit key and record of a change written
// past holdfast to namespace ns at revision rev: the keys it put, with
// their values, and deleted; prev is the namespace's revision before it.
// The key sorts between the records of the namespace's changes before and
// after it, as a publish's does.
func UnauditedRecord(ns string, rev, prev int64, puts map[string]json.RawMessage, deletes []string, seen time.Time) (key string, record []byte, err error) {
	e := auditEntry{meta: meta{Meta: etcd.Meta{PrevRevision: prev, CommittedAt: seen.UTC()}, Kind: KindUnaudited, Puts: []string{}, Deletes: []string{}}, Values: puts, Revision: rev}
	for k := range puts {
		e.Puts = append(e.Puts, k)
	}
	e.Deletes = append(e.Deletes, deletes...)
	slices.Sort(e.Puts)
	slices.Sort(e.Deletes)
	record, err = encodeAudit(e)
	return auditKey(ns, rev-1) + "u", record, err
}
