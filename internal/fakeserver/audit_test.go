package fakeserver

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/holdfast-dev/holdfast/controlapi"
	"github.com/holdfast-dev/holdfast/transport"
)

// clock is a settable time for the store's commit times.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *clock) set(t time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = t
}

// withClock makes s's store read its commit times from the returned clock,
// set to t0.
func withClock(s *Server, t0 time.Time) *clock {
	c := &clock{t: t0}
	s.store.mu.Lock()
	s.store.now = c.now
	s.store.mu.Unlock()
	return c
}

var t0 = time.Date(2026, 12, 1, 14, 0, 0, 0, time.UTC)

// errorOf decodes an error reply.
func errorOf(t testing.TB, data []byte) transport.ErrorBody {
	t.Helper()
	return decode[transport.ErrorBody](t, data)
}

// wantError checks an error reply's status and code.
func wantError(t testing.TB, what string, resp *http.Response, data []byte, status int, code string) transport.ErrorBody {
	t.Helper()
	if resp.StatusCode != status {
		t.Fatalf("%s: status %d, want %d; body %s", what, resp.StatusCode, status, data)
	}
	eb := errorOf(t, data)
	if eb.Error != code || eb.Message == "" {
		t.Fatalf("%s: body %s; want code %q and a message", what, data, code)
	}
	return eb
}

// The record of every commit, over HTTP, in the exact JSON of the API.
func TestHistoryRecordsEveryCommit(t *testing.T) {
	s := start(t)
	withClock(s, t0)
	c := newClient(t)
	u := s.URL() + "/control/namespaces/app"

	resp, data := do(t, c, "POST", u+"/publish", `{"puts":{"b":1,"a":"x"},"actor":"alice","reason":"first cut"}`)
	if resp.StatusCode != 200 || string(data) != `{"revision":1}`+"\n" {
		t.Fatalf("publish: %d %s", resp.StatusCode, data)
	}
	if _, err := s.Publish("other", map[string]any{"x": 1}); err != nil { // revision 2
		t.Fatal(err)
	}
	resp, data = do(t, c, "POST", u+"/publish", `{"puts":{"a":"y"},"deletes":["b","never"],"reason":"drop b","if_revision":1}`)
	if resp.StatusCode != 200 || string(data) != `{"revision":3}`+"\n" {
		t.Fatalf("publish: %d %s", resp.StatusCode, data)
	}
	resp, data = do(t, c, "POST", u+"/rollback", `{"to_revision":2,"actor":"bob","reason":"b was needed"}`)
	if resp.StatusCode != 200 || string(data) != `{"revision":4}`+"\n" {
		t.Fatalf("rollback: %d %s", resp.StatusCode, data)
	}

	resp, data = do(t, c, "GET", u+"/history", "")
	want := `{"ns":"app","revisions":[` +
		`{"revision":4,"prev_revision":3,"committed_at":"2026-12-01T14:00:00Z","actor":"bob","reason":"b was needed","kind":"rollback","rollback_of":2,"puts":["a","b"],"deletes":[]},` +
		`{"revision":3,"prev_revision":1,"committed_at":"2026-12-01T14:00:00Z","actor":"","reason":"drop b","kind":"publish","rollback_of":0,"puts":["a"],"deletes":["b"]},` +
		`{"revision":1,"prev_revision":0,"committed_at":"2026-12-01T14:00:00Z","actor":"alice","reason":"first cut","kind":"publish","rollback_of":0,"puts":["a","b"],"deletes":[]}` +
		`]}` + "\n"
	if resp.StatusCode != 200 || string(data) != want {
		t.Fatalf("history: %d\n%s\nwant\n%s", resp.StatusCode, data, want)
	}

	// Pages: limit, then before the last revision of the page.
	_, data = do(t, c, "GET", u+"/history?limit=2", "")
	if h := decode[History](t, data); len(h.Revisions) != 2 || h.Revisions[0].Revision != 4 || h.Revisions[1].Revision != 3 {
		t.Fatalf("limit=2: %s", data)
	}
	_, data = do(t, c, "GET", u+"/history?limit=2&before=3", "")
	if h := decode[History](t, data); len(h.Revisions) != 1 || h.Revisions[0].Revision != 1 {
		t.Fatalf("before=3: %s", data)
	}
	_, data = do(t, c, "GET", u+"/history?before=1", "")
	if string(data) != `{"ns":"app","revisions":[]}`+"\n" {
		t.Fatalf("before=1: %s", data)
	}
	_, data = do(t, c, "GET", u+"/history?before=99", "")
	if h := decode[History](t, data); len(h.Revisions) != 3 {
		t.Fatalf("before=99: %s", data)
	}
	// A namespace with a schema and no revision has an empty history.
	if err := s.SetSchema("empty", []byte(`{}`)); err != nil {
		t.Fatal(err)
	}
	_, data = do(t, c, "GET", s.URL()+"/control/namespaces/empty/history", "")
	if string(data) != `{"ns":"empty","revisions":[]}`+"\n" {
		t.Fatalf("history of a namespace with no revision: %s", data)
	}

	// The Go API says the same, and its records are the caller's.
	h, err := s.History("app", 1, 0)
	if err != nil || len(h.Revisions) != 1 || h.Revisions[0].Kind != KindRollback || h.Revisions[0].Actor != "bob" {
		t.Fatalf("History = %+v, %v", h, err)
	}
	h.Revisions[0].Puts[0] = "mutated"
	if h, _ := s.History("app", 1, 0); h.Revisions[0].Puts[0] != "a" {
		t.Fatal("a History's records share the store's")
	}
}

