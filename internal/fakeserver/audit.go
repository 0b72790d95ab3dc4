package fakeserver

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/holdfast-dev/holdfast/controlapi"
	"github.com/holdfast-dev/holdfast/internal/controlplane"
	"github.com/holdfast-dev/holdfast/transport"
)

// Kinds of commit, in AuditRecord.Kind.
const (
	KindPublish        = "publish"
	KindRollback       = "rollback"
	KindRolloutStage   = "rollout-stage"
	KindRolloutPromote = "rollout-promote"
	KindRolloutRevert  = "rollout-revert"
)

// Limits of the audit.
const (
	// MaxActorBytes and MaxReasonBytes bound a commit's actor and reason,
	// as holdfast server's.
	MaxActorBytes  = controlplane.MaxActorBytes
	MaxReasonBytes = controlplane.MaxReasonBytes
	// DefaultHistoryLimit and MaxHistoryLimit: the revisions of one
	// History page when none is asked for, and at most.
	DefaultHistoryLimit = 100
	MaxHistoryLimit     = 1000
	// DefaultAuditRecords is how many audit records of a namespace are
	// kept at least: older ones go only once their values are compacted
	// too, so that every revision whose values are kept has its record.
	DefaultAuditRecords = 100_000
)

// ErrNoRevision: the namespace has no revision at the revision or time
// asked for: before its first, or above the head or in the future (HTTP
// 404).
var ErrNoRevision = errors.New("fakeserver: no such revision")

// ConflictError is a publish whose IfRevision is not the namespace's
// revision (HTTP 409 conflict). Nothing was committed.
type ConflictError = controlplane.ConflictError

// commitMeta is what a commit's audit record says beyond its change set.
type commitMeta struct {
	Actor, Reason string
	OnBehalfOf    string // whom an authenticated actor acted for
	Kind          string // Kind*; "" is KindPublish
	RollbackOf    int64  // a rollback's target revision
	Change        string // the change a commit of kind change or emergency published
}

// AuditRecord is the record of one committed revision of a namespace: who
// committed it, why, and which keys it put and deleted (sorted; keys
// reserved to holdfast included). It is one entry of GET
// /control/namespaces/{ns}/history. Compaction drops values, not records.
type AuditRecord = controlapi.AuditRecord

// History is a page of a namespace's audit records, newest first: the
// reply of GET /control/namespaces/{ns}/history.
type History = controlapi.History

// NamespaceValues is a namespace's content as of a revision or time: the
// reply of GET /control/namespaces/{ns}/values.
type NamespaceValues = controlapi.NamespaceValues

// Diff is what changed in a namespace between two revisions: the reply of
// GET /control/namespaces/{ns}/diff. From and To are the namespace's
// revisions live at the two revisions asked for.
type Diff = controlapi.Diff

// KeyChange is one key of a Diff: Old absent (nil) for a key added, New
// for a key deleted.
type KeyChange = controlapi.KeyChange

// PublishOptions are what PublishWith records and checks.
type PublishOptions struct {
	Actor  string // at most MaxActorBytes, no control characters
	Reason string // at most MaxReasonBytes, no control characters
	// OnBehalfOf is whom Actor acted for (as Actor's bounds): the control
	// API records the authenticated token as Actor, and the actor a
	// request names here.
	OnBehalfOf string
	// IfRevision, when not nil, commits only if the namespace's revision
	// is *IfRevision (0: it has none), else a *ConflictError.
	IfRevision *int64
	// AbortRollout reverts the rollout running on the namespace, if any,
	// before the publish; without it, a publish during a rollout fails
	// with ErrRolloutRunning.
	AbortRollout bool
	// kind and change, set by the control API only, are the audit
	// record's kind (the change workflow's) and change id.
	kind, change string
}

// RollbackOptions are what RollbackWith records.
type RollbackOptions struct {
	Actor, Reason string // as in PublishOptions
}

