package store_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/holdfast-dev/holdfast/server/store"
	"github.com/holdfast-dev/holdfast/transport"
	"github.com/holdfast-dev/holdfast/transport/etcd"
)

// TestReplaySkipsGap: a change the audit log lacks (written past
// Publish, with no leader watching, or by a transport/etcd user with no
// server) breaks the records' chain: ValuesAt past compaction is then a
// CompactedError (or the true content), never content that never existed.
func TestReplaySkipsGap(t *testing.T) {
	cl := sharedCluster(t)
	src := newWriter(t, cl.endpoints())
	ctx := auditCtx(t)
	cli := cl.client(t)
	publish(t, src, "rv.gap", map[string]any{"a": 1})
	if _, err := cli.Put(ctx, etcd.Prefix("rv.gap")+"b", "2"); err != nil { // past Publish
		t.Fatal(err)
	}
	r2 := publish(t, src, "rv.gap", map[string]any{"c": 3})
	r3 := publish(t, src, "rv.gap", map[string]any{"c": 4})
	truth, err := src.ValuesAt(ctx, "rv.gap", r2)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cli.Compact(ctx, r3); err != nil {
		t.Fatal(err)
	}
	got, err := src.ValuesAt(ctx, "rv.gap", r2)
	var ce *transport.CompactedError
	if errors.As(err, &ce) {
		return // honest
	}
	if err != nil || mustJSON(t, got.Values) != mustJSON(t, truth.Values) {
		t.Fatalf("values at %d before compaction %s; after %s, %v", r2, mustJSON(t, truth.Values), mustJSON(t, got), err)
	}
}

// TestAuditEscapesHTML: the audit record holds values as written, not
// HTML-escaped: values replayed past compaction are the same bytes as
// etcd's, Diff sees no change where there is none, and a 300 KiB value of
// "<" fits a publish (escaped, it would grow sixfold).
func TestAuditEscapesHTML(t *testing.T) {
	cl := sharedCluster(t)
	src := newWriter(t, cl.endpoints())
	ctx := auditCtx(t)
	cli := cl.client(t)
	r1, err := src.Publish(ctx, "rv.html", map[string]json.RawMessage{"h": json.RawMessage(`"<b>"`)}, nil)
	if err != nil {
		t.Fatal(err)
	}
	r2 := publish(t, src, "rv.html", map[string]any{"x": 1})
	if _, err := cli.Compact(ctx, r2); err != nil {
		t.Fatal(err)
	}
	d, err := src.Diff(ctx, "rv.html", r1, r2)
	if err != nil {
		t.Fatal(err)
	}
	if len(d.Changes) != 1 || d.Changes[0].Key != "x" {
		t.Errorf("diff %d..%d = %s; want only x", r1, r2, mustJSON(t, d))
	}
	v, err := src.ValuesAt(ctx, "rv.html", r1)
	if err != nil || string(v.Values["h"]) != `"<b>"` {
		t.Errorf("values at %d: h = %s, %v; published \"<b>\"", r1, v.Values["h"], err)
	}
	big := make([]byte, 300<<10)
	for i := range big {
		big[i] = '<'
	}
	if _, err := src.Publish(ctx, "rv.html", map[string]json.RawMessage{"big": json.RawMessage(append(append([]byte{'"'}, big...), '"'))}, nil); err != nil {
		t.Errorf("a 300 KiB value (under the server's 640 KiB publish limit): %v", err)
	}
}

// TestHistoryPastFirstRecord: paging History past the namespace's first
// record, once etcd compacted, is an empty page, not a CompactedError.
func TestHistoryPastFirstRecord(t *testing.T) {
	cl := sharedCluster(t)
	src := newWriter(t, cl.endpoints())
	ctx := auditCtx(t)
	cli := cl.client(t)
	r1 := publish(t, src, "rv.page", map[string]any{"a": 1})
	r2 := publish(t, src, "rv.page", map[string]any{"a": 2})
	other := publish(t, src, "rv.page.other", map[string]any{"a": 2})
	if _, err := cli.Compact(ctx, other); err != nil {
		t.Fatal(err)
	}
	h, err := src.History(ctx, "rv.page", store.HistoryOptions{Limit: 2})
	if err != nil || len(h.Revisions) != 2 || h.Revisions[0].Revision != r2 {
		t.Fatalf("first page %s, %v", mustJSON(t, h), err)
	}
	h, err = src.History(ctx, "rv.page", store.HistoryOptions{Limit: 2, Before: r1})
	if err != nil {
		t.Fatalf("page before the first record %d: %v; want an empty page", r1, err)
	}
	t.Logf("%s", mustJSON(t, h))
}

// TestRollbackPastCompaction: a revision that ValuesAt answers from the
// audit log past etcd's compaction can be rolled back to.
func TestRollbackPastCompaction(t *testing.T) {
	cl := sharedCluster(t)
	src := newWriter(t, cl.endpoints())
	ctx := auditCtx(t)
	r1 := publish(t, src, "rv.rb", map[string]any{"a": 1})
	publish(t, src, "rv.rb", map[string]any{"a": 2})
	r3 := publish(t, src, "rv.rb", map[string]any{"a": 3})
	if _, err := cl.client(t).Compact(ctx, r3); err != nil {
		t.Fatal(err)
	}
	if v, err := src.ValuesAt(ctx, "rv.rb", r1); err != nil {
		t.Fatalf("values at %d: %v", r1, err)
	} else {
		t.Logf("values at %d: %s", r1, mustJSON(t, v.Values))
	}
	if _, err := src.Rollback(ctx, "rv.rb", r1); err != nil {
		t.Errorf("rollback to %d, whose values the audit answers: %v", r1, err)
	}
}