// Every endpoint's bad input, over HTTP.
func TestControlBadInput(t *testing.T) {
	s := start(t)
	clk := withClock(s, t0)
	c := newClient(t)
	if _, err := s.Publish("first", map[string]any{"x": 1}); err != nil { // revision 1
		t.Fatal(err)
	}
	clk.set(t0.Add(time.Minute))
	if _, err := s.Publish("app", map[string]any{"a": 1}); err != nil { // revision 2, at t0+1m
		t.Fatal(err)
	}
	u := s.URL() + "/control/namespaces/"
	long := strings.Repeat("a", MaxActorBytes+1)
	tests := []struct {
		name, method, path, body string
		status                   int
		code                     string
	}{
		{"history unknown ns", "GET", "nope/history", "", 404, transport.CodeNotFound},
		{"history bad ns", "GET", "App/history", "", 400, transport.CodeBadRequest},
		{"history limit 0", "GET", "app/history?limit=0", "", 400, transport.CodeBadRequest},
		{"history limit negative", "GET", "app/history?limit=-1", "", 400, transport.CodeBadRequest},
		{"history limit too large", "GET", "app/history?limit=1001", "", 400, transport.CodeBadRequest},
		{"history limit not a number", "GET", "app/history?limit=ten", "", 400, transport.CodeBadRequest},
		{"history limit empty", "GET", "app/history?limit=", "", 400, transport.CodeBadRequest},
		{"history before 0", "GET", "app/history?before=0", "", 400, transport.CodeBadRequest},
		{"history before not a number", "GET", "app/history?before=2x", "", 400, transport.CodeBadRequest},
		{"history unknown parameter", "GET", "app/history?limt=5", "", 400, transport.CodeBadRequest},
		{"history repeated parameter", "GET", "app/history?limit=1&limit=2", "", 400, transport.CodeBadRequest},
		{"history wrong method", "POST", "app/history", "", 405, transport.CodeBadRequest},
		{"values unknown ns", "GET", "nope/values?revision=1", "", 404, transport.CodeNotFound},
		{"values bad ns", "GET", "Bad/values?revision=1", "", 400, transport.CodeBadRequest},
		{"values neither", "GET", "app/values", "", 400, transport.CodeBadRequest},
		{"values both", "GET", "app/values?revision=2&at=2026-12-01T14:01:00Z", "", 400, transport.CodeBadRequest},
		{"values revision malformed", "GET", "app/values?revision=two", "", 400, transport.CodeBadRequest},
		{"values revision negative", "GET", "app/values?revision=-1", "", 400, transport.CodeBadRequest},
		{"values revision overflow", "GET", "app/values?revision=99999999999999999999", "", 400, transport.CodeBadRequest},
		{"values revision in the future", "GET", "app/values?revision=3", "", 404, transport.CodeNotFound},
		{"values revision 0", "GET", "app/values?revision=0", "", 400, transport.CodeBadRequest},
		{"values revision before the first", "GET", "app/values?revision=1", "", 404, transport.CodeNotFound},
		{"values at malformed", "GET", "app/values?at=yesterday", "", 400, transport.CodeBadRequest},
		{"values at without zone", "GET", "app/values?at=2026-12-01T14:01:00", "", 400, transport.CodeBadRequest},
		{"values at a date only", "GET", "app/values?at=2026-12-01", "", 400, transport.CodeBadRequest},
		{"values at before the first", "GET", "app/values?at=2026-12-01T14:00:59Z", "", 404, transport.CodeNotFound},
		{"values at in the future", "GET", "app/values?at=2126-12-01T14:00:00Z", "", 404, transport.CodeNotFound},
		{"values unknown parameter", "GET", "app/values?rev=2", "", 400, transport.CodeBadRequest},
		{"diff unknown ns", "GET", "nope/diff?from=1&to=2", "", 404, transport.CodeNotFound},
		{"diff no to", "GET", "app/diff?from=2", "", 400, transport.CodeBadRequest},
		{"diff no from", "GET", "app/diff?to=2", "", 400, transport.CodeBadRequest},
		{"diff malformed", "GET", "app/diff?from=a&to=2", "", 400, transport.CodeBadRequest},
		{"diff negative", "GET", "app/diff?from=2&to=-2", "", 400, transport.CodeBadRequest},
		{"diff to in the future", "GET", "app/diff?from=2&to=9", "", 404, transport.CodeNotFound},
		{"diff from before the first", "GET", "app/diff?from=1&to=2", "", 404, transport.CodeNotFound},
		{"diff unknown parameter", "GET", "app/diff?from=2&to=2&x=1", "", 400, transport.CodeBadRequest},
		{"publish actor too long", "POST", "app/publish", `{"actor":"` + long + `"}`, 400, transport.CodeBadRequest},
		{"publish reason too long", "POST", "app/publish", `{"reason":"` + strings.Repeat("r", MaxReasonBytes+1) + `"}`, 400, transport.CodeBadRequest},
		{"publish reason with a newline", "POST", "app/publish", `{"reason":"a\nforged line"}`, 400, transport.CodeBadRequest},
		{"publish actor with an escape", "POST", "app/publish", `{"actor":"a\u001b[31m"}`, 400, transport.CodeBadRequest},
		{"publish actor not a string", "POST", "app/publish", `{"actor":7}`, 400, transport.CodeBadRequest},
		{"publish if_revision negative", "POST", "app/publish", `{"if_revision":-1}`, 400, transport.CodeBadRequest},
		{"publish if_revision not a number", "POST", "app/publish", `{"if_revision":"2"}`, 400, transport.CodeBadRequest},
		{"publish if_revision stale", "POST", "app/publish", `{"puts":{"a":2},"if_revision":1}`, 409, transport.CodeConflict},
		{"publish if_revision 0 of an existing ns", "POST", "app/publish", `{"if_revision":0}`, 409, transport.CodeConflict},
		{"rollback reason too long", "POST", "app/rollback", `{"to_revision":2,"reason":"` + strings.Repeat("r", MaxReasonBytes+1) + `"}`, 400, transport.CodeBadRequest},
		{"rollback actor with a control character", "POST", "app/rollback", `{"to_revision":2,"actor":"\u0000"}`, 400, transport.CodeBadRequest},
		{"rollback unknown field", "POST", "app/rollback", `{"to_revision":2,"if_rev":2}`, 400, transport.CodeBadRequest},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			resp, data := do(t, c, tt.method, u+tt.path, tt.body)
			eb := wantError(t, tt.name, resp, data, tt.status, tt.code)
			if tt.code == transport.CodeConflict && eb.Revision != 2 {
				t.Errorf("conflict body %s: want revision 2", data)
			}
		})
	}
	// Nothing above changed anything.
	if s.Head() != 2 {
		t.Fatalf("head %d after refused requests, want 2", s.Head())
	}
	if h, _ := s.History("app", 0, 0); len(h.Revisions) != 1 {
		t.Fatalf("history after refused requests: %+v", h)
	}
}

