package store

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/holdfast-dev/holdfast/transport"
	"github.com/holdfast-dev/holdfast/transport/etcd"
)

// The index of namespaces: a key per namespace under IndexRoot, which
// every publish, rollback and rollout commit writes in its transaction
// (one more operation), holding the namespace's last change: who, when,
// why. Its ModRevision is the namespace's revision, which the transaction
// cannot know before it commits. Listing the namespaces reads the index,
// never the namespaces' values.
const IndexRoot = "/holdfast-namespaces/"

// indexDoneKey says the index was backfilled: every namespace of the
// store had its entry (BackfillIndex).
const indexDoneKey = "/holdfast-meta/namespace-index"

// indexFormat is the index's layout; a store backfilled for an older one
// is backfilled again.
const indexFormat = "1"

// indexEntry is the value of a namespace's index key: its last change.
// Revision is set in the entries written after their change (an
// unaudited change's, a backfill's); a publish's entry has its change's
// revision as its key's ModRevision.
type indexEntry struct {
	Revision    int64     `json:"revision,omitempty"`
	CommittedAt time.Time `json:"committed_at"`
	Actor       string    `json:"actor,omitempty"`
	OnBehalfOf  string    `json:"on_behalf_of,omitempty"`
	Reason      string    `json:"reason,omitempty"`
	Kind        string    `json:"kind,omitempty"`
}

func indexKey(ns string) string { return IndexRoot + ns }

// indexOp is the write of ns's index entry for the change m records.
func indexOp(ns string, m meta, rev int64) (clientv3.Op, error) {
	b, err := json.Marshal(indexEntry{Revision: rev, CommittedAt: m.CommittedAt, Actor: m.Actor, OnBehalfOf: m.OnBehalfOf, Reason: m.Reason, Kind: m.Kind})
	if err != nil {
		return clientv3.Op{}, err
	}
	return clientv3.OpPut(indexKey(ns), string(b)), nil
}

// UnauditedIndexOp is the write of ns's index entry for a change written
// past holdfast at revision rev, seen at seen: holdfast server's leader
// writes it with the change's audit record (UnauditedRecord). It writes
// only over an entry older than rev, never over a later publish's.
func UnauditedIndexOp(ns string, rev int64, seen time.Time) (clientv3.Op, error) {
	op, err := indexOp(ns, meta{Meta: etcd.Meta{CommittedAt: seen.UTC()}, Kind: KindUnaudited}, rev)
	if err != nil {
		return clientv3.Op{}, err
	}
	return clientv3.OpTxn([]clientv3.Cmp{clientv3.Compare(clientv3.ModRevision(indexKey(ns)), "<", rev)}, []clientv3.Op{op}, nil), nil
}

// NamespaceEntry is a namespace as the index holds it: its revision and
// its last change.
type NamespaceEntry struct {
	Namespace   string
	Revision    int64
	CommittedAt time.Time
	Actor       string
	OnBehalfOf  string
	Reason      string
	Kind        string
}

// ListOptions select a page of List.
type ListOptions struct {
	// Prefix keeps the namespaces whose names begin with it.
	Prefix string
	// After keeps the namespaces whose names sort after it (the last name
	// of the previous page).
	After string
	// Limit is the most namespaces returned (required, at least 1).
	Limit int
	// Match, when set, keeps the namespaces it accepts (a caller's scope).
	Match func(ns string) bool
}

// listBatch is how many index keys List reads at a time.
const listBatch = 500

