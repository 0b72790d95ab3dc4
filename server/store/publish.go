package store

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/holdfast-dev/holdfast/controlapi"
	"github.com/holdfast-dev/holdfast/schema"
	"github.com/holdfast-dev/holdfast/transport"
	"github.com/holdfast-dev/holdfast/transport/etcd"
)

// PublishOption configures one Publish or Rollback.
type PublishOption interface{ applyPublish(*publishOptions) }

type publishOptionFunc func(*publishOptions)

func (f publishOptionFunc) applyPublish(o *publishOptions) { f(o) }

type publishOptions struct {
	schema     *schema.Schema
	actor      string
	onBehalfOf string
	reason     string
	ifRevision int64
	hasIf      bool
	guards     []guard
	conds      []clientv3.Cmp
	ops        []clientv3.Op
	change     string
	// Set by Rollback, not by an option.
	kind       string
	rollbackOf int64
}

// guard is a key that must still be at a ModRevision for a publish to
// commit.
type guard struct {
	key    string
	modRev int64
}

// ErrGuardChanged is returned by a publish whose WithGuard key changed
// after the caller read it: nothing was written; read it again and retry.
var ErrGuardChanged = errors.New("etcd: a guarded key changed")

// WithGuard makes the publish commit only if key is still at ModRevision
// modRev (0: it does not exist), in the same transaction: holdfast server
// guards a publish with the revision of the schema it checked it against,
// so that a schema set meanwhile is never bypassed. Else the publish
// returns ErrGuardChanged and writes nothing.
func WithGuard(key string, modRev int64) PublishOption {
	return publishOptionFunc(func(o *publishOptions) { o.guards = append(o.guards, guard{key, modRev}) })
}

// ErrConditionFailed is returned by a publish whose WithCondition
// comparisons did not hold: nothing was written.
var ErrConditionFailed = errors.New("etcd: a publish's condition did not hold")

// WithCondition makes the publish commit only if cmps hold, in the same
// transaction (holdfast server's rollout controller: "the rollout's state
// is still at the version read, and this server still leads"). Else it
// returns ErrConditionFailed and writes nothing.
func WithCondition(cmps ...clientv3.Cmp) PublishOption {
	return publishOptionFunc(func(o *publishOptions) { o.conds = append(o.conds, cmps...) })
}

// WithOps adds ops to the publish's transaction: writes outside the
// namespace's keys that commit with it or not at all (a rollout's state).
// An op on a key of a namespace (under etcd.KeyRoot) or of the audit log
// makes the publish fail with ErrInvalidArgument.
func WithOps(ops ...clientv3.Op) PublishOption {
	return publishOptionFunc(func(o *publishOptions) { o.ops = append(o.ops, ops...) })
}

// Kinds of a rollout's revisions (WithKind).
const (
	KindRolloutStage   = "rollout-stage"
	KindRolloutPromote = "rollout-promote"
	KindRolloutRevert  = "rollout-revert"
)

// WithKind records the kind of the change in its meta record: KindPublish
// (the default) or one of a rollout's kinds. Any other is
// ErrInvalidArgument.
func WithKind(kind string) PublishOption {
	return publishOptionFunc(func(o *publishOptions) { o.kind = kind })
}

// WithChange records, in the meta record, the id of the change the
// publish commits (with WithKind(KindChange) or KindEmergency).
func WithChange(id string) PublishOption {
	return publishOptionFunc(func(o *publishOptions) { o.change = id })
}

// WithSchema checks the namespace's whole content after the publish
// against s before writing: a publish that fails it writes nothing and
// returns a *schema.ValidationError listing every failure.
func WithSchema(s *schema.Schema) PublishOption {
	return publishOptionFunc(func(o *publishOptions) { o.schema = s })
}

// WithActor records who made the change in the namespace's meta record
// (at most MaxActorBytes of UTF-8). Without it, or with "", the actor is
// the etcd user name of the Namespaces' client, if any.
func WithActor(actor string) PublishOption {
	return publishOptionFunc(func(o *publishOptions) { o.actor = actor })
}