// values answers with the content live at a revision or a time, without
// reserved keys, and diff with what changed between two.
func TestValuesAtAndDiff(t *testing.T) {
	s := start(t)
	clk := withClock(s, t0)
	c := newClient(t)
	u := s.URL() + "/control/namespaces/app"
	pub := func(at time.Time, ns string, puts map[string]any, dels ...string) int64 {
		t.Helper()
		clk.set(at)
		rev, err := s.Publish(ns, puts, dels...)
		if err != nil {
			t.Fatal(err)
		}
		return rev
	}
	r1 := pub(t0, "app", map[string]any{"retry-timeout-ms": 200, "mode": "safe"})
	pub(t0.Add(time.Minute), "other", map[string]any{"x": 1})                                            // 2
	r3 := pub(t0.Add(2*time.Minute), "app", map[string]any{"retry-timeout-ms": 50, "new": true}, "mode") // 3
	// A rollout's staged change lives in a reserved key, which values and
	// diff never show.
	clk.set(t0.Add(3 * time.Minute))
	if _, err := s.store.publishIf("app", map[string]json.RawMessage{"$holdfast/rollout": json.RawMessage(`{"id":"r1"}`)}, nil, commitMeta{Kind: KindRolloutStage}, nil); err != nil { // 4
		t.Fatal(err)
	}
	pub(t0.Add(4*time.Minute), "other", map[string]any{"x": 2}) // 5

	tests := []struct {
		query, want string
	}{
		{"revision=1", `{"ns":"app","revision":1,"committed_at":"2026-12-01T14:00:00Z","values":{"mode":"safe","retry-timeout-ms":200}}`},
		{"revision=2", `{"ns":"app","revision":1,"committed_at":"2026-12-01T14:00:00Z","values":{"mode":"safe","retry-timeout-ms":200}}`},
		{"revision=3", `{"ns":"app","revision":3,"committed_at":"2026-12-01T14:02:00Z","values":{"new":true,"retry-timeout-ms":50}}`},
		{"revision=5", `{"ns":"app","revision":4,"committed_at":"2026-12-01T14:03:00Z","values":{"new":true,"retry-timeout-ms":50}}`},
		{"at=2026-12-01T14:00:00Z", `{"ns":"app","revision":1,"committed_at":"2026-12-01T14:00:00Z","values":{"mode":"safe","retry-timeout-ms":200}}`},
		{"at=2026-12-01T14:01:59.999999999Z", `{"ns":"app","revision":1,"committed_at":"2026-12-01T14:00:00Z","values":{"mode":"safe","retry-timeout-ms":200}}`},
		{"at=2026-12-01T14:02:00Z", `{"ns":"app","revision":3,"committed_at":"2026-12-01T14:02:00Z","values":{"new":true,"retry-timeout-ms":50}}`},
		{"at=" + url.QueryEscape("2026-12-01T15:02:30+01:00"), `{"ns":"app","revision":3,"committed_at":"2026-12-01T14:02:00Z","values":{"new":true,"retry-timeout-ms":50}}`},
		{"at=2026-12-01T15:02:30+01:00", `{"ns":"app","revision":3,"committed_at":"2026-12-01T14:02:00Z","values":{"new":true,"retry-timeout-ms":50}}`}, // "+" unescaped, as curl sends it
	}
	for _, tt := range tests {
		resp, data := do(t, c, "GET", u+"/values?"+tt.query, "")
		if resp.StatusCode != 200 || string(data) != tt.want+"\n" {
			t.Errorf("values?%s: %d %s\nwant %s", tt.query, resp.StatusCode, data, tt.want)
		}
	}
	// Now (the clock's) is not the future.
	clk.set(t0.Add(time.Hour))
	if _, data := do(t, c, "GET", u+"/values?at=2026-12-01T15:00:00Z", ""); decode[NamespaceValues](t, data).Revision != 4 {
		t.Errorf("values at now: %s", data)
	}

	diffs := []struct {
		query, want string
	}{
		{"from=1&to=3", `{"ns":"app","from":1,"to":3,"changes":[{"key":"mode","old":"safe"},{"key":"new","new":true},{"key":"retry-timeout-ms","old":200,"new":50}]}`},
		{"from=3&to=1", `{"ns":"app","from":3,"to":1,"changes":[{"key":"mode","new":"safe"},{"key":"new","old":true},{"key":"retry-timeout-ms","old":50,"new":200}]}`},
		{"from=2&to=1", `{"ns":"app","from":1,"to":1,"changes":[]}`},
		{"from=3&to=5", `{"ns":"app","from":3,"to":4,"changes":[]}`}, // only the reserved key changed
	}
	for _, tt := range diffs {
		resp, data := do(t, c, "GET", u+"/diff?"+tt.query, "")
		if resp.StatusCode != 200 || string(data) != tt.want+"\n" {
			t.Errorf("diff?%s: %d %s\nwant %s", tt.query, resp.StatusCode, data, tt.want)
		}
	}
	// History shows the reserved key: it is the record of what was
	// committed.
	h, err := s.History("app", 1, 0)
	if err != nil || h.Revisions[0].Kind != KindRolloutStage || len(h.Revisions[0].Puts) != 1 || h.Revisions[0].Puts[0] != "$holdfast/rollout" {
		t.Fatalf("History = %+v, %v", h, err)
	}

	// The Go API.
	v, err := s.ValuesAt("app", r3)
	if err != nil || v.Revision != r3 || string(v.Values["retry-timeout-ms"]) != "50" {
		t.Fatalf("ValuesAt = %+v, %v", v, err)
	}
	if v, err = s.ValuesAtTime("app", t0.Add(30*time.Second)); err != nil || v.Revision != r1 {
		t.Fatalf("ValuesAtTime = %+v, %v", v, err)
	}
	if _, err = s.ValuesAtTime("app", t0.Add(-time.Nanosecond)); !errors.Is(err, ErrNoRevision) {
		t.Fatalf("ValuesAtTime before the first = %v", err)
	}
	if _, err = s.ValuesAt("app", 99); !errors.Is(err, ErrNoRevision) {
		t.Fatalf("ValuesAt above the head = %v", err)
	}
	if _, err = s.ValuesAt("nope", 1); !errors.Is(err, ErrUnknownNamespace) {
		t.Fatalf("ValuesAt of an unknown ns = %v", err)
	}
	d, err := s.Diff("app", r1, r3)
	if err != nil || len(d.Changes) != 3 || d.Changes[0].Key != "mode" || d.Changes[0].New != nil {
		t.Fatalf("Diff = %+v, %v", d, err)
	}
	if _, err = s.Diff("app", r1, 99); !errors.Is(err, ErrNoRevision) {
		t.Fatalf("Diff to above the head = %v", err)
	}
}