// auditLog is a namespace's audit records.
type auditLog struct {
	recs []AuditRecord // oldest first
	// first and firstAt are the namespace's first revision and its commit
	// time (0: none): kept when the records are trimmed, so that a time
	// before them is told from one beyond the history kept.
	first   int64
	firstAt time.Time
}

// truncate drops the records above rev (a restore).
func (a *auditLog) truncate(rev int64) {
	i := sort.Search(len(a.recs), func(i int) bool { return a.recs[i].Revision > rev })
	a.recs = slices.Clip(a.recs[:i])
	if a.first > rev {
		a.first, a.firstAt = 0, time.Time{}
	}
}

// recordLocked appends the audit record of cs, just committed to n.
func (st *store) recordLocked(n *namespace, cs *transport.ChangeSet, meta commitMeta) {
	kind := meta.Kind
	if kind == "" {
		kind = KindPublish
	}
	n.audit.recs = append(n.audit.recs, AuditRecord{
		Revision: cs.Revision, PrevRevision: cs.PrevRevision, CommittedAt: cs.CommittedAt,
		Actor: meta.Actor, OnBehalfOf: meta.OnBehalfOf, Reason: meta.Reason, Kind: kind, RollbackOf: meta.RollbackOf, Change: meta.Change,
		Puts: slices.Sorted(maps.Keys(cs.Puts)), Deletes: cs.Deletes, // cs.Deletes is sorted, and never changes
	})
	if n.audit.first == 0 {
		n.audit.first, n.audit.firstAt = cs.Revision, cs.CommittedAt
	}
	st.trimAuditLocked(n)
}

// trimAuditLocked bounds n's records to st.auditMax, dropping the oldest,
// but only those that no read of values needs: a record goes when the
// next one is at or below the compaction point.
func (st *store) trimAuditLocked(n *namespace) {
	recs := n.audit.recs
	drop := 0
	for len(recs)-drop > max(st.auditMax, 1) && recs[drop+1].Revision <= st.compact {
		drop++
	}
	// Not cloned: append copies the records kept when it next grows the
	// array, so that a trim per commit costs no copy of them all.
	n.audit.recs = recs[drop:]
}

// checkRevision checks a publish's IfRevision against n (nil: no such
// namespace yet, revision 0).
func checkRevision(ns string, n *namespace, ifRev *int64) error {
	if ifRev == nil {
		return nil
	}
	var cur int64
	if n != nil {
		cur = n.rev
	}
	if cur != *ifRev {
		return &ConflictError{Namespace: ns, Revision: cur, IfRevision: *ifRev}
	}
	return nil
}

// history returns up to limit of ns's records below revision before (0:
// no bound), newest first.
func (st *store) history(ns string, limit int, before int64) (*History, error) {
	st.mu.Lock()
	defer st.mu.Unlock()
	n := st.nss[ns]
	if n == nil {
		return nil, fmt.Errorf("%w: %q", ErrUnknownNamespace, ns)
	}
	recs := n.audit.recs
	i := len(recs)
	if before > 0 {
		i = sort.Search(len(recs), func(i int) bool { return recs[i].Revision >= before })
	}
	h := &History{Namespace: ns, Revisions: make([]AuditRecord, 0, min(limit, i))}
	for j := i - 1; j >= 0 && len(h.Revisions) < limit; j-- {
		r := recs[j]
		r.Puts, r.Deletes = append([]string{}, r.Puts...), append([]string{}, r.Deletes...)
		h.Revisions = append(h.Revisions, r)
	}
	return h, nil
}

// point is a revision or a time, the two ways to name a namespace's past.
type point struct {
	rev    int64
	at     time.Time
	byTime bool
}

func (p point) String() string {
	if p.byTime {
		return p.at.Format(time.RFC3339Nano)
	}
	return "revision " + strconv.FormatInt(p.rev, 10)
}

