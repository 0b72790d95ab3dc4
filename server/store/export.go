package store

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strings"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/holdfast-dev/holdfast/transport/etcd"
)

// Export and Import move a store to another etcd cluster with its
// revisions: every key under "/holdfast" with the revision it was last
// written at, so that the new cluster serves the same store id, the same
// namespace revisions and the same audit, and clients resume from their
// cursors without a snapshot (a client that was behind the export's last
// changes resnapshots once, as on any gap).
//
// The file is JSON lines: a header, then one line per key.

// exportFormat is the version of the export file.
const exportFormat = 1

// exportRoot is the prefix of every key holdfast writes.
const exportRoot = "/holdfast"

// padKey is written at the revisions of the export that no kept key was
// last written at, so that every kept key gets its own revision back.
const padKey = "/holdfast-meta/import-pad"

type exportHeader struct {
	Format  int    `json:"holdfast_export"`
	StoreID string `json:"store_id"`
	Head    int64  `json:"head"`
	Keys    int    `json:"keys"`
}

type exportKey struct {
	Key    string `json:"k"`
	Value  []byte `json:"v"`
	Create int64  `json:"c"`
	Mod    int64  `json:"m"`
}

// Export writes every key of the store under "/holdfast", read at one
// revision, to w, but those under a lease (the servers' election). Stop the servers of the store first: a publish after
// the read is not in the file.
func Export(ctx context.Context, cli *clientv3.Client, w io.Writer) (head int64, keys int, err error) {
	resp, err := cli.Get(ctx, exportRoot, clientv3.WithPrefix())
	if err != nil {
		return 0, 0, fmt.Errorf("store: export: %w", err)
	}
	// Keys under a lease (the servers' leader election) live as long as
	// the process that holds it: not part of the store.
	kvs := slices.DeleteFunc(resp.Kvs, func(kv *mvccpb.KeyValue) bool { return kv.Lease != 0 })
	h := exportHeader{Format: exportFormat, Head: resp.Header.Revision, Keys: len(kvs)}
	for _, kv := range kvs {
		if string(kv.Key) == etcd.StoreIDKey {
			h.StoreID = string(kv.Value)
		}
	}
	if h.StoreID == "" {
		return 0, 0, errors.New("store: export: the store has no store id: not a holdfast store")
	}
	bw := bufio.NewWriter(w)
	enc := json.NewEncoder(bw)
	if err := enc.Encode(h); err != nil {
		return 0, 0, err
	}
	for _, kv := range kvs {
		if err := enc.Encode(exportKey{Key: string(kv.Key), Value: kv.Value, Create: kv.CreateRevision, Mod: kv.ModRevision}); err != nil {
			return 0, 0, err
		}
	}
	return h.Head, h.Keys, bw.Flush()
}

// Import writes an export into the store of cli, which must be a new,
// empty cluster, with the export's revisions, so that clients resume
// from their cursors: every change the audit log keeps is written again
// at its revision, whole (its values, its deletes, its meta key), so a
// client that was behind reads the same change sets as from the old
// store; the other keys (schemas, the store id, the audit itself) at the
// revision they were last written at; the revisions between get a pad
// key. A namespace key the audit log does not explain (written before
// the log began, or past the server) is written at its last revision, and
// the new store's history is compacted up to there: a client behind it
// resnapshots instead of reading a change set the old store never had.
// Import then reads every key back and compares it with the export. It
// refuses a cluster that holds any key.
func Import(ctx context.Context, cli *clientv3.Client, r io.Reader, log *slog.Logger) (storeID string, head, compacted int64, err error) {
	dec := json.NewDecoder(bufio.NewReader(r))
	var h exportHeader
	if err := dec.Decode(&h); err != nil {
		return "", 0, 0, fmt.Errorf("store: import: the header: %w", err)
	}
	switch {
	case h.Format == 0:
		return "", 0, 0, errors.New("store: import: not a holdfast export")
	case h.Format > exportFormat:
		return "", 0, 0, fmt.Errorf("store: import: the export is of format %d, newer than this holdfast's %d", h.Format, exportFormat)
	case h.StoreID == "" || h.Head < 1:
		return "", 0, 0, errors.New("store: import: the header names no store id or head")
	}
	var keys []exportKey
	for n := 0; ; n++ {
		var k exportKey
		err := dec.Decode(&k)
		if errors.Is(err, io.EOF) {
			if n != h.Keys {
				return "", 0, 0, fmt.Errorf("store: import: the export holds %d keys, its header says %d: cut short?", n, h.Keys)
			}
			break
		}
		if err != nil {
			return "", 0, 0, fmt.Errorf("store: import: key %d: %w", n+1, err)
		}
		if !strings.HasPrefix(k.Key, exportRoot) || k.Mod < 1 || k.Mod > h.Head {
			return "", 0, 0, fmt.Errorf("store: import: key %q at revision %d does not belong in an export up to %d", k.Key, k.Mod, h.Head)
		}
		keys = append(keys, k)
	}
	p, err := planImport(keys, h.Head)
	if err != nil {
		return "", 0, 0, err
	}
	resp, err := cli.Get(ctx, "\x00", clientv3.WithFromKey(), clientv3.WithCountOnly())
	if err != nil {
		return "", 0, 0, fmt.Errorf("store: import: %w", err)
	}
	if resp.Count > 0 || resp.Header.Revision >= p.first {
		return "", 0, 0, fmt.Errorf("store: import: the cluster must be new and empty: it holds %d keys at revision %d, and the export begins at revision %d", resp.Count, resp.Header.Revision, p.first)
	}
	for rev := resp.Header.Revision + 1; rev <= h.Head; rev++ {
		ops := p.ops(rev)
		tr, err := cli.Txn(ctx).Then(ops...).Commit()
		if err != nil {
			return "", 0, 0, fmt.Errorf("store: import: revision %d: %w", rev, err)
		}
		if tr.Header.Revision != rev {
			return "", 0, 0, fmt.Errorf("store: import: wrote revision %d where %d was due: another writer on the cluster?", tr.Header.Revision, rev)
		}
		if rev%10000 == 0 {
			log.Info("importing", "revision", rev, "head", h.Head)
		}
	}
	if err := verifyImport(ctx, cli, keys); err != nil {
		return "", 0, 0, err
	}
	if p.unexplained > 0 {
		if _, err := cli.Compact(ctx, p.unexplained); err != nil {
			return "", 0, 0, fmt.Errorf("store: import: compacting up to %d: %w", p.unexplained, err)
		}
	}
	return h.StoreID, h.Head, p.unexplained, nil
}