// Compaction drops values, not records: history stays whole, values of a
// revision replaced at or below the compaction point are 410.
func TestAuditSurvivesCompaction(t *testing.T) {
	s := start(t)
	clk := withClock(s, t0)
	c := newClient(t)
	u := s.URL() + "/control/namespaces/app"
	for i := range 5 {
		clk.set(t0.Add(time.Duration(i) * time.Minute))
		body := fmt.Sprintf(`{"puts":{"k%d":%d},"deletes":["k%d"],"actor":"op%d","reason":"step %d"}`, i, i, i-1, i, i)
		if resp, data := do(t, c, "POST", u+"/publish", body); resp.StatusCode != 200 {
			t.Fatalf("publish %d: %d %s", i, resp.StatusCode, data)
		}
	}
	if _, err := s.Publish("other", map[string]any{"x": 1}); err != nil { // 6
		t.Fatal(err)
	}
	if k, err := s.Compact(0); err != nil || k != 6 {
		t.Fatalf("Compact = %d, %v", k, err)
	}

	_, data := do(t, c, "GET", u+"/history", "")
	h := decode[History](t, data)
	if len(h.Revisions) != 5 {
		t.Fatalf("history after compaction: %s", data)
	}
	for j, r := range h.Revisions {
		i := 4 - j
		want := AuditRecord{Revision: int64(i + 1), PrevRevision: int64(i), CommittedAt: t0.Add(time.Duration(i) * time.Minute),
			Actor: fmt.Sprintf("op%d", i), Reason: fmt.Sprintf("step %d", i), Kind: KindPublish,
			Puts: []string{fmt.Sprintf("k%d", i)}, Deletes: []string{fmt.Sprintf("k%d", i-1)}}
		if i == 0 {
			want.Deletes = []string{}
		}
		if fmt.Sprint(r) != fmt.Sprint(want) {
			t.Errorf("record %d after compaction: %+v\nwant %+v", i+1, r, want)
		}
	}

	for _, q := range []string{"values?revision=1", "values?revision=4", "values?at=2026-12-01T14:03:30Z", "diff?from=1&to=5"} {
		resp, data := do(t, c, "GET", u+"/"+q, "")
		if eb := wantError(t, q, resp, data, 410, transport.CodeCompacted); eb.CompactRevision != 6 {
			t.Errorf("%s: %s, want compact_revision 6", q, data)
		}
	}
	// The content live at the compaction point is kept, whenever it was
	// committed; so is the rule for a time before the first revision.
	for q, want := range map[string]int64{"values?revision=5": 5, "values?revision=6": 5, "values?at=2026-12-01T14:04:00Z": 5} {
		resp, data := do(t, c, "GET", u+"/"+q, "")
		if resp.StatusCode != 200 || decode[NamespaceValues](t, data).Revision != want {
			t.Errorf("%s: %d %s", q, resp.StatusCode, data)
		}
	}
	resp, data := do(t, c, "GET", u+"/values?at=2026-12-01T13:59:00Z", "")
	wantError(t, "at before the first, compacted", resp, data, 404, transport.CodeNotFound)

	var ce *transport.CompactedError
	if _, err := s.ValuesAt("app", 3); !errors.As(err, &ce) || ce.CompactRevision != 6 {
		t.Fatalf("ValuesAt compacted = %v", err)
	}
}