// WithOnBehalfOf records whom the actor acted for (at most MaxActorBytes
// of UTF-8): holdfast server records the authenticated identity as the
// actor and the actor a request names here.
func WithOnBehalfOf(name string) PublishOption {
	return publishOptionFunc(func(o *publishOptions) { o.onBehalfOf = name })
}

// WithReason records why the change was made in the namespace's meta
// record (at most MaxReasonBytes of UTF-8).
func WithReason(reason string) PublishOption {
	return publishOptionFunc(func(o *publishOptions) { o.reason = reason })
}

// WithIfRevision makes the publish (or rollback) conditional: it commits
// only if the namespace's current revision (the etcd source's
// Snapshot.Revision) is rev, checked in the same etcd transaction as the
// change. Otherwise nothing changes and the error is a *ConflictError
// with the current revision.
// rev 0 means "the namespace has no key yet". A negative rev is
// ErrInvalidArgument.
func WithIfRevision(rev int64) PublishOption {
	return publishOptionFunc(func(o *publishOptions) { o.ifRevision, o.hasIf = rev, true })
}

// Bounds of the audit fields of a publish.
const (
	MaxActorBytes  = controlapi.MaxActorBytes
	MaxReasonBytes = controlapi.MaxReasonBytes
)

// Kinds of change recorded in a namespace's meta record (HistoryRecord.Kind).
const (
	KindPublish  = "publish"
	KindRollback = "rollback"
	// KindChange is an approved change published (WithChange names it);
	// KindEmergency an emergency publish past a change's approvals.
	KindChange    = "change"
	KindEmergency = "emergency"
	// KindUnaudited is a change written past holdfast (etcdctl, another
	// program): holdfast server's leader records it when it sees it, with
	// the keys and values it wrote and no actor.
	KindUnaudited = "unaudited"
)

// ErrConflict is returned by Publish when a key is both put and deleted.
// (A revision that WithIfRevision did not match is a *ConflictError.)
var ErrConflict = errors.New("etcd: key both put and deleted")

// ErrInvalidArgument is returned for malformed input to Publish, Rollback
// and the history queries: a bad revision, limit, time, actor or reason, a
// value that is not JSON (with schema.ErrInvalidValue), a key both put and
// deleted (with ErrConflict), or a namespace name or key that
// transport.ValidateNamespace or ValidateKey refuses (with
// transport.ErrInvalidNamespace or ErrInvalidKey).
var ErrInvalidArgument = errors.New("etcd: invalid argument")

// ConflictError is returned by a publish or rollback WithIfRevision when
// the namespace was at another revision: nothing changed.
type ConflictError struct {
	Namespace string
	// Revision is the namespace's current revision (0: it has no key).
	Revision int64
	// IfRevision is the revision the caller expected.
	IfRevision int64
}

func (e *ConflictError) Error() string {
	return fmt.Sprintf("etcd: conflict: namespace %q is at revision %d, not %d", e.Namespace, e.Revision, e.IfRevision)
}