// List returns up to o.Limit namespaces of the index, sorted by name, and
// whether more follow. The index is read in batches until the page is
// full, so that a Match that accepts few namespaces still gets full pages.
func (s *Namespaces) List(ctx context.Context, o ListOptions) (entries []NamespaceEntry, more bool, err error) {
	if o.Limit < 1 {
		return nil, false, fmt.Errorf("%w: limit %d", ErrInvalidArgument, o.Limit)
	}
	if err := s.enter(); err != nil {
		return nil, false, err
	}
	defer s.calls.Done()
	from := indexKey(o.Prefix)
	if o.After != "" && indexKey(o.After) >= from {
		from = indexKey(o.After) + "\x00"
	}
	end := clientv3.GetPrefixRangeEnd(indexKey(o.Prefix))
	for from < end {
		rctx, cancel := s.requestCtx(ctx)
		resp, err := s.cli.Get(rctx, from, clientv3.WithRange(end), clientv3.WithLimit(listBatch))
		cancel()
		if err != nil {
			return nil, false, etcd.MapError("namespaces", "", err)
		}
		for _, kv := range resp.Kvs {
			ns := strings.TrimPrefix(string(kv.Key), IndexRoot)
			if transport.ValidateNamespace(ns) != nil || o.Match != nil && !o.Match(ns) {
				continue
			}
			if len(entries) == o.Limit {
				return entries, true, nil
			}
			var e indexEntry
			if err := json.Unmarshal(kv.Value, &e); err != nil {
				s.log.Warn("store: a namespace's index entry is not JSON; listed without its last change", "ns", ns, "err", err)
			}
			if e.Revision == 0 {
				e.Revision = kv.ModRevision
			}
			entries = append(entries, NamespaceEntry{Namespace: ns, Revision: e.Revision, CommittedAt: e.CommittedAt,
				Actor: e.Actor, OnBehalfOf: e.OnBehalfOf, Reason: e.Reason, Kind: e.Kind})
		}
		if !resp.More {
			break
		}
		from = string(resp.Kvs[len(resp.Kvs)-1].Key) + "\x00"
	}
	return entries, false, nil
}

// BackfillIndex gives every namespace of the store that has no index
// entry one, from its meta key (a store written by a server older than
// the index), unless a backfill completed before: it reads one key per
// namespace (its meta key, the first of its range, skipping the rest),
// never the values. An entry it writes does not replace one a publish
// wrote meanwhile. It returns how many entries it wrote.
func (s *Namespaces) BackfillIndex(ctx context.Context) (int, error) {
	if err := s.enter(); err != nil {
		return 0, err
	}
	defer s.calls.Done()
	resp, err := s.cli.Get(ctx, indexDoneKey)
	if err != nil {
		return 0, fmt.Errorf("store: the index of namespaces: %w", err)
	}
	if len(resp.Kvs) > 0 && string(resp.Kvs[0].Value) == indexFormat {
		return 0, nil
	}
	n := 0
	end := clientv3.GetPrefixRangeEnd(etcd.KeyRoot)
	for from := etcd.KeyRoot; from < end; {
		resp, err := s.cli.Get(ctx, from, clientv3.WithRange(end), clientv3.WithLimit(1))
		if err != nil {
			return n, fmt.Errorf("store: the index of namespaces: %w", err)
		}
		if len(resp.Kvs) == 0 {
			break
		}
		ns, _, _ := strings.Cut(strings.TrimPrefix(string(resp.Kvs[0].Key), etcd.KeyRoot), "/")
		prefix := etcd.Prefix(ns)
		from = clientv3.GetPrefixRangeEnd(prefix)
		if transport.ValidateNamespace(ns) != nil {
			continue
		}
		wrote, err := s.backfillOne(ctx, ns, prefix, resp.Kvs[0].Key, resp.Kvs[0].Value)
		if err != nil {
			return n, err
		}
		if wrote {
			n++
		}
	}
	if _, err := s.cli.Put(ctx, indexDoneKey, indexFormat); err != nil {
		return n, fmt.Errorf("store: the index of namespaces: %w", err)
	}
	return n, nil
}

// backfillOne writes ns's index entry if it has none: its revision (the
// highest ModRevision of its keys) and its meta key's record, when the
// first key of its range (key, value) is its meta key.
func (s *Namespaces) backfillOne(ctx context.Context, ns, prefix string, key, value []byte) (bool, error) {
	last, err := s.cli.Get(ctx, prefix, clientv3.WithPrefix(), clientv3.WithKeysOnly(),
		clientv3.WithSort(clientv3.SortByModRevision, clientv3.SortDescend), clientv3.WithLimit(1))
	if err != nil {
		return false, fmt.Errorf("store: the index of namespaces: %w", err)
	}
	if len(last.Kvs) == 0 {
		return false, nil // deleted since
	}
	var m meta
	if string(key) == prefix {
		_ = json.Unmarshal(value, &m) // a meta key written past holdfast: the revision alone
	}
	if m.Kind == "" {
		m.Kind = KindPublish
		if m.CommittedAt.IsZero() {
			m.Kind = KindUnaudited
		}
	}
	op, err := indexOp(ns, m, last.Kvs[0].ModRevision)
	if err != nil {
		return false, err
	}
	tr, err := s.cli.Txn(ctx).If(clientv3.Compare(clientv3.CreateRevision(indexKey(ns)), "=", 0)).Then(op).Commit()
	if err != nil {
		return false, fmt.Errorf("store: the index of namespaces: %w", err)
	}
	return tr.Succeeded, nil
}
