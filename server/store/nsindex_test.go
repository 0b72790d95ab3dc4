package store_test

import (
	"strconv"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/holdfast-dev/holdfast/server/store"
	"github.com/holdfast-dev/holdfast/transport/etcd"
)

// TestIndexBackfill: namespaces written before the index (an older
// server's meta records, keys written past holdfast) get their entries
// from BackfillIndex, with their revisions and last changes; one a
// publish indexed keeps its entry; a second backfill reads nothing.
func TestIndexBackfill(t *testing.T) {
	cl := startCluster(t)
	w := newWriter(t, cl.endpoints())
	ctx := auditCtx(t)
	cli := cl.client(t)
	at := time.Date(2026, 11, 1, 10, 0, 0, 0, time.UTC)
	p := etcd.Prefix("old.one")
	resp, err := cli.Txn(ctx).Then(clientv3.OpPut(p+"a", "1"), clientv3.OpPut(p, `{"prev_revision":0,"committed_at":"`+at.Format(time.RFC3339Nano)+`","actor":"olda","reason":"why","kind":"publish"}`)).Commit()
	if err != nil {
		t.Fatal(err)
	}
	oldRev := resp.Header.Revision
	bare, err := cli.Put(ctx, etcd.Prefix("old.bare")+"k", "2") // no meta key
	if err != nil {
		t.Fatal(err)
	}
	newRev, err := w.Publish(ctx, "new.one", raw(t, map[string]any{"x": 1}), nil, store.WithActor("nina"), store.WithReason("CHG-9"))
	if err != nil {
		t.Fatal(err)
	}
	list := func() string {
		t.Helper()
		entries, more, err := w.List(ctx, store.ListOptions{Limit: 10})
		if err != nil || more {
			t.Fatalf("list: %v, more %v", err, more)
		}
		var b strings.Builder
		for _, e := range entries {
			b.WriteString(e.Namespace + " " + strconv.FormatInt(e.Revision, 10) + " " + e.Kind + " " + e.Actor + " " + e.Reason + ";")
		}
		return b.String()
	}
	if got, want := list(), "new.one "+strconv.FormatInt(newRev, 10)+" publish nina CHG-9;"; got != want {
		t.Fatalf("before the backfill: %q, want %q", got, want)
	}
	n, err := w.BackfillIndex(ctx)
	if err != nil || n != 2 {
		t.Fatalf("backfill: %d, %v; want 2", n, err)
	}
	want := "new.one " + strconv.FormatInt(newRev, 10) + " publish nina CHG-9;old.bare " + strconv.FormatInt(bare.Header.Revision, 10) + " unaudited  ;old.one " + strconv.FormatInt(oldRev, 10) + " publish olda why;"
	if got := list(); got != want {
		t.Fatalf("after the backfill: %q\nwant %q", got, want)
	}
	if _, err := cli.Put(ctx, etcd.Prefix("old.later")+"k", "3"); err != nil {
		t.Fatal(err)
	}
	if n, err := w.BackfillIndex(ctx); err != nil || n != 0 {
		t.Fatalf("a second backfill: %d, %v; want none (done once)", n, err)
	}
}

// TestIndexPages: List pages by name, filtered by prefix and by a match.
func TestIndexPages(t *testing.T) {
	cl := startCluster(t)
	w := newWriter(t, cl.endpoints())
	ctx := auditCtx(t)
	for _, ns := range []string{"a.1", "a.2", "a.3", "b.1", "b.2"} {
		publish(t, w, ns, map[string]any{"k": 1})
	}
	page := func(o store.ListOptions) string {
		t.Helper()
		entries, more, err := w.List(ctx, o)
		if err != nil {
			t.Fatal(err)
		}
		var names []string
		for _, e := range entries {
			names = append(names, e.Namespace)
		}
		if more {
			names = append(names, "+")
		}
		return strings.Join(names, ",")
	}
	for _, c := range []struct {
		o    store.ListOptions
		want string
	}{
		{store.ListOptions{Limit: 2}, "a.1,a.2,+"},
		{store.ListOptions{Limit: 2, After: "a.2"}, "a.3,b.1,+"},
		{store.ListOptions{Limit: 2, After: "b.1"}, "b.2"},
		{store.ListOptions{Limit: 10, Prefix: "b."}, "b.1,b.2"},
		{store.ListOptions{Limit: 10, Prefix: "b.", After: "a.9"}, "b.1,b.2"},
		{store.ListOptions{Limit: 1, Match: func(ns string) bool { return strings.HasSuffix(ns, ".2") }}, "a.2,+"},
		{store.ListOptions{Limit: 2, Match: func(ns string) bool { return strings.HasSuffix(ns, ".2") }}, "a.2,b.2"},
	} {
		if got := page(c.o); got != c.want {
			t.Errorf("%+v: %s, want %s", c.o, got, c.want)
		}
	}
}
