package fakeserver

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/holdfast-dev/holdfast/internal/controlplane"
	"github.com/holdfast-dev/holdfast/internal/dataplane"
	"github.com/holdfast-dev/holdfast/internal/wire"
	"github.com/holdfast-dev/holdfast/transport"
)

// version is one value of one key at one revision; a nil val is a tombstone.
type version struct {
	rev int64
	val json.RawMessage
}

// checker validates a namespace's whole content after a publish. It is held
// by pointer so that a publish can tell whether the schema changed while it
// validated outside the lock.
type checker struct {
	raw   []byte // the schema as it was set
	check func(content map[string]json.RawMessage) error
}

// namespace is the MVCC state of one namespace.
type namespace struct {
	rev  int64                // revision of the last change; 0 if never published
	keys map[string][]version // history per key, oldest first
	// live is the content at rev. It is replaced on every publish and never
	// mutated, so readers may keep it after the lock is released.
	live    map[string]json.RawMessage
	changes []*dataplane.Change // change sets after the compaction point, oldest first
	// compactedRev is the revision of the namespace's last change that
	// compaction dropped (0: none): its revision as of the compaction
	// point when no later change is left, which a restore needs.
	compactedRev int64
	// audit records who committed each revision and why; compaction
	// keeps it (audit.go).
	audit auditLog
}

// logEntry records which keys a revision touched, so that compaction visits
// only what it can prune.
type logEntry struct {
	rev  int64
	ns   string
	keys []string
}

// store is the in-memory MVCC store: one revision counter for every
// namespace, history per key with tombstones, compaction by revision and by
// retention. Every method is safe for concurrent use; the lock is held for
// map and slice work, never for I/O or encoding, with two exceptions that
// run a namespace's schema under it: a rollback, and a publish whose
// optimistic check lost two races in a row.
type store struct {
	mu        sync.Mutex
	id        string
	gen       uint64 // incremented by reset; tells change sets of old stores apart
	head      int64
	compact   int64 // history after compact is kept
	retention int64 // keep the last retention revisions; 0 keeps all
	nss       map[string]*namespace
	// schemas are the namespaces' schemas (none: anything goes), kept
	// apart from the namespaces: a schema may be set for a namespace
	// that has no revision yet, which it does not create.
	schemas  map[string]*checker
	log      []logEntry
	now      func() time.Time
	lastAt   time.Time // the last commit's time: commit times never go back
	auditMax int       // audit records kept per namespace (see trimAuditLocked)
	// onCommit is called under mu, in revision order, with every committed
	// change; onReset likewise with the new generation. Neither may block.
	onCommit func(*dataplane.Change)
	onReset  func(gen uint64)
}

// Errors of the store, mapped to HTTP statuses by the handlers.
var (
	// ErrUnknownNamespace: the namespace was never published to nor given a
	// schema (HTTP 404).
	ErrUnknownNamespace = dataplane.ErrUnknownNamespace
	// ErrInvalid: the request is malformed or names an impossible revision
	// (HTTP 400). It is wrapped with the reason.
	ErrInvalid = dataplane.ErrInvalid
	// ErrClosed: the server was closed.
	ErrClosed = dataplane.ErrClosed
)

// SchemaError is a publish (or rollback) that fails the namespace's schema
// (HTTP 422). Nothing was committed.
type SchemaError = controlplane.SchemaError

func newStoreID() string {
	var b [8]byte
	_, _ = rand.Read(b[:]) // never fails on supported platforms
	return hex.EncodeToString(b[:])
}

func newStore(retention int64) *store {
	return &store{
		id:        newStoreID(),
		gen:       1,
		retention: retention,
		nss:       make(map[string]*namespace),
		schemas:   make(map[string]*checker),
		now:       time.Now,
		auditMax:  DefaultAuditRecords,
	}
}

func newNamespace() *namespace {
	return &namespace{keys: make(map[string][]version), live: map[string]json.RawMessage{}}
}