// Publish writes puts and deletes of namespace ns in one etcd transaction,
// so they share one revision, which it returns. Deletes of absent keys are
// dropped. Values must be JSON and within the value size limit.
//
// The same transaction writes the namespace's meta key (etcd.Prefix(ns))
// with the namespace's previous revision and the commit time (etcd.Meta):
// the etcd source chains change sets on it. It commits only if no key of
// the namespace changed since Publish read it; when another writer got
// there first, Publish reads again and retries. etcd bounds a
// transaction's operations (--max-txn-ops, default 128: up to 125 keys
// per publish, beside the meta key, the audit record and the index entry;
// the embedded store's EmbeddedMaxTxnOps) and its size
// (--max-request-bytes, default 1.5 MiB; the embedded store's
// EmbeddedMaxRequestBytes): a publish past them writes nothing and is a
// *TxnLimitError or a *RequestTooLargeError.
//
// The meta key also records the audit of the change: kind "publish", the
// actor (WithActor) and reason (WithReason), and the keys put and deleted;
// the same transaction writes it, with the values put, to the audit log
// (AuditRoot), which outlives etcd's compaction: History, ValuesAt and
// Diff read it back. The values count twice against etcd's request size.
// WithIfRevision makes the publish conditional on the namespace's current
// revision.
//
// An error after the transaction was sent (a timeout, a member lost
// mid-request) leaves it unknown whether it committed: read back before
// publishing again.
func (s *Namespaces) Publish(ctx context.Context, ns string, puts map[string]json.RawMessage, deletes []string, opts ...PublishOption) (int64, error) {
	if err := transport.ValidateNamespace(ns); err != nil {
		return 0, fmt.Errorf("%w: %w", ErrInvalidArgument, err)
	}
	for k, v := range puts {
		if err := transport.ValidateKey(k); err != nil {
			return 0, fmt.Errorf("%w: %w", ErrInvalidArgument, err)
		}
		if len(v) > s.maxValueBytes {
			return 0, fmt.Errorf("%w: %q holds %d bytes (limit %d)", transport.ErrTooLarge, k, len(v), s.maxValueBytes)
		}
		if !json.Valid(v) {
			return 0, fmt.Errorf("etcd: publish to %q: %w: %w: %q is not JSON", ns, ErrInvalidArgument, schema.ErrInvalidValue, k)
		}
	}
	for _, k := range deletes {
		if err := transport.ValidateKey(k); err != nil {
			return 0, fmt.Errorf("%w: %w", ErrInvalidArgument, err)
		}
		if _, ok := puts[k]; ok {
			return 0, fmt.Errorf("%w: %w: %q", ErrInvalidArgument, ErrConflict, k)
		}
	}
	return s.publish(ctx, ns, opts, func(map[string]json.RawMessage) (map[string]json.RawMessage, []string, error) {
		return puts, deletes, nil
	})
}

// Rollback republishes the namespace's content as of revision toRevision
// as a new revision, which it returns: keys that differ are put, keys that
// did not exist then are deleted; keys reserved to holdfast ("$holdfast/…",
// such as a staged rollout) are left as they are. History stays
// append-only. The content then is read as ValuesAt reads it (etcd's
// revisions, then the audit log): a revision neither holds gives a
// *transport.CompactedError; one at which the namespace had no key, or
// beyond the cluster's head, gives transport.ErrNotFound; one below 1,
// ErrInvalidArgument.
//
// The meta record says kind "rollback", and rollback_of the namespace's
// revision at toRevision (its last change at or before it), with the
// actor and reason of the options. WithIfRevision applies as in Publish.
func (s *Namespaces) Rollback(ctx context.Context, ns string, toRevision int64, opts ...PublishOption) (int64, error) {
	if err := transport.ValidateNamespace(ns); err != nil {
		return 0, fmt.Errorf("%w: %w", ErrInvalidArgument, err)
	}
	if toRevision <= 0 {
		return 0, fmt.Errorf("etcd: rollback of %q to revision %d: %w: not a revision", ns, toRevision, ErrInvalidArgument)
	}
	if err := s.enter(); err != nil {
		return 0, err
	}
	// The content then: from etcd's revisions, or past its compaction
	// point from the audit log.
	v, err := s.valuesAt(ctx, "rollback", ns, toRevision)
	s.calls.Done()
	if err != nil {
		return 0, err
	}
	target, of := v.Values, v.Revision
	opts = append(opts, publishOptionFunc(func(o *publishOptions) { o.kind, o.rollbackOf = KindRollback, of }))
	return s.publish(ctx, ns, opts, func(current map[string]json.RawMessage) (map[string]json.RawMessage, []string, error) {
		puts := make(map[string]json.RawMessage)
		for k, v := range target {
			if cur, ok := current[k]; !reserved(k) && (!ok || string(cur) != string(v)) {
				puts[k] = v
			}
		}
		var deletes []string
		for k := range current {
			if _, ok := target[k]; !ok && !reserved(k) {
				deletes = append(deletes, k)
			}
		}
		return puts, deletes, nil
	})
}