// WithRetention compacts on every publish; the records stay.
func TestAuditSurvivesRetention(t *testing.T) {
	s := start(t, WithRetention(2))
	for i := range 10 {
		if _, err := s.PublishWith("app", map[string]any{"k": i}, nil, PublishOptions{Actor: "ci", Reason: fmt.Sprint(i)}); err != nil {
			t.Fatal(err)
		}
	}
	h, err := s.History("app", 0, 0)
	if err != nil || len(h.Revisions) != 10 || h.Revisions[9].Reason != "0" || h.Revisions[0].Reason != "9" {
		t.Fatalf("History = %+v, %v", h, err)
	}
	var ce *transport.CompactedError
	if _, err := s.ValuesAt("app", 7); !errors.As(err, &ce) || ce.CompactRevision != 8 {
		t.Fatalf("ValuesAt(7) = %v; want compacted at 8", err)
	}
	if v, err := s.ValuesAt("app", 8); err != nil || string(v.Values["k"]) != "7" {
		t.Fatalf("ValuesAt(8) = %+v, %v", v, err)
	}
}

// The bound on records drops only records whose values are compacted too,
// and keeps telling a time before the first revision from one beyond the
// history kept.
func TestAuditBound(t *testing.T) {
	s := start(t)
	clk := withClock(s, t0)
	s.store.mu.Lock()
	s.store.auditMax = 3
	s.store.mu.Unlock()
	for i := range 10 { // revisions 1..10, a minute apart
		clk.set(t0.Add(time.Duration(i) * time.Minute))
		if _, err := s.Publish("app", map[string]any{"k": i}); err != nil {
			t.Fatal(err)
		}
	}
	if h, _ := s.History("app", 0, 0); len(h.Revisions) != 10 {
		t.Fatalf("%d records before any compaction, want all 10", len(h.Revisions))
	}
	if _, err := s.Compact(7); err != nil {
		t.Fatal(err)
	}
	clk.set(t0.Add(10 * time.Minute))
	if _, err := s.Publish("app", map[string]any{"k": 10}); err != nil { // 11
		t.Fatal(err)
	}
	h, _ := s.History("app", 0, 0)
	// 7 (live at the compaction point) and later are needed: 5 records.
	if len(h.Revisions) != 5 || h.Revisions[4].Revision != 7 {
		t.Fatalf("records after the bound: %+v", h.Revisions)
	}
	if v, err := s.ValuesAt("app", 7); err != nil || v.Revision != 7 || !v.CommittedAt.Equal(t0.Add(6*time.Minute)) {
		t.Fatalf("ValuesAt(7) = %+v, %v", v, err)
	}
	var ce *transport.CompactedError
	if _, err := s.ValuesAtTime("app", t0.Add(90*time.Second)); !errors.As(err, &ce) {
		t.Fatalf("ValuesAtTime of a trimmed revision = %v; want compacted", err)
	}
	if _, err := s.ValuesAt("app", 2); !errors.As(err, &ce) {
		t.Fatalf("ValuesAt of a trimmed revision = %v; want compacted", err)
	}
	if _, err := s.ValuesAtTime("app", t0.Add(-time.Second)); !errors.Is(err, ErrNoRevision) {
		t.Fatalf("ValuesAtTime before the first = %v; want ErrNoRevision", err)
	}
	if _, err := s.ValuesAt("app", 0); !errors.Is(err, ErrNoRevision) {
		t.Fatalf("ValuesAt(0) = %v; want ErrNoRevision", err)
	}
}