// liveAtLocked returns the record of n's revision live at p and a store
// revision, not below the compaction point, whose content is that
// revision's. It fails with ErrNoRevision (p before n's first revision,
// or above the head or in the future) or a *transport.CompactedError (the
// content live then was replaced at or below the compaction point).
func (st *store) liveAtLocked(ns string, n *namespace, p point) (AuditRecord, int64, error) {
	a := &n.audit
	recs := a.recs
	var i int // the first record after p
	if p.byTime {
		if now := st.now(); p.at.After(now) && p.at.After(st.lastAt) {
			return AuditRecord{}, 0, fmt.Errorf("%w: %s is in the future", ErrNoRevision, p)
		}
		if a.first == 0 || p.at.Before(a.firstAt) {
			return AuditRecord{}, 0, fmt.Errorf("%w: namespace %q has no revision committed at or before %s", ErrNoRevision, ns, p)
		}
		i = sort.Search(len(recs), func(i int) bool { return recs[i].CommittedAt.After(p.at) })
	} else {
		if p.rev > st.head {
			return AuditRecord{}, 0, fmt.Errorf("%w: revision %d is above the head %d", ErrNoRevision, p.rev, st.head)
		}
		if a.first == 0 || p.rev < a.first {
			return AuditRecord{}, 0, fmt.Errorf("%w: namespace %q has no revision at or before %d", ErrNoRevision, ns, p.rev)
		}
		i = sort.Search(len(recs), func(i int) bool { return recs[i].Revision > p.rev })
	}
	// The content of record i-1 is live until record i: compacted if
	// that is at or below the compaction point (or i-1 was trimmed).
	if i == 0 || i < len(recs) && recs[i].Revision <= st.compact {
		return AuditRecord{}, 0, &transport.CompactedError{CompactRevision: st.compact}
	}
	r := recs[i-1]
	return r, max(r.Revision, st.compact), nil
}

// valuesAt returns ns's content live at p.
func (st *store) valuesAt(ns string, p point) (*NamespaceValues, error) {
	st.mu.Lock()
	defer st.mu.Unlock()
	n := st.nss[ns]
	if n == nil {
		return nil, fmt.Errorf("%w: %q", ErrUnknownNamespace, ns)
	}
	r, at, err := st.liveAtLocked(ns, n, p)
	if err != nil {
		return nil, err
	}
	return &NamespaceValues{Namespace: ns, Revision: r.Revision, CommittedAt: r.CommittedAt, Values: withoutReserved(contentAt(n, at))}, nil
}

// diff returns what changed in ns from revision from to revision to.
func (st *store) diff(ns string, from, to int64) (*Diff, error) {
	st.mu.Lock()
	defer st.mu.Unlock()
	n := st.nss[ns]
	if n == nil {
		return nil, fmt.Errorf("%w: %q", ErrUnknownNamespace, ns)
	}
	rf, atFrom, err := st.liveAtLocked(ns, n, point{rev: from})
	if err != nil {
		return nil, fmt.Errorf("from: %w", err)
	}
	rt, atTo, err := st.liveAtLocked(ns, n, point{rev: to})
	if err != nil {
		return nil, fmt.Errorf("to: %w", err)
	}
	old, cur := withoutReserved(contentAt(n, atFrom)), withoutReserved(contentAt(n, atTo))
	d := &Diff{Namespace: ns, From: rf.Revision, To: rt.Revision, Changes: []KeyChange{}}
	for k, v := range old {
		if w, ok := cur[k]; !ok || string(w) != string(v) {
			d.Changes = append(d.Changes, KeyChange{Key: k, Old: v, New: w})
		}
	}
	for k, w := range cur {
		if _, ok := old[k]; !ok {
			d.Changes = append(d.Changes, KeyChange{Key: k, New: w})
		}
	}
	slices.SortFunc(d.Changes, func(a, b KeyChange) int { return strings.Compare(a.Key, b.Key) })
	return d, nil
}

// checkMeta checks an actor and a reason as the control API does.
func checkMeta(actor, reason string) error {
	if err := controlplane.CheckText("actor", actor, MaxActorBytes); err != nil {
		return err
	}
	return controlplane.CheckText("reason", reason, MaxReasonBytes)
}