// publish commits puts and deletes to ns atomically as one new revision.
// Inputs must be validated (names, keys, compact JSON values) and a key may
// not be both put and deleted. A publish that changes nothing still gets a
// revision: every publish is one revision, which keeps the contract simple.
func (st *store) publish(ns string, puts map[string]json.RawMessage, deletes []string) (*dataplane.Change, error) {
	return st.publishIf(ns, puts, deletes, commitMeta{}, nil)
}

// publishIf is publish recording meta, and, when ifRev is not nil, only if
// ns's revision is *ifRev when it commits (0: ns has none), else a
// *ConflictError: checked under the same lock as the commit, so that of
// two publishers expecting the same revision exactly one wins.
func (st *store) publishIf(ns string, puts map[string]json.RawMessage, deletes []string, meta commitMeta, ifRev *int64) (*dataplane.Change, error) {
	// Validate outside the lock when there is a schema; commit only if
	// nothing changed meanwhile, else try again (validating under the lock
	// on the last attempt, so that a busy namespace cannot starve a publish).
	for attempt := 0; ; attempt++ {
		st.mu.Lock()
		n := st.nss[ns]
		if err := checkRevision(ns, n, ifRev); err != nil {
			st.mu.Unlock()
			return nil, err
		}
		sch := st.schemas[ns]
		if sch == nil {
			c := st.commitLocked(ns, n, puts, deletes, meta)
			st.mu.Unlock()
			return c, nil
		}
		var live map[string]json.RawMessage
		var rev int64
		if n != nil {
			live, rev = n.live, n.rev
		}
		if attempt >= 2 {
			defer st.mu.Unlock()
			if err := validate(ns, sch, apply(live, puts, deletes)); err != nil {
				return nil, err
			}
			return st.commitLocked(ns, n, puts, deletes, meta), nil
		}
		gen := st.gen
		st.mu.Unlock()

		if err := validate(ns, sch, apply(live, puts, deletes)); err != nil {
			return nil, err
		}

		st.mu.Lock()
		// n.rev == rev: ifRev, checked at rev, still holds.
		if st.gen == gen && st.nss[ns] == n && (n == nil || n.rev == rev) && st.schemas[ns] == sch {
			c := st.commitLocked(ns, n, puts, deletes, meta)
			st.mu.Unlock()
			return c, nil
		}
		st.mu.Unlock()
	}
}

func validate(ns string, sch *checker, content map[string]json.RawMessage) error {
	if err := sch.check(content); err != nil {
		var se *SchemaError
		if errors.As(err, &se) {
			se.Namespace = ns
			return se
		}
		return &SchemaError{Namespace: ns, Failures: []string{err.Error()}}
	}
	return nil
}

// apply returns a copy of live with puts and deletes applied.
func apply(live, puts map[string]json.RawMessage, deletes []string) map[string]json.RawMessage {
	next := make(map[string]json.RawMessage, len(live)+len(puts))
	maps.Copy(next, live)
	maps.Copy(next, puts)
	for _, k := range deletes {
		delete(next, k)
	}
	return next
}

// commitLocked assigns the next revision to a change set of ns (creating
// the namespace if n is nil) and records it, with its audit record of meta.
// Deletes of absent keys are dropped from the change set.
func (st *store) commitLocked(name string, n *namespace, puts map[string]json.RawMessage, deletes []string, meta commitMeta) *dataplane.Change {
	return st.commitAtLocked(name, n, puts, deletes, meta, st.head+1)
}