// importPlan is what Import writes at each revision: key → value (nil:
// a delete).
type importPlan struct {
	at          map[int64]map[string]*string
	first       int64 // the lowest revision written
	unexplained int64 // the last revision of a namespace key the audit does not explain
}

func (p *importPlan) set(rev int64, key string, value *string) {
	if p.at[rev] == nil {
		p.at[rev] = make(map[string]*string)
	}
	p.at[rev][key] = value
	p.first = min(p.first, rev)
}

// ops are revision rev's operations, sorted by key; a pad put when none.
func (p *importPlan) ops(rev int64) []clientv3.Op {
	m := p.at[rev]
	if len(m) == 0 {
		return []clientv3.Op{clientv3.OpPut(padKey, fmt.Sprint(rev))}
	}
	names := make([]string, 0, len(m))
	for k := range m {
		names = append(names, k)
	}
	slices.Sort(names)
	ops := make([]clientv3.Op, 0, len(names))
	for _, k := range names {
		if v := m[k]; v != nil {
			ops = append(ops, clientv3.OpPut(k, *v))
		} else {
			ops = append(ops, clientv3.OpDelete(k))
		}
	}
	return ops
}

// planImport lays out the export's keys and the changes of its audit log
// over the revisions.
func planImport(keys []exportKey, head int64) (*importPlan, error) {
	p := &importPlan{at: make(map[int64]map[string]*string), first: 1 << 62}
	type change struct {
		ns  string
		rev int64
	}
	explained := make(map[change]bool)
	for _, k := range keys {
		rest, ok := strings.CutPrefix(k.Key, AuditRoot)
		if !ok {
			continue
		}
		ns, _, ok := strings.Cut(rest, "/")
		if !ok {
			return nil, fmt.Errorf("store: import: audit key %q names no namespace", k.Key)
		}
		// The record, and the change it records, whole, at its revision.
		meta, values, deletes, rev, err := auditChange(k.Value)
		if err != nil {
			return nil, fmt.Errorf("store: import: audit record %q: %w", k.Key, err)
		}
		if rev == 0 {
			rev = k.Create
		}
		prefix := etcd.Prefix(ns)
		for name, v := range values {
			s := string(v)
			p.set(rev, prefix+name, &s)
		}
		for _, name := range deletes {
			p.set(rev, prefix+name, nil)
		}
		if meta != nil {
			m := string(meta)
			p.set(rev, prefix, &m)
		}
		explained[change{ns, rev}] = true
	}
	for _, k := range keys {
		v := string(k.Value)
		if rest, ok := strings.CutPrefix(k.Key, etcd.KeyRoot); ok {
			ns, _, _ := strings.Cut(rest, "/")
			if explained[change{ns, k.Mod}] {
				continue // written whole with its change
			}
			p.unexplained = max(p.unexplained, k.Mod)
		}
		p.set(k.Mod, k.Key, &v)
	}
	// A key the audit puts and the export lacks was deleted past the
	// server: deleted at the head, and the history compacted to there.
	exported := make(map[string]bool, len(keys))
	for _, k := range keys {
		exported[k.Key] = true
	}
	live := make(map[string]bool)
	revs := make([]int64, 0, len(p.at))
	for rev := range p.at {
		revs = append(revs, rev)
	}
	slices.Sort(revs)
	for _, rev := range revs {
		for k, v := range p.at[rev] {
			live[k] = v != nil
		}
	}
	for k, on := range live {
		if on && !exported[k] {
			p.set(head, k, nil)
			p.unexplained = head
		}
	}
	return p, nil
}

// verifyImport reads every key under "/holdfast" back and checks each
// exported key's value and revision, and that no other key is there (the
// pad key aside).
func verifyImport(ctx context.Context, cli *clientv3.Client, keys []exportKey) error {
	resp, err := cli.Get(ctx, exportRoot, clientv3.WithPrefix())
	if err != nil {
		return fmt.Errorf("store: import: reading back: %w", err)
	}
	want := make(map[string]exportKey, len(keys))
	for _, k := range keys {
		want[k.Key] = k
	}
	for _, kv := range resp.Kvs {
		key := string(kv.Key)
		if key == padKey {
			continue
		}
		k, ok := want[key]
		switch {
		case !ok:
			return fmt.Errorf("store: import: %q is in the new store but not in the export (deleted past the audit?)", key)
		case string(kv.Value) != string(k.Value) || kv.ModRevision != k.Mod:
			return fmt.Errorf("store: import: %q differs: revision %d, want %d", key, kv.ModRevision, k.Mod)
		}
		delete(want, key)
	}
	for key := range want {
		return fmt.Errorf("store: import: %q is in the export but not in the new store", key)
	}
	return nil
}