// compactRevision asks etcd for its compaction point: a watch from
// revision 1 is refused with it. Zero when it cannot tell.
func (s *Namespaces) compactRevision(ctx context.Context, ns string) int64 {
	ctx, cancel := context.WithTimeout(ctx, s.requestTimeout)
	defer cancel()
	for resp := range s.cli.Watch(ctx, etcd.Prefix(ns), clientv3.WithRev(1)) {
		if resp.CompactRevision != 0 || resp.Err() != nil {
			cancel()
			return resp.CompactRevision
		}
		cancel()
	}
	return 0
}

// publish reads the namespace, lets change decide the puts and deletes
// against its current content, and commits them with the meta key in one
// transaction guarded by "no key of the namespace changed since the read";
// it retries when the guard fails.
func (s *Namespaces) publish(ctx context.Context, ns string, opts []PublishOption, change func(current map[string]json.RawMessage) (map[string]json.RawMessage, []string, error)) (int64, error) {
	po := publishOptions{kind: KindPublish}
	for _, o := range opts {
		if o != nil {
			o.applyPublish(&po)
		}
	}
	if err := po.validate(); err != nil {
		return 0, fmt.Errorf("etcd: publish to %q: %w", ns, err)
	}
	if po.actor == "" {
		po.actor = s.cli.Username // the authenticated identity, if any
	}
	if err := s.enter(); err != nil {
		return 0, err
	}
	defer s.calls.Done()
	prefix := etcd.Prefix(ns)
	for attempt := 0; ; attempt++ {
		if err := ctx.Err(); err != nil {
			return 0, err
		}
		rev, retry, err := s.publishOnce(ctx, ns, prefix, &po, change)
		if !retry {
			return rev, err
		}
		s.log.Debug("etcd: publish raced another writer; retrying", "ns", ns, "attempt", attempt)
	}
}

func (s *Namespaces) publishOnce(ctx context.Context, ns, prefix string, po *publishOptions, change func(map[string]json.RawMessage) (map[string]json.RawMessage, []string, error)) (rev int64, retry bool, err error) {
	ctx, cancel := s.requestCtx(ctx)
	defer cancel()
	cmps, ops, keys, err := s.prepare(ctx, ns, prefix, po, change)
	if err != nil {
		return 0, false, err
	}
	cmps = append(cmps, po.conds...)
	ops = append(ops, po.ops...)
	tr, err := s.commit(ctx, ns, cmps, ops, keys)
	if err != nil {
		return 0, false, err
	}
	if !tr.Succeeded {
		if err := s.failed(ctx, ns, po.conds, po.guards); err != nil {
			return 0, false, err
		}
		return 0, true, nil
	}
	return tr.Header.Revision, false, nil
}

// commit sends a publish's transaction of keys keys: one past the
// store's operation limit, known or learnt from etcd's refusal, is a
// *TxnLimitError, one past its request size a *RequestTooLargeError.
func (s *Namespaces) commit(ctx context.Context, ns string, cmps []clientv3.Cmp, ops []clientv3.Op, keys int) (*clientv3.TxnResponse, error) {
	if limit := int(s.maxTxnOps.Load()); limit > 0 && len(ops) > limit {
		return nil, &TxnLimitError{Namespace: ns, Keys: keys, Ops: len(ops), MaxOps: limit, MaxKeys: max(0, limit-(len(ops)-keys)), Embedded: s.embedded}
	}
	tr, err := s.cli.Txn(ctx).If(cmps...).Then(ops...).Commit()
	switch {
	case errors.Is(err, rpctypes.ErrTooManyOps):
		return nil, s.learnTxnLimit(ctx, ns, keys, len(ops))
	case requestTooLarge(err):
		return nil, &RequestTooLargeError{Namespace: ns, Keys: keys, Err: err}
	case err != nil:
		return nil, etcd.MapError("publish", ns, err)
	}
	return tr, nil
}