// commitAtLocked is commitLocked at revision rev (the head or the one
// after it: the namespaces of a change committed as one share it).
func (st *store) commitAtLocked(name string, n *namespace, puts map[string]json.RawMessage, deletes []string, meta commitMeta, rev int64) *dataplane.Change {
	if n == nil {
		n = newNamespace()
		st.nss[name] = n
	}
	st.head = rev
	// Commit times follow revisions, even if the clock steps back, so that
	// "the last revision committed at or before t" is well defined.
	if now := st.now().UTC(); now.After(st.lastAt) {
		st.lastAt = now
	}
	cs := transport.ChangeSet{
		Namespace:    name,
		Revision:     rev,
		PrevRevision: n.rev,
		StoreID:      st.id,
		CommittedAt:  st.lastAt,
	}
	live := maps.Clone(n.live)
	touched := make([]string, 0, len(puts)+len(deletes))
	if len(puts) > 0 {
		cs.Puts = make(map[string]json.RawMessage, len(puts))
	}
	for k, v := range puts {
		cs.Puts[k] = v
		live[k] = v
		n.keys[k] = append(n.keys[k], version{rev: rev, val: v})
		touched = append(touched, k)
	}
	for _, k := range deletes {
		if _, ok := live[k]; !ok {
			continue
		}
		delete(live, k)
		cs.Deletes = append(cs.Deletes, k)
		n.keys[k] = append(n.keys[k], version{rev: rev})
		touched = append(touched, k)
	}
	slices.Sort(cs.Deletes)
	n.live = live
	n.rev = rev
	c := &dataplane.Change{Gen: st.gen, CS: cs}
	n.changes = append(n.changes, c)
	st.log = append(st.log, logEntry{rev: rev, ns: name, keys: touched})
	if st.retention > 0 && rev-st.retention > st.compact {
		st.compactLocked(rev - st.retention)
	}
	st.recordLocked(n, &cs, meta)
	if st.onCommit != nil {
		st.onCommit(c)
	}
	return c
}

// rollback publishes ns's content at revision to as a new revision,
// recorded with meta (its Kind and RollbackOf set here).
func (st *store) rollback(ns string, to int64, meta commitMeta, ifRev *int64) (*dataplane.Change, error) {
	st.mu.Lock()
	defer st.mu.Unlock()
	n := st.nss[ns]
	if n == nil {
		return nil, fmt.Errorf("%w: %q", ErrUnknownNamespace, ns)
	}
	if err := checkRevision(ns, n, ifRev); err != nil {
		return nil, err
	}
	if to < 0 || to > st.head {
		return nil, fmt.Errorf("%w: rollback to revision %d outside 0..%d", ErrInvalid, to, st.head)
	}
	if to < st.compact {
		return nil, &transport.CompactedError{CompactRevision: st.compact}
	}
	target := withoutReserved(contentAt(n, to)) // a rollout of then is not one of now
	puts := make(map[string]json.RawMessage)
	for k, v := range target {
		if cur, ok := n.live[k]; !ok || string(cur) != string(v) {
			puts[k] = v
		}
	}
	var deletes []string
	for k := range n.live {
		if _, ok := target[k]; !ok {
			deletes = append(deletes, k)
		}
	}
	if sch := st.schemas[ns]; sch != nil {
		if err := validate(ns, sch, target); err != nil {
			return nil, err
		}
	}
	meta.Kind, meta.RollbackOf = KindRollback, to
	return st.commitLocked(ns, n, puts, deletes, meta), nil
}

// contentAt returns n's content at revision rev, which must not be below the
// compaction point.
func contentAt(n *namespace, rev int64) map[string]json.RawMessage {
	out := make(map[string]json.RawMessage)
	for k, vs := range n.keys {
		i := sort.Search(len(vs), func(i int) bool { return vs[i].rev > rev })
		if i > 0 && vs[i-1].val != nil {
			out[k] = vs[i-1].val
		}
	}
	return out
}

// compactTo discards history at and below rev (0 = head) and returns the
// compaction point.
func (st *store) compactTo(rev int64) (int64, error) {
	st.mu.Lock()
	defer st.mu.Unlock()
	if rev < 0 || rev > st.head {
		return st.compact, fmt.Errorf("%w: compact revision %d outside 0..%d", ErrInvalid, rev, st.head)
	}
	if rev == 0 {
		rev = st.head
	}
	st.compactLocked(rev)
	return st.compact, nil
}