// TestTrimOfOlderNamespace: a namespace whose log starts after it did
// (written before the audit log existed) is still trimmed once etcd has
// compacted its start: its base's content is unknown, so history is
// truncated there and values before the records kept are compacted.
func TestTrimOfOlderNamespace(t *testing.T) {
	cl := sharedCluster(t)
	src := newWriter(t, cl.endpoints())
	ctx := auditCtx(t)
	cli := cl.client(t)
	// An older version's publish: keys and a meta record, no audit record.
	if _, err := cli.Txn(ctx).Then(
		clientv3.OpPut(etcd.Prefix("rv.old")+"a", "1"),
		clientv3.OpPut(etcd.Prefix("rv.old"), `{"prev_revision":0,"committed_at":"2026-01-01T00:00:00Z"}`)).Commit(); err != nil {
		t.Fatal(err)
	}
	var last int64
	for i := range 3 {
		last = publish(t, src, "rv.old", map[string]any{"a": i + 2})
	}
	if _, err := cli.Compact(ctx, last); err != nil {
		t.Fatal(err)
	}
	if n, err := src.TrimAudit(ctx, "rv.old", store.AuditLimit{Records: 1}); err != nil || n != 2 {
		t.Errorf("TrimAudit(keep 1) = %d, %v; want 2 folded", n, err)
	}
	if h, err := src.History(ctx, "rv.old", store.HistoryOptions{}); err != nil || len(h.Revisions) != 1 || !h.Truncated {
		t.Errorf("history after the trim = %+v, %v; want one record, truncated", h, err)
	}
	var ce *transport.CompactedError
	if _, err := src.ValuesAt(ctx, "rv.old", last-1); !errors.As(err, &ce) {
		t.Errorf("values before the records kept = %v; want compacted", err)
	}
}

// TestReplayRacesTrim: ValuesAt past compaction while trims run (another
// server's, or this one's trimmer) reads the base and the records at one
// revision: never newer records applied on an older base.
func TestReplayRacesTrim(t *testing.T) {
	cl := sharedCluster(t)
	src := newWriter(t, cl.endpoints())
	ctx := auditCtx(t)
	const n = 300
	revs := make([]int64, n)
	for i := range n {
		revs[i] = publish(t, src, "rv.race", map[string]any{fmt.Sprint("k", i): i})
	}
	if _, err := cl.client(t).Compact(ctx, revs[n-1]); err != nil {
		t.Fatal(err)
	}
	target := revs[n-2] // content: k0..k(n-2)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for keep := n - 5; keep > 2; keep -= 3 {
			if _, err := src.TrimAudit(ctx, "rv.race", store.AuditLimit{Records: keep}); err != nil {
				t.Error(err)
				return
			}
		}
	}()
	bad := 0
	for {
		select {
		case <-done:
			if bad > 0 {
				t.Errorf("%d reads of values at %d gave wrong content", bad, target)
			}
			return
		default:
		}
		v, err := src.ValuesAt(ctx, "rv.race", target)
		if err != nil {
			continue
		}
		if len(v.Values) != n-1 {
			if bad == 0 {
				t.Logf("values at %d: %d keys, want %d", target, len(v.Values), n-1)
			}
			bad++
		}
	}
}

// TestTrimAuditByBytes: a bound in bytes folds the oldest records until
// the rest fit, whatever the bound in records; the newest record stays
// even when it alone is over the bound; history still reads as truncated
// and values at the base's revision still answer.
func TestTrimAuditByBytes(t *testing.T) {
	cl := sharedCluster(t)
	src := newWriter(t, cl.endpoints())
	ctx := auditCtx(t)
	big := strings.Repeat("x", 1000)
	var revs []int64
	for i := range 10 {
		revs = append(revs, publish(t, src, "rv.bytes", map[string]any{"v": fmt.Sprint(i, big)}))
	}
	// Each record holds one value of ~1 KB: 3.5 KB keeps the newest three.
	n, err := src.TrimAudit(ctx, "rv.bytes", store.AuditLimit{Records: 100, Bytes: 3500})
	if err != nil || n != 7 {
		t.Fatalf("TrimAudit(100 records, 3500 bytes) = %d, %v; want 7 folded", n, err)
	}
	h, err := src.History(ctx, "rv.bytes", store.HistoryOptions{})
	if err != nil || len(h.Revisions) != 3 || h.Revisions[2].Revision != revs[7] || !h.Truncated {
		t.Fatalf("history after the trim = %s, %v; want the newest three, truncated", mustJSON(t, h), err)
	}
	if v, err := src.ValuesAt(ctx, "rv.bytes", revs[6]); err != nil || mustJSON(t, v.Values) != mustJSON(t, map[string]string{"v": fmt.Sprint(6, big)}) {
		t.Errorf("values at the base's revision %d = %v", revs[6], err)
	}
	// A bound below one record keeps the newest record.
	if n, err := src.TrimAudit(ctx, "rv.bytes", store.AuditLimit{Records: 100, Bytes: 10}); err != nil || n != 2 {
		t.Fatalf("TrimAudit(10 bytes) = %d, %v; want 2 folded", n, err)
	}
	if h, err := src.History(ctx, "rv.bytes", store.HistoryOptions{}); err != nil || len(h.Revisions) != 1 || h.Revisions[0].Revision != revs[9] {
		t.Fatalf("history after the second trim = %s, %v; want the newest record only", mustJSON(t, h), err)
	}
	if _, err := src.TrimAudit(ctx, "rv.bytes", store.AuditLimit{Records: 1, Bytes: -1}); !errors.Is(err, store.ErrInvalidArgument) {
		t.Errorf("TrimAudit with a negative bound = %v; want ErrInvalidArgument", err)
	}
}