// prepare reads namespace ns, lets change decide the puts and deletes
// against its content, and returns the comparisons and the operations
// of their commit: the keys, the meta key and the audit record, guarded
// by "no key of the namespace changed since the read" and po's guards
// (po's conditions and ops left to the caller).
func (s *Namespaces) prepare(ctx context.Context, ns, prefix string, po *publishOptions, change func(map[string]json.RawMessage) (map[string]json.RawMessage, []string, error)) (cmps []clientv3.Cmp, ops []clientv3.Op, keys int, err error) {
	resp, err := s.cli.Get(ctx, prefix, clientv3.WithPrefix())
	if err != nil {
		return nil, nil, 0, etcd.MapError("publish", ns, err)
	}
	head := resp.Header.Revision
	current, prev := content(prefix, resp.Kvs)
	if po.hasIf && prev != po.ifRevision {
		return nil, nil, 0, &ConflictError{Namespace: ns, Revision: prev, IfRevision: po.ifRevision}
	}
	puts, deletes, err := change(current)
	if err != nil {
		return nil, nil, 0, err
	}
	next := maps.Clone(current)
	ops = make([]clientv3.Op, 0, len(puts)+len(deletes)+3)
	m := meta{
		Meta: etcd.Meta{PrevRevision: prev}, Actor: po.actor, OnBehalfOf: po.onBehalfOf, Reason: po.reason, Kind: po.kind, RollbackOf: po.rollbackOf, Change: po.change,
		Puts: []string{}, Deletes: []string{},
	}
	written := make(map[string]json.RawMessage, len(puts)) // the values as stored, for the audit record
	for k, v := range puts {
		// Compact: the audit record holds the value as encoding/json
		// writes a RawMessage (compacted), and both must be the same bytes.
		var buf bytes.Buffer
		if err := json.Compact(&buf, v); err != nil {
			return nil, nil, 0, fmt.Errorf("etcd: publish to %q: %w: %w: %q is not JSON", ns, ErrInvalidArgument, schema.ErrInvalidValue, k)
		}
		v = buf.Bytes()
		written[k] = v
		ops = append(ops, clientv3.OpPut(prefix+k, string(v)))
		next[k] = v
		m.Puts = append(m.Puts, k)
	}
	for _, k := range deletes {
		if _, ok := current[k]; ok {
			ops = append(ops, clientv3.OpDelete(prefix+k))
			delete(next, k)
			m.Deletes = append(m.Deletes, k)
		}
	}
	slices.Sort(m.Puts)
	slices.Sort(m.Deletes)
	if po.schema != nil {
		if err := po.schema.ValidateValues(next); err != nil {
			return nil, nil, 0, fmt.Errorf("etcd: publish to %q: %w", ns, err)
		}
	}
	m.CommittedAt = time.Now().UTC()
	mb, err := json.Marshal(m)
	if err != nil {
		return nil, nil, 0, err
	}
	ops = append(ops, clientv3.OpPut(prefix, string(mb)))
	ab, err := encodeAudit(auditEntry{meta: m, Values: written})
	if err != nil {
		return nil, nil, 0, err
	}
	ops = append(ops, clientv3.OpPut(auditKey(ns, head), string(ab)))
	iop, err := indexOp(ns, m, 0) // its revision: the key's ModRevision
	if err != nil {
		return nil, nil, 0, err
	}
	ops = append(ops, iop)
	// The guard "no key of the namespace changed since the read" is also
	// WithIfRevision's compare: the read found the namespace at prev.
	cmps = []clientv3.Cmp{clientv3.Compare(clientv3.ModRevision(prefix).WithPrefix(), "<", head+1)}
	for _, g := range po.guards {
		cmps = append(cmps, clientv3.Compare(clientv3.ModRevision(g.key), "=", g.modRev))
	}
	return cmps, ops, len(m.Puts) + len(m.Deletes), nil
}

// failed says why a publish's transaction did not commit: its conditions
// did not hold (ErrConditionFailed), a guard moved (ErrGuardChanged), or
// neither (nil: another writer changed the namespace; read again).
func (s *Namespaces) failed(ctx context.Context, ns string, conds []clientv3.Cmp, guards []guard) error {
	if len(conds) > 0 {
		held, err := s.cli.Txn(ctx).If(conds...).Commit()
		if err != nil {
			return etcd.MapError("publish", ns, err)
		}
		if !held.Succeeded {
			return fmt.Errorf("etcd: publish to %q: %w", ns, ErrConditionFailed)
		}
	}
	for _, g := range guards {
		resp, err := s.cli.Get(ctx, g.key, clientv3.WithKeysOnly())
		if err != nil {
			return etcd.MapError("publish", ns, err)
		}
		var at int64 // 0: the key is absent
		if len(resp.Kvs) > 0 {
			at = resp.Kvs[0].ModRevision
		}
		if at != g.modRev {
			return fmt.Errorf("etcd: publish to %q: %w: %s is at revision %d, not %d", ns, ErrGuardChanged, g.key, at, g.modRev)
		}
	}
	return nil
}