// compactLocked keeps, for every key, the latest version at or below k (unless
// it is a tombstone) and everything after it, and drops change sets at or
// below k.
func (st *store) compactLocked(k int64) {
	if k <= st.compact {
		return
	}
	i := sort.Search(len(st.log), func(i int) bool { return st.log[i].rev > k })
	touched := make(map[string]bool)
	for _, e := range st.log[:i] {
		n := st.nss[e.ns]
		touched[e.ns] = true
		for _, key := range e.keys {
			if vs := prune(n.keys[key], k); len(vs) == 0 {
				delete(n.keys, key)
			} else {
				n.keys[key] = vs
			}
		}
	}
	st.log = slices.Clone(st.log[i:])
	for name := range touched {
		n := st.nss[name]
		j := sort.Search(len(n.changes), func(j int) bool { return n.changes[j].CS.Revision > k })
		if j > 0 {
			n.compactedRev = n.changes[j-1].CS.Revision
		}
		n.changes = slices.Clone(n.changes[j:])
	}
	st.compact = k
}

func prune(vs []version, k int64) []version {
	i := sort.Search(len(vs), func(i int) bool { return vs[i].rev > k })
	if i == 0 {
		return vs
	}
	keep := i - 1 // the latest version at or below k
	if vs[keep].val == nil {
		keep = i // a tombstone at or below k says nothing a reader needs
	}
	if keep == 0 {
		return vs
	}
	return slices.Clone(vs[keep:])
}

func (st *store) Snapshot(ns string) (dataplane.Snapshot, error) {
	st.mu.Lock()
	defer st.mu.Unlock()
	n := st.nss[ns]
	if n == nil {
		return dataplane.Snapshot{StoreID: st.id, Cursor: st.head}, fmt.Errorf("%w: %q", ErrUnknownNamespace, ns)
	}
	return dataplane.Snapshot{StoreID: st.id, Rev: n.rev, Cursor: st.head, Compact: st.compact, Values: n.live}, nil
}

// snapshotAt returns ns's content at revision rev (for tests and tools).
func (st *store) snapshotAt(ns string, rev int64) (map[string]json.RawMessage, error) {
	st.mu.Lock()
	defer st.mu.Unlock()
	n := st.nss[ns]
	if n == nil {
		return nil, fmt.Errorf("%w: %q", ErrUnknownNamespace, ns)
	}
	if rev < st.compact {
		return nil, &transport.CompactedError{CompactRevision: st.compact}
	}
	if rev > st.head {
		return nil, fmt.Errorf("%w: revision %d above head %d", ErrInvalid, rev, st.head)
	}
	return contentAt(n, rev), nil
}

// subscribe reads the change sets of ns after since (since < 0: from head)
// and, still under the lock, calls register so that a watcher sees every
// later commit. It fails with ErrUnknownNamespace, transport.ErrCursorAhead
// (a cursor above head) or a *transport.CompactedError.
func (st *store) Subscribe(ns string, since int64, register func(dataplane.Subscription)) (dataplane.Subscription, error) {
	st.mu.Lock()
	defer st.mu.Unlock()
	sub := dataplane.Subscription{StoreID: st.id, Gen: st.gen, Head: st.head}
	n := st.nss[ns]
	if n == nil {
		return sub, fmt.Errorf("%w: %q", ErrUnknownNamespace, ns)
	}
	sub.NsRev = n.rev
	if since < 0 {
		since = st.head
	}
	if since > st.head {
		return sub, fmt.Errorf("%w: cursor %d is above the store's head %d", transport.ErrCursorAhead, since, st.head)
	}
	if since < st.compact {
		return sub, &transport.CompactedError{CompactRevision: st.compact}
	}
	i := sort.Search(len(n.changes), func(i int) bool { return n.changes[i].CS.Revision > since })
	sub.Backlog = n.changes[i:len(n.changes):len(n.changes)]
	if register != nil {
		register(sub)
	}
	return sub, nil
}

