package store_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/holdfast-dev/holdfast/server/store"
	"github.com/holdfast-dev/holdfast/transport"
	"github.com/holdfast-dev/holdfast/transport/etcd"
)

func auditCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
	t.Cleanup(cancel)
	return ctx
}

func mustJSON(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestAuditHistory: publish and rollback record actor, reason, kind,
// rollback_of and the keys; History returns them newest first, pages with
// limit and before, and has the reference server's JSON form.
func TestAuditHistory(t *testing.T) {
	cl := sharedCluster(t)
	src := newWriter(t, cl.endpoints())
	ctx := auditCtx(t)
	r1, err := src.Publish(ctx, "audit", raw(t, map[string]any{"a": 1, "b": 2}), nil,
		store.WithActor("alice"), store.WithReason("first"))
	if err != nil {
		t.Fatal(err)
	}
	publish(t, src, "audit.other", map[string]any{"x": 1}) // a revision of another namespace in between
	r2, err := src.Publish(ctx, "audit", raw(t, map[string]any{"a": 5, "c": 3}), []string{"b", "absent"},
		store.WithActor("bob"), store.WithReason("second"))
	if err != nil {
		t.Fatal(err)
	}
	r3, err := src.Rollback(ctx, "audit", r1+1, store.WithActor("carol"), store.WithReason("undo"))
	if err != nil {
		t.Fatal(err)
	}
	h, err := src.History(ctx, "audit", store.HistoryOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(h.Revisions) != 3 || h.Namespace != "audit" {
		t.Fatalf("history = %s", mustJSON(t, h))
	}
	want := []store.HistoryRecord{
		{Revision: r3, PrevRevision: r2, Actor: "carol", Reason: "undo", Kind: "rollback", RollbackOf: r1, Puts: []string{"a", "b"}, Deletes: []string{"c"}},
		{Revision: r2, PrevRevision: r1, Actor: "bob", Reason: "second", Kind: "publish", Puts: []string{"a", "c"}, Deletes: []string{"b"}},
		{Revision: r1, PrevRevision: 0, Actor: "alice", Reason: "first", Kind: "publish", Puts: []string{"a", "b"}, Deletes: []string{}},
	}
	for i, got := range h.Revisions {
		if got.CommittedAt.IsZero() || (i > 0 && got.CommittedAt.After(h.Revisions[i-1].CommittedAt)) {
			t.Errorf("record %d committed at %v", i, got.CommittedAt)
		}
		got.CommittedAt = time.Time{}
		if mustJSON(t, got) != mustJSON(t, want[i]) {
			t.Errorf("record %d = %s\nwant %s", i, mustJSON(t, got), mustJSON(t, want[i]))
		}
	}
	// The JSON form, field by field.
	var generic map[string]any
	if err := json.Unmarshal([]byte(mustJSON(t, h)), &generic); err != nil {
		t.Fatal(err)
	}
	// Every field of every record, a publish's rollback_of (0) too.
	for _, r := range generic["revisions"].([]any) {
		rec := r.(map[string]any)
		for _, f := range []string{"revision", "prev_revision", "committed_at", "actor", "reason", "kind", "rollback_of", "puts", "deletes"} {
			if _, ok := rec[f]; !ok {
				t.Errorf("history JSON lacks %q: %v", f, rec)
			}
		}
	}
	if _, ok := generic["ns"]; !ok {
		t.Errorf("history JSON lacks ns")
	}

	page, err := src.History(ctx, "audit", store.HistoryOptions{Limit: 1})
	if err != nil || len(page.Revisions) != 1 || page.Revisions[0].Revision != r3 {
		t.Fatalf("limit 1: %+v, %v", page, err)
	}
	page, err = src.History(ctx, "audit", store.HistoryOptions{Limit: 1, Before: r3})
	if err != nil || len(page.Revisions) != 1 || page.Revisions[0].Revision != r2 {
		t.Fatalf("before %d: %+v, %v", r3, page, err)
	}
	page, err = src.History(ctx, "audit", store.HistoryOptions{Before: r2})
	if err != nil || len(page.Revisions) != 1 || page.Revisions[0].Revision != r1 {
		t.Fatalf("before %d: %+v, %v", r2, page, err)
	}
	page, err = src.History(ctx, "audit", store.HistoryOptions{Before: r1})
	if err != nil || len(page.Revisions) != 0 || string(mustJSON(t, page.Revisions)) != "[]" {
		t.Fatalf("before the first: %+v, %v", page, err)
	}
	page, err = src.History(ctx, "audit", store.HistoryOptions{Before: r3 + 1000}) // beyond the head: all
	if err != nil || len(page.Revisions) != 3 {
		t.Fatalf("before beyond the head: %+v, %v", page, err)
	}
}

// TestIfRevision: a publish WithIfRevision commits only at that revision;
// otherwise a *ConflictError with the current one, and nothing changes.
// Of concurrent publishers with the same if_revision exactly one wins.
func TestIfRevision(t *testing.T) {
	cl := sharedCluster(t)
	src := newWriter(t, cl.endpoints())
	ctx := auditCtx(t)
	r0, err := src.Publish(ctx, "ifrev", raw(t, map[string]any{"a": 1}), nil, store.WithIfRevision(0))
	if err != nil {
		t.Fatalf("if_revision 0 on a new namespace: %v", err)
	}
	_, err = src.Publish(ctx, "ifrev", raw(t, map[string]any{"a": 2}), nil, store.WithIfRevision(r0-1))
	var ce *store.ConflictError
	if !errors.As(err, &ce) || ce.Revision != r0 || ce.Namespace != "ifrev" || ce.IfRevision != r0-1 {
		t.Fatalf("stale if_revision = %v; want a ConflictError at %d", err, r0)
	}
	if _, err := src.Rollback(ctx, "ifrev", r0, store.WithIfRevision(r0+1)); !errors.As(err, &ce) {
		t.Fatalf("rollback with a wrong if_revision = %v", err)
	}
	snap, err := src.Snapshot(ctx, transport.SnapshotRequest{Namespace: "ifrev"})
	if err != nil || snap.Revision != r0 || string(snap.Values) != `{"a":1}` {
		t.Fatalf("after refused publishes: %+v, %v", snap, err)
	}
	if _, err := src.Publish(ctx, "ifrev", nil, nil, store.WithIfRevision(-1)); !errors.Is(err, store.ErrInvalidArgument) {
		t.Errorf("negative if_revision = %v", err)
	}

	// Concurrent publishers, each on a Source (a client) of its own, all
	// at the same if_revision, released at once.
	const n = 6
	srcs := make([]writer, n)
	for i := range srcs {
		srcs[i] = newWriter(t, cl.endpoints())
		if _, err := srcs[i].Snapshot(ctx, transport.SnapshotRequest{Namespace: "ifrev"}); err != nil { // connected
			t.Fatal(err)
		}
	}
	for round := range 5 {
		base, err := src.Snapshot(ctx, transport.SnapshotRequest{Namespace: "ifrev"})
		if err != nil {
			t.Fatal(err)
		}
		start := make(chan struct{})
		revs := make([]int64, n)
		errs := make([]error, n)
		var wg sync.WaitGroup
		for i := range n {
			wg.Go(func() {
				<-start
				revs[i], errs[i] = srcs[i].Publish(ctx, "ifrev", raw(t, map[string]any{"a": i}), nil,
					store.WithIfRevision(base.Revision), store.WithActor("p"))
			})
		}
		close(start)
		wg.Wait()
		var winner int64
		wins := 0
		for i := range n {
			if errs[i] == nil {
				wins++
				winner = revs[i]
			}
		}
		if wins != 1 {
			t.Fatalf("round %d: %d publishers won (errors %v)", round, wins, errs)
		}
		for i := range n {
			if errs[i] != nil && (!errors.As(errs[i], &ce) || ce.Revision != winner) {
				t.Errorf("round %d: loser %d: %v; want a ConflictError at %d", round, i, errs[i], winner)
			}
		}
	}
}

// TestValuesAtAndDiff: the namespace's content at a revision (its last
// change at or before it) and at a time, and diffs, without reserved keys.
func TestValuesAtAndDiff(t *testing.T) {
	cl := sharedCluster(t)
	src := newWriter(t, cl.endpoints())
	ctx := auditCtx(t)
	r1 := publish(t, src, "vals", map[string]any{"retry-timeout-ms": 200, "mode": "a", "$holdfast/rollout": map[string]any{"id": "x"}})
	between := publish(t, src, "vals.other", map[string]any{"x": 1})
	r2 := publish(t, src, "vals", map[string]any{"retry-timeout-ms": 50, "new": true}, "mode")

	v, err := src.ValuesAt(ctx, "vals", r1)
	if err != nil {
		t.Fatal(err)
	}
	h, err := src.History(ctx, "vals", store.HistoryOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got := mustJSON(t, v.Values); got != `{"mode":"a","retry-timeout-ms":200}` || v.Revision != r1 || !v.CommittedAt.Equal(h.Revisions[1].CommittedAt) {
		t.Fatalf("values at %d = %s (revision %d, at %v)", r1, mustJSON(t, v), v.Revision, v.CommittedAt)
	}
	for _, rec := range h.Revisions {
		if strings.Contains(mustJSON(t, rec), "$holdfast") {
			t.Errorf("history shows a reserved key: %s", mustJSON(t, rec))
		}
	}
	if v, err := src.ValuesAt(ctx, "vals", between); err != nil || v.Revision != r1 {
		t.Fatalf("values at %d (another namespace's revision) = %+v, %v; want revision %d", between, v, err, r1)
	}
	v2, err := src.ValuesAt(ctx, "vals", r2)
	if err != nil || mustJSON(t, v2.Values) != `{"new":true,"retry-timeout-ms":50}` {
		t.Fatalf("values at %d = %+v, %v", r2, v2, err)
	}
	var generic map[string]any
	if err := json.Unmarshal([]byte(mustJSON(t, v2)), &generic); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"ns", "revision", "committed_at", "values"} {
		if _, ok := generic[f]; !ok {
			t.Errorf("values JSON lacks %q", f)
		}
	}

	// By time: the commit times of the records.
	at2, at1 := h.Revisions[0].CommittedAt, h.Revisions[1].CommittedAt
	for _, c := range []struct {
		at   time.Time
		want int64
	}{{at2, r2}, {at2.Add(time.Hour), r2}, {at2.Add(-time.Nanosecond), r1}, {at1, r1}} {
		v, err := src.ValuesAtTime(ctx, "vals", c.at)
		if err != nil || v.Revision != c.want {
			t.Errorf("values at %v = %+v, %v; want revision %d", c.at, v, err, c.want)
		}
	}
	if _, err := src.ValuesAtTime(ctx, "vals", at1.Add(-time.Nanosecond)); !errors.Is(err, transport.ErrNotFound) {
		t.Errorf("values before the first revision = %v; want ErrNotFound", err)
	}

	d, err := src.Diff(ctx, "vals", r1, r2)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := mustJSON(t, d), fmt.Sprintf(`{"ns":"vals","from":%d,"to":%d,"changes":[{"key":"mode","old":"a"},{"key":"new","new":true},{"key":"retry-timeout-ms","old":200,"new":50}]}`, r1, r2); got != want {
		t.Errorf("diff = %s\nwant %s", got, want)
	}
	if d, err := src.Diff(ctx, "vals", r2, r2); err != nil || mustJSON(t, d) != fmt.Sprintf(`{"ns":"vals","from":%d,"to":%d,"changes":[]}`, r2, r2) {
		t.Errorf("diff of a revision with itself = %+v, %v", d, err)
	}
	// Insignificant space is no change.
	r3, err := src.Publish(ctx, "vals", map[string]json.RawMessage{"new": json.RawMessage(` true `)}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if d, err := src.Diff(ctx, "vals", r2, r3); err != nil || len(d.Changes) != 0 {
		t.Errorf("diff over a respaced value = %+v, %v", d, err)
	}
	// A rollback restores the content ValuesAt shows and leaves the
	// reserved keys as they are.
	if _, err := src.Publish(ctx, "vals", raw(t, map[string]any{"$holdfast/rollout": "now", "$holdfast/extra": 1}), nil); err != nil {
		t.Fatal(err)
	}
	rb, err := src.Rollback(ctx, "vals", r1)
	if err != nil {
		t.Fatal(err)
	}
	snap, err := src.Snapshot(ctx, transport.SnapshotRequest{Namespace: "vals"})
	if err != nil || snap.Revision != rb || string(snap.Values) != `{"$holdfast/extra":1,"$holdfast/rollout":"now","mode":"a","retry-timeout-ms":200}` {
		t.Errorf("after a rollback to %d: %+v, %v", r1, snap, err)
	}
}

// TestAuditBadInput: every query's refusals.
func TestAuditBadInput(t *testing.T) {
	cl := sharedCluster(t)
	src := newWriter(t, cl.endpoints())
	ctx := auditCtx(t)
	r1 := publish(t, src, "bad", map[string]any{"a": 1})
	head := publish(t, src, "bad.other", map[string]any{"a": 1})

	invalid := map[string]error{}
	_, invalid["history: invalid namespace"] = src.History(ctx, "Bad Name", store.HistoryOptions{})
	_, invalid["history: negative limit"] = src.History(ctx, "bad", store.HistoryOptions{Limit: -1})
	_, invalid["history: negative before"] = src.History(ctx, "bad", store.HistoryOptions{Before: -1})
	_, invalid["values: invalid namespace"] = src.ValuesAt(ctx, "..", r1)
	_, invalid["values: revision 0"] = src.ValuesAt(ctx, "bad", 0)
	_, invalid["values: negative revision"] = src.ValuesAt(ctx, "bad", -3)
	_, invalid["values at time: zero time"] = src.ValuesAtTime(ctx, "bad", time.Time{})
	_, invalid["values at time: invalid namespace"] = src.ValuesAtTime(ctx, "", time.Now())
	_, invalid["diff: invalid namespace"] = src.Diff(ctx, "A", r1, r1)
	_, invalid["diff: from 0"] = src.Diff(ctx, "bad", 0, r1)
	_, invalid["diff: to negative"] = src.Diff(ctx, "bad", r1, -1)
	_, invalid["publish: actor too long"] = src.Publish(ctx, "bad", nil, nil, store.WithActor(strings.Repeat("a", store.MaxActorBytes+1)))
	_, invalid["publish: reason not UTF-8"] = src.Publish(ctx, "bad", nil, nil, store.WithReason("\xff"))
	_, invalid["rollback: reason too long"] = src.Rollback(ctx, "bad", r1, store.WithReason(strings.Repeat("r", store.MaxReasonBytes+1)))
	_, invalid["rollback: revision 0"] = src.Rollback(ctx, "bad", 0)
	_, invalid["publish: invalid namespace"] = src.Publish(ctx, "NS", nil, nil)
	_, invalid["publish: invalid key"] = src.Publish(ctx, "bad", raw(t, map[string]any{"a key": 1}), nil)
	_, invalid["publish: invalid key to delete"] = src.Publish(ctx, "bad", nil, []string{""})
	_, invalid["publish: not JSON"] = src.Publish(ctx, "bad", map[string]json.RawMessage{"a": json.RawMessage("{")}, nil)
	_, invalid["publish: put and deleted"] = src.Publish(ctx, "bad", raw(t, map[string]any{"a": 1}), []string{"a"})
	for what, err := range invalid {
		if !errors.Is(err, store.ErrInvalidArgument) {
			t.Errorf("%s: %v; want ErrInvalidArgument", what, err)
		}
	}
	if _, err := src.History(ctx, "Bad Name", store.HistoryOptions{}); !errors.Is(err, transport.ErrInvalidNamespace) {
		t.Errorf("invalid namespace: %v; want ErrInvalidNamespace too", err)
	}

	notFound := map[string]error{}
	_, notFound["history: unknown namespace"] = src.History(ctx, "bad.none", store.HistoryOptions{})
	_, notFound["values: unknown namespace"] = src.ValuesAt(ctx, "bad.none", head)
	_, notFound["values: before the first revision"] = src.ValuesAt(ctx, "bad.other", r1)
	_, notFound["values: future revision"] = src.ValuesAt(ctx, "bad", head+1000)
	_, notFound["values at time: unknown namespace"] = src.ValuesAtTime(ctx, "bad.none", time.Now())
	_, notFound["values at time: before the first"] = src.ValuesAtTime(ctx, "bad", time.Now().Add(-time.Hour))
	_, notFound["diff: future revision"] = src.Diff(ctx, "bad", r1, head+1000)
	_, notFound["diff: before the first revision"] = src.Diff(ctx, "bad.other", r1, head)
	_, notFound["rollback: future revision"] = src.Rollback(ctx, "bad", head+1000)
	for what, err := range notFound {
		if !errors.Is(err, transport.ErrNotFound) {
			t.Errorf("%s: %v; want ErrNotFound", what, err)
		}
	}
	// Nothing of the refused publishes and rollbacks was written.
	if h, err := src.History(ctx, "bad", store.HistoryOptions{}); err != nil || len(h.Revisions) != 1 {
		t.Errorf("history after refusals = %+v, %v", h, err)
	}
	if _, err := src.History(ctx, "bad", store.HistoryOptions{Limit: store.MaxHistoryLimit + 1}); err != nil {
		t.Errorf("a limit over the maximum is capped: %v", err)
	}
}

// TestAuditAfterCompaction: the audit log outlives etcd's compaction:
// history, values at a revision or a time, and diffs answer below the
// compaction point. TrimAudit then folds the oldest records into the
// base: history says it is truncated, values at the base's revision still
// answer, and older ones are compacted.
func TestAuditAfterCompaction(t *testing.T) {
	cl := sharedCluster(t)
	src := newWriter(t, cl.endpoints())
	ctx := auditCtx(t)
	quiet := publish(t, src, "cmp.quiet", map[string]any{"q": 1})
	r1 := publish(t, src, "cmp", map[string]any{"a": 1})
	r2 := publish(t, src, "cmp", map[string]any{"a": 2})
	r3 := publish(t, src, "cmp", map[string]any{"a": 3})
	h, err := src.History(ctx, "cmp", store.HistoryOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cl.client(t).Compact(ctx, r3); err != nil {
		t.Fatal(err)
	}
	r4 := publish(t, src, "cmp", map[string]any{"a": 4})

	after, err := src.History(ctx, "cmp", store.HistoryOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(after.Revisions) != 4 || after.Revisions[0].Revision != r4 || after.Revisions[3].Revision != r1 || after.Truncated ||
		mustJSON(t, after.Revisions[1:]) != mustJSON(t, h.Revisions) {
		t.Fatalf("history after compaction at %d = %s\nbefore it: %s", r3, mustJSON(t, after), mustJSON(t, h))
	}
	if older, err := src.History(ctx, "cmp", store.HistoryOptions{Before: r3}); err != nil || len(older.Revisions) != 2 || older.Revisions[0].Revision != r2 {
		t.Errorf("history before the compaction point = %s, %v; want r2 and r1", mustJSON(t, older), err)
	}
	if v, err := src.ValuesAt(ctx, "cmp", r2); err != nil || v.Revision != r2 || mustJSON(t, v.Values) != `{"a":2}` {
		t.Errorf("values at %d below compaction = %+v, %v", r2, v, err)
	}
	if v, err := src.ValuesAt(ctx, "cmp", r3); err != nil || mustJSON(t, v.Values) != `{"a":3}` {
		t.Errorf("values at the compaction point = %+v, %v", v, err)
	}
	if v, err := src.ValuesAtTime(ctx, "cmp", h.Revisions[1].CommittedAt); err != nil || v.Revision != r2 || mustJSON(t, v.Values) != `{"a":2}` {
		t.Errorf("values at r2's time = %+v, %v", v, err)
	}
	if d, err := src.Diff(ctx, "cmp", r1, r4); err != nil || mustJSON(t, d) != fmt.Sprintf(`{"ns":"cmp","from":%d,"to":%d,"changes":[{"key":"a","old":1,"new":4}]}`, r1, r4) {
		t.Errorf("diff from a compacted revision = %+v, %v", d, err)
	}
	// A namespace quiet since before the compaction: its content then is
	// its content at the compaction point.
	if v, err := src.ValuesAt(ctx, "cmp.quiet", quiet); err != nil || v.Revision != quiet || mustJSON(t, v.Values) != `{"q":1}` {
		t.Errorf("values of a quiet namespace below compaction = %+v, %v", v, err)
	}
	if qh, err := src.History(ctx, "cmp.quiet", store.HistoryOptions{}); err != nil || len(qh.Revisions) != 1 || qh.Revisions[0].Puts[0] != "q" {
		t.Errorf("history of a quiet namespace = %+v, %v", qh, err)
	}

	// Keep two records: r1 and r2 fold into the base.
	if n, err := src.TrimAudit(ctx, "cmp", store.AuditLimit{Records: 2}); err != nil || n != 2 {
		t.Fatalf("TrimAudit(2) = %d, %v; want 2 folded", n, err)
	}
	if n, err := src.TrimAudit(ctx, "cmp", store.AuditLimit{Records: 2}); err != nil || n != 0 {
		t.Fatalf("TrimAudit(2) again = %d, %v; want nothing to do", n, err)
	}
	trimmed, err := src.History(ctx, "cmp", store.HistoryOptions{})
	if err != nil || len(trimmed.Revisions) != 2 || trimmed.Revisions[1].Revision != r3 || !trimmed.Truncated {
		t.Fatalf("history after the trim = %s, %v; want r4, r3 and truncated", mustJSON(t, trimmed), err)
	}
	if v, err := src.ValuesAt(ctx, "cmp", r2); err != nil || v.Revision != r2 || mustJSON(t, v.Values) != `{"a":2}` {
		t.Errorf("values at the base's revision %d = %+v, %v", r2, v, err)
	}
	var ce *transport.CompactedError
	if _, err := src.ValuesAt(ctx, "cmp", r1); !errors.As(err, &ce) {
		t.Errorf("values at %d, folded and compacted = %v; want CompactedError", r1, err)
	}
	if d, err := src.Diff(ctx, "cmp", r2, r4); err != nil || len(d.Changes) != 1 {
		t.Errorf("diff from the base = %+v, %v", d, err)
	}
}

// TestHistoryOfOlderMetaRecords: meta records written before the audit
// (prev_revision and committed_at only) read as publishes with the keys
// etcd's revisions show; newer records chain on them.
func TestHistoryOfOlderMetaRecords(t *testing.T) {
	cl := sharedCluster(t)
	src := newWriter(t, cl.endpoints())
	ctx := auditCtx(t)
	cli := cl.client(t)
	p := etcd.Prefix("old")
	old := func(prev int64, ops ...clientv3.Op) int64 {
		t.Helper()
		m := `{"prev_revision":` + strconv.FormatInt(prev, 10) + `,"committed_at":"` + time.Now().UTC().Format(time.RFC3339Nano) + `"}`
		resp, err := cli.Txn(ctx).Then(append(ops, clientv3.OpPut(p, m))...).Commit()
		if err != nil {
			t.Fatal(err)
		}
		return resp.Header.Revision
	}
	o1 := old(0, clientv3.OpPut(p+"a", "1"), clientv3.OpPut(p+"b", "2"))
	o2 := old(o1, clientv3.OpPut(p+"a", "3"), clientv3.OpDelete(p+"b"))
	n3, err := src.Publish(ctx, "old", raw(t, map[string]any{"c": 1}), nil, store.WithActor("new"))
	if err != nil {
		t.Fatal(err)
	}
	h, err := src.History(ctx, "old", store.HistoryOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for i := range h.Revisions {
		h.Revisions[i].CommittedAt = time.Time{}
	}
	want := []store.HistoryRecord{
		{Revision: n3, PrevRevision: o2, Actor: "new", Kind: "publish", Puts: []string{"c"}, Deletes: []string{}},
		{Revision: o2, PrevRevision: o1, Kind: "publish", Puts: []string{"a"}, Deletes: []string{"b"}},
		{Revision: o1, Kind: "publish", Puts: []string{"a", "b"}, Deletes: []string{}},
	}
	if mustJSON(t, h.Revisions) != mustJSON(t, want) {
		t.Errorf("history = %s\nwant %s", mustJSON(t, h.Revisions), mustJSON(t, want))
	}
}

// TestActorDefaultsToTheEtcdUser: without WithActor the record names the
// authenticated etcd user (on a cluster of its own, with auth enabled).
func TestActorDefaultsToTheEtcdUser(t *testing.T) {
	cl := startCluster(t)
	ctx := auditCtx(t)
	cli := cl.client(t)
	for _, step := range []func() error{
		func() error { _, err := cli.UserAdd(ctx, "root", "rootpw"); return err },
		func() error { _, err := cli.UserGrantRole(ctx, "root", "root"); return err },
		func() error { _, err := cli.RoleAdd(ctx, "holdfast-writer"); return err },
		func() error {
			_, err := cli.RoleGrantPermission(ctx, "holdfast-writer", etcd.KeyRoot, clientv3.GetPrefixRangeEnd(etcd.KeyRoot), clientv3.PermissionType(clientv3.PermReadWrite))
			return err
		},
		func() error {
			_, err := cli.RoleGrantPermission(ctx, "holdfast-writer", store.AuditRoot, clientv3.GetPrefixRangeEnd(store.AuditRoot), clientv3.PermissionType(clientv3.PermReadWrite))
			return err
		},
		func() error {
			_, err := cli.RoleGrantPermission(ctx, "holdfast-writer", store.IndexRoot, clientv3.GetPrefixRangeEnd(store.IndexRoot), clientv3.PermissionType(clientv3.PermReadWrite))
			return err
		},
		func() error { _, err := cli.UserAdd(ctx, "deployer", "deploypw"); return err },
		func() error { _, err := cli.UserGrantRole(ctx, "deployer", "holdfast-writer"); return err },
		func() error { _, err := cli.AuthEnable(ctx); return err },
	} {
		if err := step(); err != nil {
			t.Fatal(err)
		}
	}
	src := newWriter(t, cl.endpoints(), withAuth("deployer", "deploypw"))
	r1, err := src.Publish(ctx, "who", raw(t, map[string]any{"a": 1}), nil, store.WithReason("no actor given"))
	if err != nil {
		t.Fatal(err)
	}
	r2, err := src.Publish(ctx, "who", raw(t, map[string]any{"a": 2}), nil, store.WithActor("alice"))
	if err != nil {
		t.Fatal(err)
	}
	h, err := src.History(ctx, "who", store.HistoryOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(h.Revisions) != 2 || h.Revisions[0].Revision != r2 || h.Revisions[0].Actor != "alice" ||
		h.Revisions[1].Revision != r1 || h.Revisions[1].Actor != "deployer" || h.Revisions[1].Reason != "no actor given" {
		t.Fatalf("history = %s", mustJSON(t, h))
	}
}