func (o *publishOptions) validate() error {
	switch {
	case len(o.actor) > MaxActorBytes || !utf8.ValidString(o.actor):
		return fmt.Errorf("%w: actor must be at most %d bytes of UTF-8", ErrInvalidArgument, MaxActorBytes)
	case len(o.onBehalfOf) > MaxActorBytes || !utf8.ValidString(o.onBehalfOf):
		return fmt.Errorf("%w: on-behalf-of must be at most %d bytes of UTF-8", ErrInvalidArgument, MaxActorBytes)
	case len(o.reason) > MaxReasonBytes || !utf8.ValidString(o.reason):
		return fmt.Errorf("%w: reason must be at most %d bytes of UTF-8", ErrInvalidArgument, MaxReasonBytes)
	case o.hasIf && o.ifRevision < 0:
		return fmt.Errorf("%w: if_revision %d is negative", ErrInvalidArgument, o.ifRevision)
	}
	switch o.kind {
	case KindPublish, KindRollback, KindRolloutStage, KindRolloutPromote, KindRolloutRevert, KindChange, KindEmergency:
	default:
		return fmt.Errorf("%w: kind %q", ErrInvalidArgument, o.kind)
	}
	for _, op := range o.ops {
		k := string(op.KeyBytes())
		if strings.HasPrefix(k, etcd.KeyRoot) || strings.HasPrefix(k, AuditRoot) || strings.HasPrefix(k, AuditBaseRoot) || strings.HasPrefix(k, IndexRoot) {
			return fmt.Errorf("%w: an op on %q, a key holdfast's publish owns", ErrInvalidArgument, k)
		}
	}
	return nil
}

// NamespaceWrite is one namespace's part of PublishMany: its puts and
// deletes, and its options (actor, reason, kind, change, if-revision,
// guards, schema).
type NamespaceWrite struct {
	Namespace string
	Puts      map[string]json.RawMessage
	Deletes   []string
	Options   []PublishOption
}