// subscribeMany is subscribe for several namespaces at once, under one
// lock: the backlog holds every change of each namespace after its since,
// in revision order, and sub.head speaks for all of them. A namespace that
// subscribe would refuse is not subscribed: it is in ended, with the code
// of its /sdk/watch error. register gets the namespaces subscribed (none
// when all ended).
func (st *store) SubscribeMany(reqs []dataplane.SinceReq, register func(sub dataplane.Subscription, names []string)) (dataplane.Subscription, []wire.NamespaceEndedBody) {
	st.mu.Lock()
	defer st.mu.Unlock()
	sub := dataplane.Subscription{StoreID: st.id, Gen: st.gen, Head: st.head}
	var ended []wire.NamespaceEndedBody
	names := make([]string, 0, len(reqs))
	parts := 0
	for _, r := range reqs {
		n := st.nss[r.Name]
		switch {
		case n == nil:
			ended = append(ended, wire.NamespaceEndedBody{Namespace: r.Name, Code: transport.CodeNotFound,
				Message: fmt.Sprintf("%v: %q", ErrUnknownNamespace, r.Name)})
			continue
		case r.Since > st.head:
			ended = append(ended, wire.NamespaceEndedBody{Namespace: r.Name, Code: transport.CodeCursorAhead,
				Message: fmt.Sprintf("%v: cursor %d is above the store's head %d", transport.ErrCursorAhead, r.Since, st.head)})
			continue
		case r.Since < st.compact:
			ce := &transport.CompactedError{CompactRevision: st.compact}
			ended = append(ended, wire.NamespaceEndedBody{Namespace: r.Name, Code: transport.CodeCompacted,
				Message: ce.Error(), CompactRevision: st.compact})
			continue
		}
		names = append(names, r.Name)
		i := sort.Search(len(n.changes), func(i int) bool { return n.changes[i].CS.Revision > r.Since })
		if len(n.changes) > i {
			sub.Backlog = append(sub.Backlog, n.changes[i:]...)
			parts++
		}
	}
	if parts > 1 {
		slices.SortFunc(sub.Backlog, func(a, b *dataplane.Change) int { return cmp.Compare(a.CS.Revision, b.CS.Revision) })
	}
	if register != nil {
		register(sub, names)
	}
	return sub, ended
}

// setSchema installs a checker for ns; with create, it creates the
// namespace (at revision 0) if it has none, else a namespace without a
// revision keeps none until its first publish.
func (st *store) setSchema(ns string, c *checker, create bool) {
	st.mu.Lock()
	defer st.mu.Unlock()
	if create && st.nss[ns] == nil {
		st.nss[ns] = newNamespace()
	}
	st.schemas[ns] = c
}

// schemaOf returns ns's schema as it was set (ErrNoSchema: none).
func (st *store) schemaOf(ns string) ([]byte, error) {
	st.mu.Lock()
	defer st.mu.Unlock()
	if c := st.schemas[ns]; c != nil {
		return c.raw, nil
	}
	return nil, controlplane.ErrNoSchema
}

// deleteSchema drops ns's schema (ErrNoSchema: it had none); ns stays.
func (st *store) deleteSchema(ns string) error {
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.schemas[ns] == nil {
		return controlplane.ErrNoSchema
	}
	delete(st.schemas, ns)
	return nil
}

// reset empties the store (schemas included), gives it a new id and
// restarts revisions. It returns the new id and generation.
func (st *store) reset() (string, uint64) {
	st.mu.Lock()
	defer st.mu.Unlock()
	st.id = newStoreID()
	st.gen++
	st.head, st.compact = 0, 0
	st.nss = make(map[string]*namespace)
	st.schemas = make(map[string]*checker)
	st.log = nil
	if st.onReset != nil {
		st.onReset(st.gen)
	}
	return st.id, st.gen
}

