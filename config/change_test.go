package config

import (
	"encoding/json"
	"fmt"
	"reflect"
	"testing"
	"time"

	"github.com/holdfast-dev/holdfast/internal/snapshot"
)

func mustBuild(t testing.TB, rev int64, kv map[string]string) *snapshot.Snapshot {
	t.Helper()
	raw := make(map[string]json.RawMessage, len(kv))
	for k, v := range kv {
		raw[k] = json.RawMessage(v)
	}
	s, err := snapshot.Build("ns", "store", rev, raw)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// describe renders changes as "key:old>new@rev" for compact comparisons.
func describe(changes []Change) []string {
	out := make([]string, len(changes))
	for i, ch := range changes {
		out[i] = fmt.Sprintf("%s:%s>%s@%d", ch.Key, ch.Old.Raw(), ch.New.Raw(), ch.Revision)
	}
	return out
}

func TestDiff(t *testing.T) {
	tests := []struct {
		name     string
		old, new map[string]string
		want     []string
	}{
		{"from nothing", nil, map[string]string{"b": "2", "a": "1"}, []string{"a:>1@2", "b:>2@2"}},
		{"unchanged", map[string]string{"a": "1"}, map[string]string{"a": "1"}, []string{}},
		{"put delete change", map[string]string{"a": "1", "b": "2"}, map[string]string{"a": "3", "c": `"x"`},
			[]string{"a:1>3@2", "b:2>@2", `c:>"x"@2`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var old *snapshot.Snapshot
			if tt.old != nil {
				old = mustBuild(t, 1, tt.old)
			}
			got := describe(diff("ns", old, mustBuild(t, 2, tt.new)))
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("diff = %q; want %q", got, tt.want)
			}
		})
	}
}

func TestChangedKeys(t *testing.T) {
	old := mustBuild(t, 1, map[string]string{"a": "1", "b": "2", "same": "5"})
	puts := map[string]json.RawMessage{"a": json.RawMessage(`9`), "same": json.RawMessage(`5`), "new": json.RawMessage(`true`)}
	deletes := []string{"b", "b", "absent"}
	next, err := old.Apply(4, time.Time{}, puts, deletes)
	if err != nil {
		t.Fatal(err)
	}
	got := describe(changedKeys("ns", old, next, puts, deletes))
	want := []string{"a:1>9@4", "b:2>@4", "new:>true@4"}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("changedKeys = %q; want %q", got, want)
	}
}

func TestCoalesce(t *testing.T) {
	v := func(s string) Value {
		if s == "" {
			return Value{}
		}
		return testValue(t, s)
	}
	ch := func(key, old, new string, rev int64) Change {
		return Change{Key: key, Old: v(old), New: v(new), Revision: rev}
	}
	sets := []ChangeSet{
		{Revision: 2, PrevRevision: 1, Changes: []Change{ch("a", "1", "2", 2), ch("b", "1", "5", 2)}},
		{Revision: 3, PrevRevision: 2, Changes: []Change{ch("a", "2", "3", 3), ch("c", "", "7", 3)}},
		{Revision: 4, PrevRevision: 3, Changes: []Change{ch("b", "5", "1", 4)}}, // b back where it started
	}
	got := coalesce(sets)
	if got.Revision != 4 || got.PrevRevision != 1 || !got.Coalesced {
		t.Errorf("coalesce header = %d/%d/%v", got.Revision, got.PrevRevision, got.Coalesced)
	}
	want := []string{"a:1>3@3", "c:>7@3"}
	if d := describe(got.Changes); !reflect.DeepEqual(d, want) {
		t.Errorf("coalesce changes = %q; want %q", d, want)
	}
}