// publish sends one publish; safe from any goroutine.
func publishHTTP(c *http.Client, u, body string) (int, []byte, error) {
	resp, err := c.Post(u, "application/json", strings.NewReader(body))
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	return resp.StatusCode, data, err
}

// Publishers racing with the same if_revision: exactly one wins each
// round, the others get 409 with the winner's revision, and nothing of
// theirs is committed.
func TestIfRevisionConcurrentPublishers(t *testing.T) {
	for _, withSchema := range []bool{false, true} {
		t.Run(fmt.Sprintf("schema=%v", withSchema), func(t *testing.T) {
			s := start(t)
			c := newClient(t)
			u := s.URL() + "/control/namespaces/app/publish"
			if withSchema { // a publish then validates outside the lock
				if err := s.SetSchema("app", []byte(`{"type":"object"}`)); err != nil {
					t.Fatal(err)
				}
			}
			const publishers, rounds = 6, 40
			var cur int64 // 0: the first round creates the namespace
			for round := range rounds {
				type result struct {
					status int
					body   []byte
					err    error
				}
				results := make([]result, publishers)
				var wg sync.WaitGroup
				gate := make(chan struct{})
				for p := range publishers {
					wg.Add(1)
					go func() {
						defer wg.Done()
						<-gate
						body := fmt.Sprintf(`{"puts":{"who":%d,"round":%d},"actor":"p%d","if_revision":%d}`, p, round, p, cur)
						st, data, err := publishHTTP(c, u, body)
						results[p] = result{st, data, err}
					}()
				}
				close(gate)
				wg.Wait()
				winner, won := -1, int64(0)
				for p, r := range results {
					if r.err != nil {
						t.Fatal(r.err)
					}
					switch r.status {
					case 200:
						if winner >= 0 {
							t.Fatalf("round %d: publishers %d and %d both won with if_revision %d", round, winner, p, cur)
						}
						winner, won = p, decode[controlapi.RevisionReply](t, r.body).Revision
					case 409:
					default:
						t.Fatalf("round %d: publisher %d: %d %s", round, p, r.status, r.body)
					}
				}
				if winner < 0 {
					t.Fatalf("round %d: nobody won", round)
				}
				for p, r := range results {
					if r.status == 409 {
						if eb := errorOf(t, r.body); eb.Error != transport.CodeConflict || eb.Revision != won {
							t.Fatalf("round %d: publisher %d's conflict %s; want revision %d", round, p, r.body, won)
						}
					}
				}
				h, err := s.History("app", 1, 0)
				if err != nil || h.Revisions[0].Revision != won || h.Revisions[0].Actor != fmt.Sprintf("p%d", winner) || h.Revisions[0].PrevRevision != cur {
					t.Fatalf("round %d: newest record %+v, %v; want revision %d by p%d", round, h, err, won, winner)
				}
				cur = won
			}
			if s.Head() != rounds {
				t.Fatalf("head %d after %d rounds: a losing publish committed", s.Head(), rounds)
			}
		})
	}
}