// generation returns the store's generation, which reset and restore
// increment.
func (st *store) Generation() uint64 {
	st.mu.Lock()
	defer st.mu.Unlock()
	return st.gen
}

// restore rewinds the store to revision rev, as a restore from a backup
// taken then would: the same id, every version, change set and log entry
// after rev gone, the head back at rev, so that the next publish is rev+1.
// A namespace first published after rev is gone unless it has a schema
// (schemas are not history: they stay). rev must be within the history
// kept: 0..head, and not below the compaction point. It returns the new
// generation: watchers of older ones belong to the lost history.
func (st *store) restore(rev int64) (uint64, error) {
	st.mu.Lock()
	defer st.mu.Unlock()
	if rev < 0 || rev > st.head {
		return 0, fmt.Errorf("%w: restore to revision %d outside 0..%d", ErrInvalid, rev, st.head)
	}
	if rev < st.compact {
		return 0, &transport.CompactedError{CompactRevision: st.compact}
	}
	// The log names every key written after the compaction point, so it
	// leads to everything to undo.
	i := sort.Search(len(st.log), func(i int) bool { return st.log[i].rev > rev })
	touched := make(map[string]bool)
	for _, e := range st.log[i:] {
		n := st.nss[e.ns]
		touched[e.ns] = true
		for _, key := range e.keys {
			vs := n.keys[key]
			j := sort.Search(len(vs), func(j int) bool { return vs[j].rev > rev })
			if j == 0 {
				delete(n.keys, key)
			} else {
				n.keys[key] = slices.Clip(vs[:j])
			}
		}
	}
	st.log = slices.Clip(st.log[:i])
	for name := range touched {
		n := st.nss[name]
		j := sort.Search(len(n.changes), func(j int) bool { return n.changes[j].CS.Revision > rev })
		// Clipped, as every cut here: a subscription of the lost history
		// may still be reading its backlog from the old array, which the
		// next append must not overwrite.
		n.changes = slices.Clip(n.changes[:j])
		n.rev = n.compactedRev
		if j > 0 {
			n.rev = n.changes[j-1].CS.Revision
		}
		if n.rev == 0 && st.schemas[name] == nil {
			delete(st.nss, name)
			continue
		}
		n.live = contentAt(n, rev)
		n.audit.truncate(rev)
	}
	st.head = rev
	st.gen++
	if st.onReset != nil {
		st.onReset(st.gen)
	}
	return st.gen, nil
}

// Info returns the store id, head and compaction point.
func (st *store) Info() (id string, head, compact int64) {
	st.mu.Lock()
	defer st.mu.Unlock()
	return st.id, st.head, st.compact
}

// NsRevision returns ns's revision and whether it exists.
func (st *store) NsRevision(ns string) (int64, bool) {
	st.mu.Lock()
	defer st.mu.Unlock()
	n := st.nss[ns]
	if n == nil {
		return 0, false
	}
	return n.rev, true
}

// known returns the acks of namespaces that exist, of revisions the
// store has reached, in place, under one lock for the whole batch. An ack
// above the head is of history a restore undid (RestoreTo): a client or
// relay held it past the restore, and it says nothing of what the store
// has now.
func (st *store) Known(acks []transport.Ack) []transport.Ack {
	st.mu.Lock()
	defer st.mu.Unlock()
	return slices.DeleteFunc(acks, func(a transport.Ack) bool { return st.nss[a.Namespace] == nil || a.Revision > st.head })
}

