package dataplane

import (
	"bytes"
	"encoding/json"
	"maps"
	"slices"
	"strings"
	"testing"

	"github.com/holdfast-dev/holdfast/internal/rollout"
	"github.com/holdfast-dev/holdfast/transport"
)

// rawBase is the base view of a change set that came on the wire as data,
// as a relay serves it to a client that predates rollouts.
func rawBase(t testing.TB, data string) (in, out transport.ChangeSet, ok bool) {
	t.Helper()
	// What the HTTP source takes (decodeAnyChangeSet): the others never
	// reach a relay.
	if err := json.Unmarshal([]byte(data), &in); err != nil || in.Namespace == "" || in.StoreID == "" ||
		in.Revision <= 0 || in.PrevRevision < 0 || in.PrevRevision >= in.Revision {
		return in, out, false
	}
	in.Raw = json.RawMessage(data)
	return in, stripChangeSet(in), true
}

var stripSeeds = []string{
	`{"ns":"app","revision":2,"prev_revision":1,"store_id":"s","committed_at":"2026-01-01T00:00:00Z","puts":{"a":1}}`,
	`{"ns":"app","revision":2,"prev_revision":1,"store_id":"s","committed_at":"2026-01-01T00:00:00Z","puts":{"a":1,"$holdfast/rollout":{"id":"r"}},"deletes":["b"]}`,
	`{"ns":"app","revision":3,"prev_revision":2,"store_id":"s","committed_at":"2026-01-01T00:00:00Z","puts":{"$holdfast/rollout":{"id":"r"}}}`,
	`{"ns":"app","revision":4,"prev_revision":3,"store_id":"s","committed_at":"2026-01-01T00:00:00Z","deletes":["$holdfast/rollout"]}`,
	`{"future":{"puts":{"$holdfast/x":1}},"ns":"app","revision":5,"prev_revision":4,"store_id":"s","puts":{"$holdfast/x":[1,2]},"tail":[true,null]}`,
	`{"ns":"app","revision":2,"prev_revision":1,"store_id":"s","PUTS":{"$holdfast/rollout":1},"Deletes":["$holdfast/a","k"]}`,
	`{"ns":"app","revision":2,"prev_revision":1,"store_id":"s","puts":{"$holdfast/rollout":1},"puts":{"a":2}}`,
	`{"ns":"app","revision":2,"prev_revision":1,"store_id":"s","puts":{"$holdfast/rollout":1},"puts":null}`,
	`{"ns":"app","revision":2,"prev_revision":1,"store_id":"s","\u0070uts":{"$holdfast/rollout":1,"a":{"b" : [ 1 , 2 ]}}}`,
	` { "ns" : "app" , "revision" : 2 , "prev_revision" : 1 , "store_id" : "s" , "puts" : { "$holdfast/r" : "x" } , "x<y>&" : "\u2028" } `,
	`{"ns":"app","revision":2,"prev_revision":1,"store_id":"s","puts":{},"deletes":[]}`,
	`{"ns":"app","revision":2,"prev_revision":1,"store_id":"s","deleteſ":["$holdfast/rollout"],"pUtS":{"$holdfast/q":0}}`,
	`{"ns":"\u0061pp","revision":9,"prev_revision":0,"store_id":"s","committed_at":"2026-01-01T00:00:00.123456789+02:00","puts":{"\u0024holdfast/rollout":1,"\ud800":2}}`,
}