// PublishMany commits the writes of several namespaces in one etcd
// transaction, so they share one revision, which it returns: each
// namespace as Publish commits it (its meta key, its audit record, its
// options' conditions), with opts' conditions and ops (WithCondition,
// WithOps) once for the whole. Nothing is written unless every condition
// holds: a namespace not at its WithIfRevision is a *ConflictError, a
// guard moved ErrGuardChanged, opts' conditions ErrConditionFailed. It
// lives within etcd's transaction limits (--max-txn-ops, default 128:
// the keys of every namespace, plus two per namespace and opts' ops; and
// --max-request-bytes).
func (s *Namespaces) PublishMany(ctx context.Context, ws []NamespaceWrite, opts ...PublishOption) (int64, error) {
	var shared publishOptions
	for _, o := range opts {
		if o != nil {
			o.applyPublish(&shared)
		}
	}
	shared.kind = KindPublish
	if err := shared.validate(); err != nil {
		return 0, fmt.Errorf("etcd: publish: %w", err)
	}
	type part struct {
		ns, prefix string
		po         publishOptions
		change     func(map[string]json.RawMessage) (map[string]json.RawMessage, []string, error)
	}
	parts := make([]part, 0, len(ws))
	seen := make(map[string]bool, len(ws))
	for _, w := range ws {
		if err := transport.ValidateNamespace(w.Namespace); err != nil {
			return 0, fmt.Errorf("%w: %w", ErrInvalidArgument, err)
		}
		if seen[w.Namespace] {
			return 0, fmt.Errorf("%w: namespace %q written twice", ErrInvalidArgument, w.Namespace)
		}
		seen[w.Namespace] = true
		for k, v := range w.Puts {
			if err := transport.ValidateKey(k); err != nil {
				return 0, fmt.Errorf("%w: %w", ErrInvalidArgument, err)
			}
			if len(v) > s.maxValueBytes {
				return 0, fmt.Errorf("%w: %q holds %d bytes (limit %d)", transport.ErrTooLarge, k, len(v), s.maxValueBytes)
			}
		}
		for _, k := range w.Deletes {
			if err := transport.ValidateKey(k); err != nil {
				return 0, fmt.Errorf("%w: %w", ErrInvalidArgument, err)
			}
			if _, ok := w.Puts[k]; ok {
				return 0, fmt.Errorf("%w: %w: %q", ErrInvalidArgument, ErrConflict, k)
			}
		}
		po := publishOptions{kind: KindPublish}
		for _, o := range w.Options {
			if o != nil {
				o.applyPublish(&po)
			}
		}
		if err := po.validate(); err != nil {
			return 0, fmt.Errorf("etcd: publish to %q: %w", w.Namespace, err)
		}
		if len(po.conds) > 0 || len(po.ops) > 0 {
			return 0, fmt.Errorf("%w: a namespace's conditions and ops go in PublishMany's own options", ErrInvalidArgument)
		}
		if po.actor == "" {
			po.actor = s.cli.Username
		}
		puts, deletes := w.Puts, w.Deletes
		parts = append(parts, part{ns: w.Namespace, prefix: etcd.Prefix(w.Namespace), po: po,
			change: func(map[string]json.RawMessage) (map[string]json.RawMessage, []string, error) {
				return puts, deletes, nil
			}})
	}
	if len(parts) == 0 {
		return 0, fmt.Errorf("%w: no namespace to publish", ErrInvalidArgument)
	}
	if err := s.enter(); err != nil {
		return 0, err
	}
	defer s.calls.Done()
	for attempt := 0; ; attempt++ {
		if err := ctx.Err(); err != nil {
			return 0, err
		}
		rev, retry, err := func() (int64, bool, error) {
			ctx, cancel := s.requestCtx(ctx)
			defer cancel()
			var cmps []clientv3.Cmp
			var ops []clientv3.Op
			var guards []guard
			keys := 0
			for i := range parts {
				p := &parts[i]
				c, o, n, err := s.prepare(ctx, p.ns, p.prefix, &p.po, p.change)
				if err != nil {
					return 0, false, err
				}
				cmps, ops, guards = append(cmps, c...), append(ops, o...), append(guards, p.po.guards...)
				keys += n
			}
			cmps = append(cmps, shared.conds...)
			ops = append(ops, shared.ops...)
			tr, err := s.commit(ctx, parts[0].ns, cmps, ops, keys)
			if err != nil {
				return 0, false, err
			}
			if !tr.Succeeded {
				if err := s.failed(ctx, parts[0].ns, shared.conds, guards); err != nil {
					return 0, false, err
				}
				return 0, true, nil
			}
			return tr.Header.Revision, false, nil
		}()
		if !retry {
			return rev, err
		}
		s.log.Debug("etcd: publish of several namespaces raced another writer; retrying", "attempt", attempt)
	}
}

// learnTxnLimit is the error of a publish of keys etcd refused for its
// ops operations: it probes the store's limit (ProbeMaxTxnOps), which
// later publishes are checked against before they are sent, and names it.
func (s *Namespaces) learnTxnLimit(ctx context.Context, ns string, keys, ops int) error {
	e := &TxnLimitError{Namespace: ns, Keys: keys, Ops: ops}
	limit, err := ProbeMaxTxnOps(ctx, s.cli)
	if err != nil || limit >= ops {
		s.log.Warn("store: etcd refused a publish for its operations, and its limit (--max-txn-ops) could not be probed", "ns", ns, "ops", ops, "err", err)
		return e
	}
	s.maxTxnOps.Store(int64(limit))
	s.log.Info("store: etcd takes at most this many operations in a transaction (its --max-txn-ops), learnt from a publish it refused", "max_txn_ops", limit, "max_keys_per_publish", limit-PublishOverheadOps)
	e.MaxOps, e.MaxKeys = limit, max(0, limit-(ops-keys))
	return e
}