// publishStaged is publish for the rollout controller: it commits only
// while the store is still of generation gen and ns exists, validates the
// result against ns's schema only when check, records meta, and calls pre
// with the revision under the lock, before any reader can see the change.
func (st *store) publishStaged(ns string, gen uint64, puts map[string]json.RawMessage, deletes []string, check bool, meta commitMeta, pre func(rev int64)) (*dataplane.Change, error) {
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.gen != gen {
		return nil, errStoreChanged
	}
	n := st.nss[ns]
	if n == nil {
		return nil, fmt.Errorf("%w: %q", ErrUnknownNamespace, ns)
	}
	if sch := st.schemas[ns]; check && sch != nil {
		if err := validate(ns, sch, apply(n.live, puts, deletes)); err != nil {
			return nil, err
		}
	}
	pre(st.head + 1)
	return st.commitLocked(ns, n, puts, deletes, meta), nil
}

// generation returns the store's generation (reset and restore start a
// new one).
func (st *store) generation() uint64 {
	st.mu.Lock()
	defer st.mu.Unlock()
	return st.gen
}

// checkStaged checks that ns exists and that its content with puts and
// deletes applied passes its schema; it returns the store's generation.
func (st *store) checkStaged(ns string, puts map[string]json.RawMessage, deletes []string) (uint64, error) {
	st.mu.Lock()
	n := st.nss[ns]
	if n == nil {
		st.mu.Unlock()
		return 0, fmt.Errorf("%w: %q", ErrUnknownNamespace, ns)
	}
	sch, live, gen := st.schemas[ns], n.live, st.gen
	st.mu.Unlock()
	if sch != nil {
		if err := validate(ns, sch, apply(live, puts, deletes)); err != nil {
			return 0, err
		}
	}
	return gen, nil
}

// Freshness: the origin's data is always current.
func (st *store) Freshness(...string) (time.Duration, bool) { return 0, false }

// Demand: the origin serves what it has.
func (st *store) Demand(context.Context, []dataplane.SinceReq) map[string]error { return nil }

// nsWrite is one namespace's part of a commit of several (checked puts
// and deletes).
type nsWrite struct {
	ns      string
	puts    map[string]json.RawMessage
	deletes []string
	meta    commitMeta
	ifRev   int64
	// schema, when set, is the namespace's new schema, installed with
	// the commit and checked in the old one's stead; dropSchema drops it.
	schema     *checker
	dropSchema bool
}

// commitMany commits ws as one revision, which it returns, each
// namespace only if it is at its ifRev and its content passes its
// schema; else nothing (a *ConflictError, a *SchemaError). Under the
// lock: a change of several namespaces is rare and small. pre runs
// under the lock once the conditions hold, before anything commits: its
// error fails the whole.
func (st *store) commitMany(ws []nsWrite, pre func() error) (int64, map[string]int64, error) {
	st.mu.Lock()
	defer st.mu.Unlock()
	for _, w := range ws {
		n := st.nss[w.ns]
		if err := checkRevision(w.ns, n, &w.ifRev); err != nil {
			return 0, nil, err
		}
		sch := st.schemas[w.ns]
		switch {
		case w.schema != nil:
			sch = w.schema
		case w.dropSchema:
			sch = nil
		}
		if sch != nil {
			var live map[string]json.RawMessage
			if n != nil {
				live = n.live
			}
			if err := validate(w.ns, sch, apply(live, w.puts, w.deletes)); err != nil {
				return 0, nil, err
			}
		}
	}
	if err := pre(); err != nil {
		return 0, nil, err
	}
	for _, w := range ws {
		switch {
		case w.schema != nil:
			st.schemas[w.ns] = w.schema
		case w.dropSchema:
			delete(st.schemas, w.ns)
		}
	}
	rev := st.head + 1
	revs := make(map[string]int64, len(ws))
	for _, w := range ws {
		st.commitAtLocked(w.ns, st.nss[w.ns], w.puts, w.deletes, w.meta, rev)
		revs[w.ns] = rev
	}
	return rev, revs, nil
}