// The Go API's if_revision and its typed error.
func TestPublishWith(t *testing.T) {
	s := start(t)
	zero, one := int64(0), int64(1)
	if _, err := s.PublishWith("app", map[string]any{"a": 1}, nil, PublishOptions{IfRevision: &one}); err == nil {
		t.Fatal("if_revision 1 of a namespace that does not exist: no error")
	} else if ce := (*ConflictError)(nil); !errors.As(err, &ce) || ce.Revision != 0 || ce.IfRevision != 1 || ce.Namespace != "app" {
		t.Fatalf("err = %v; want a *ConflictError at revision 0", err)
	}
	rev, err := s.PublishWith("app", map[string]any{"a": 1}, nil, PublishOptions{Actor: "a", Reason: "r", IfRevision: &zero})
	if err != nil || rev != 1 {
		t.Fatalf("PublishWith if_revision 0 = %d, %v", rev, err)
	}
	if _, err := s.PublishWith("app", nil, []string{"a"}, PublishOptions{IfRevision: &zero}); !errors.As(err, new(*ConflictError)) {
		t.Fatalf("err = %v; want a *ConflictError", err)
	}
	if _, err := s.PublishWith("app", nil, nil, PublishOptions{Actor: "\t"}); !errors.Is(err, ErrInvalid) {
		t.Fatalf("err = %v; want ErrInvalid", err)
	}
	if rev, err = s.RollbackWith("app", 0, RollbackOptions{Actor: "b", Reason: "empty it"}); err != nil {
		t.Fatal(err)
	}
	h, _ := s.History("app", 0, 0)
	if r := h.Revisions[0]; r.Revision != rev || r.Kind != KindRollback || r.RollbackOf != 0 || r.Actor != "b" || len(r.Deletes) != 1 {
		t.Fatalf("rollback record %+v", r)
	}
	// Over HTTP a 409 for a namespace at revision 0 has no revision field
	// (omitempty): it reads as 0.
	c := newClient(t)
	resp, data := do(t, c, "POST", s.URL()+"/control/namespaces/fresh/publish", `{"if_revision":3}`)
	if eb := wantError(t, "if_revision of a fresh namespace", resp, data, 409, transport.CodeConflict); eb.Revision != 0 {
		t.Fatalf("conflict %s", data)
	}
	if _, err := s.History("fresh", 0, 0); !errors.Is(err, ErrUnknownNamespace) {
		t.Fatalf("a refused publish created its namespace: %v", err)
	}
}