func TestStripRaw(t *testing.T) {
	const head = `{"ns":"app","revision":2,"prev_revision":1,"store_id":"s"`
	for _, tc := range []struct{ in, want string }{
		{head + `,"puts":{"a":1,"$holdfast/rollout":{"id":"r"}},"deletes":["b"],"x":1}`, head + `,"x":1,"puts":{"a":1},"deletes":["b"]}`},
		// Only reserved keys: an empty change, the rest as it came.
		{head + `,"puts":{"$holdfast/rollout":{"id":"r"}},"x":{"puts":{"$holdfast/y":1}}}`, head + `,"x":{"puts":{"$holdfast/y":1}}}`},
		{head + `,"deletes":["$holdfast/rollout"]}`, head + `}`},
		// What encoding/json takes for puts and deletes, however spelt
		// or repeated, is what goes.
		{head + `,"PUTS":{"$holdfast/rollout":1},"Deletes":["$holdfast/a","k"]}`, head + `,"deletes":["k"]}`},
		{head + `,"puts":{"$holdfast/rollout":1},"puts":{"a":2}}`, head + `,"puts":{"a":2}}`},
		{head + `,"puts":{"$holdfast/rollout":1},"puts":null}`, head + `}`},
		{head + `,"\u0070uts":{"$holdfast/rollout":1,"a":[ 1 ]}}`, head + `,"puts":{"a":[ 1 ]}}`},
	} {
		_, out, ok := rawBase(t, tc.in)
		if !ok {
			t.Fatalf("%s does not decode", tc.in)
		}
		if string(out.Raw) != tc.want {
			t.Errorf("strip %s\n got %s\nwant %s", tc.in, out.Raw, tc.want)
		}
	}
	if _, err := stripRaw([]byte(`{"a":1} x`), nil, nil); err == nil {
		t.Error("data after the object: no error")
	}
	if _, err := stripRaw([]byte(`[1]`), nil, nil); err == nil {
		t.Error("an array: no error")
	}
}

// FuzzStripRaw: for every change set a source accepts, the base view's
// bytes decode to the same change set without its reserved keys, every
// other member as it came, and stripping them again changes nothing.
func FuzzStripRaw(f *testing.F) {
	for _, s := range stripSeeds {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, data string) {
		in, out, ok := rawBase(t, data)
		if !ok {
			return
		}
		if out.Raw == nil {
			t.Fatalf("no bytes for the base of %q", data)
		}
		var got transport.ChangeSet
		if err := json.Unmarshal(out.Raw, &got); err != nil {
			t.Fatalf("base %q of %q: %v", out.Raw, data, err)
		}
		if got.Namespace != in.Namespace || got.Revision != in.Revision || got.PrevRevision != in.PrevRevision ||
			got.StoreID != in.StoreID || !got.CommittedAt.Equal(in.CommittedAt) {
			t.Fatalf("base %q of %q: %+v, want the fields of %+v", out.Raw, data, got, in)
		}
		wantPuts := maps.Clone(in.Puts)
		maps.DeleteFunc(wantPuts, func(k string, _ json.RawMessage) bool { return rollout.Reserved(k) })
		wantDeletes := slices.DeleteFunc(slices.Clone(in.Deletes), rollout.Reserved)
		if !maps.EqualFunc(got.Puts, wantPuts, func(a, b json.RawMessage) bool { return bytes.Equal(a, b) }) ||
			!slices.Equal(got.Deletes, wantDeletes) {
			t.Fatalf("base %q of %q: puts %q deletes %q, want %q %q", out.Raw, data, got.Puts, got.Deletes, wantPuts, wantDeletes)
		}
		if !maps.EqualFunc(got.Puts, out.Puts, func(a, b json.RawMessage) bool { return bytes.Equal(a, b) }) || !slices.Equal(got.Deletes, out.Deletes) {
			t.Fatalf("base %q of %q: its bytes and its change set differ", out.Raw, data)
		}
		var inAll, outAll map[string]json.RawMessage
		if json.Unmarshal([]byte(data), &inAll) != nil || json.Unmarshal(out.Raw, &outAll) != nil {
			t.Fatalf("base %q of %q: not objects", out.Raw, data)
		}
		for k, v := range inAll {
			if strings.EqualFold(k, "puts") || strings.EqualFold(k, "deletes") {
				continue
			}
			if !bytes.Equal(outAll[k], v) {
				t.Fatalf("base %q of %q: member %q is %q, want %q", out.Raw, data, k, outAll[k], v)
			}
		}
		for k := range outAll {
			if _, ok := inAll[k]; !ok && k != "puts" && k != "deletes" {
				t.Fatalf("base %q of %q: member %q from nowhere", out.Raw, data, k)
			}
		}
		got.Raw = out.Raw
		if again := stripChangeSet(got); !bytes.Equal(again.Raw, out.Raw) {
			t.Fatalf("stripped twice %q, once %q", again.Raw, out.Raw)
		}
	})
}