// PublishWith is Publish with an actor and a reason, recorded in the
// revision's audit record, and an optional IfRevision, checked atomically
// with the commit. Besides Publish's errors it fails with ErrInvalid (an
// actor or reason too long or with control characters, a negative
// IfRevision) or a *ConflictError.
func (s *Server) PublishWith(ns string, puts map[string]any, deletes []string, opts PublishOptions) (int64, error) {
	raw, err := marshalPuts(puts)
	if err != nil {
		return 0, err
	}
	clean, dels, err := checkPublish(ns, raw, deletes)
	if err != nil {
		return 0, err
	}
	if err := checkPublishOptions(opts); err != nil {
		return 0, err
	}
	return s.commit(ns, clean, dels, opts)
}

func checkPublishOptions(opts PublishOptions) error {
	if opts.IfRevision != nil && *opts.IfRevision < 0 {
		return fmt.Errorf("%w: if_revision %d is negative", ErrInvalid, *opts.IfRevision)
	}
	if err := controlplane.CheckText("on_behalf_of", opts.OnBehalfOf, MaxActorBytes); err != nil {
		return err
	}
	return checkMeta(opts.Actor, opts.Reason)
}

// RollbackWith is Rollback with an actor and a reason, recorded in the
// revision's audit record (kind "rollback", rollback_of to).
func (s *Server) RollbackWith(ns string, to int64, opts RollbackOptions) (int64, error) {
	if err := checkMeta(opts.Actor, opts.Reason); err != nil {
		return 0, err
	}
	return s.rollback(ns, to, commitMeta{Actor: opts.Actor, Reason: opts.Reason}, nil)
}

// History returns up to limit (0: DefaultHistoryLimit; at most
// MaxHistoryLimit) of namespace ns's audit records below revision before
// (0: from the newest), newest first. Records outlive compaction. It fails
// with ErrInvalid or ErrUnknownNamespace.
func (s *Server) History(ns string, limit int, before int64) (*History, error) {
	if err := transport.ValidateNamespace(ns); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	if limit == 0 {
		limit = DefaultHistoryLimit
	}
	if limit < 0 || limit > MaxHistoryLimit {
		return nil, fmt.Errorf("%w: limit %d outside 1..%d", ErrInvalid, limit, MaxHistoryLimit)
	}
	if before < 0 {
		return nil, fmt.Errorf("%w: before %d is negative", ErrInvalid, before)
	}
	return s.store.history(ns, limit, before)
}

// ValuesAt returns namespace ns's content live at store revision rev: that
// of its last revision at or below rev (keys reserved to holdfast left
// out). It fails with ErrInvalid, ErrUnknownNamespace, ErrNoRevision (rev
// above the head or before ns's first revision) or a
// *transport.CompactedError (that content was replaced at or below the
// compaction point).
func (s *Server) ValuesAt(ns string, rev int64) (*NamespaceValues, error) {
	if err := transport.ValidateNamespace(ns); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	if rev < 0 {
		return nil, fmt.Errorf("%w: revision %d is negative", ErrInvalid, rev)
	}
	return s.store.valuesAt(ns, point{rev: rev})
}

// ValuesAtTime is ValuesAt for the last revision committed at or before t.
// A t before ns's first revision or after now is ErrNoRevision.
func (s *Server) ValuesAtTime(ns string, t time.Time) (*NamespaceValues, error) {
	if err := transport.ValidateNamespace(ns); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	return s.store.valuesAt(ns, point{at: t, byTime: true})
}

// Diff returns the keys whose values differ between namespace ns's content
// at store revisions from and to (either may be the larger), each as
// ValuesAt reads it, with the same errors.
func (s *Server) Diff(ns string, from, to int64) (*Diff, error) {
	if err := transport.ValidateNamespace(ns); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	if from < 0 || to < 0 {
		return nil, fmt.Errorf("%w: revisions %d and %d: want both >= 0", ErrInvalid, from, to)
	}
	return s.store.diff(ns, from, to)
}