// RestoreTo drops the records above the restore point; ResetStore starts a
// new history.
func TestAuditRestoreAndReset(t *testing.T) {
	s := start(t)
	c := newClient(t)
	for i := range 4 { // app 1..4
		if _, err := s.PublishWith("app", map[string]any{"k": i}, nil, PublishOptions{Actor: "a", Reason: fmt.Sprint(i)}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := s.Publish("late", map[string]any{"x": 1}); err != nil { // 5
		t.Fatal(err)
	}
	if resp, data := do(t, c, "POST", s.URL()+"/control/faults", `{"restore_to":2}`); resp.StatusCode != 200 {
		t.Fatalf("restore: %d %s", resp.StatusCode, data)
	}
	_, data := do(t, c, "GET", s.URL()+"/control/namespaces/app/history", "")
	if h := decode[History](t, data); len(h.Revisions) != 2 || h.Revisions[0].Revision != 2 {
		t.Fatalf("history after restore to 2: %s", data)
	}
	resp, data := do(t, c, "GET", s.URL()+"/control/namespaces/late/history", "")
	wantError(t, "history of a namespace born after the restore point", resp, data, 404, transport.CodeNotFound)
	resp, data = do(t, c, "GET", s.URL()+"/control/namespaces/app/values?revision=3", "")
	wantError(t, "values above the restored head", resp, data, 404, transport.CodeNotFound)

	// Revision 3 again, with other content and its own record.
	if resp, data = do(t, c, "POST", s.URL()+"/control/namespaces/app/publish", `{"puts":{"k":"again"},"actor":"c","if_revision":2}`); resp.StatusCode != 200 {
		t.Fatalf("publish after restore: %d %s", resp.StatusCode, data)
	}
	_, data = do(t, c, "GET", s.URL()+"/control/namespaces/app/values?revision=3", "")
	if v := decode[NamespaceValues](t, data); v.Revision != 3 || string(v.Values["k"]) != `"again"` {
		t.Fatalf("values at 3 after restore: %s", data)
	}
	if h, _ := s.History("app", 0, 0); len(h.Revisions) != 3 || h.Revisions[0].Actor != "c" || h.Revisions[1].Reason != "1" {
		t.Fatalf("history after restore and publish: %+v", h)
	}

	// A restore to 0 keeps a namespace with a schema, with no history.
	if err := s.SetSchema("app", []byte(`{}`)); err != nil {
		t.Fatal(err)
	}
	if err := s.RestoreTo(0); err != nil {
		t.Fatal(err)
	}
	if h, err := s.History("app", 0, 0); err != nil || len(h.Revisions) != 0 {
		t.Fatalf("History after restore to 0 = %+v, %v", h, err)
	}
	if _, err := s.ValuesAt("app", 0); !errors.Is(err, ErrNoRevision) {
		t.Fatalf("ValuesAt after restore to 0 = %v", err)
	}
	if _, err := s.Publish("app", map[string]any{"k": 1}); err != nil { // 1
		t.Fatal(err)
	}
	if v, err := s.ValuesAt("app", 1); err != nil || v.Revision != 1 {
		t.Fatalf("ValuesAt(1) after restore to 0 = %+v, %v", v, err)
	}

	// ResetStore: the old store's records are gone with it.
	s.ResetStore()
	resp, data = do(t, c, "GET", s.URL()+"/control/namespaces/app/history", "")
	wantError(t, "history after a reset", resp, data, 404, transport.CodeNotFound)
	if _, err := s.PublishWith("app", map[string]any{"k": 2}, nil, PublishOptions{Actor: "new"}); err != nil {
		t.Fatal(err)
	}
	if h, _ := s.History("app", 0, 0); len(h.Revisions) != 1 || h.Revisions[0].Revision != 1 || h.Revisions[0].Actor != "new" {
		t.Fatalf("history of the new store: %+v", h)
	}
}

// Commit times never go back, even when the clock does, so that a time
// names one revision.
func TestCommitTimesFollowRevisions(t *testing.T) {
	s := start(t)
	clk := withClock(s, t0)
	if _, err := s.Publish("app", map[string]any{"k": 1}); err != nil {
		t.Fatal(err)
	}
	clk.set(t0.Add(-time.Hour))
	if _, err := s.Publish("app", map[string]any{"k": 2}); err != nil {
		t.Fatal(err)
	}
	h, _ := s.History("app", 0, 0)
	if !h.Revisions[0].CommittedAt.Equal(t0) || !h.Revisions[1].CommittedAt.Equal(t0) {
		t.Fatalf("commit times %v, %v; want both %v", h.Revisions[0].CommittedAt, h.Revisions[1].CommittedAt, t0)
	}
	if v, err := s.ValuesAtTime("app", t0); err != nil || v.Revision != 2 {
		t.Fatalf("ValuesAtTime = %+v, %v; want revision 2", v, err)
	}
}

// The JSON of a diff's change omits an absent side.
func TestKeyChangeJSON(t *testing.T) {
	b, err := json.Marshal([]KeyChange{{Key: "a", New: json.RawMessage(`1`)}, {Key: "b", Old: json.RawMessage(`null`)}})
	if err != nil || !bytes.Equal(b, []byte(`[{"key":"a","new":1},{"key":"b","old":null}]`)) {
		t.Fatalf("%s, %v", b, err)
	}
}
