package rollout

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"testing"

	"github.com/holdfast-dev/holdfast/internal/snapshot"
)

func TestCount(t *testing.T) {
	for _, tc := range []struct {
		n    int
		pct  float64
		want int
	}{
		{0, 10, 0}, {1, 1, 1}, {100, 1, 1}, {100, 10, 10}, {100, 100, 100},
		{101, 1, 2}, {99, 10, 10}, {10, 0.5, 1}, {1000, 0.5, 5}, {3, 50, 2},
	} {
		if got := Count(tc.n, tc.pct); got != tc.want {
			t.Errorf("Count(%d, %v) = %d, want %d", tc.n, tc.pct, got, tc.want)
		}
	}
}

// TestCutCoversExactlyItsShare: a stage's cut puts exactly Count clients
// of those known in, and every later stage keeps them.
func TestCutCoversExactlyItsShare(t *testing.T) {
	const id = "r1"
	var clients []string
	var hashes []uint64
	for i := range 100 {
		c := fmt.Sprintf("client-%d", i)
		clients = append(clients, c)
		hashes = append(hashes, Hash(id, c))
	}
	var floor uint64
	in := map[string]bool{}
	for _, pct := range []float64{1, 10, 50, 100} {
		cut := Cut(hashes, pct, floor)
		s := &Staged{ID: id, Stage: pct, Cut: cut}
		n := 0
		for _, c := range clients {
			if s.Member(c) {
				n++
			} else if in[c] {
				t.Fatalf("stage %v: %s left the rollout", pct, c)
			}
			in[c] = in[c] || s.Member(c)
		}
		if want := Count(len(clients), pct); n != want {
			t.Errorf("stage %v: %d members, want %d", pct, n, want)
		}
		floor = cut
	}
	if got := Cut(nil, 100, 0); got != math.MaxUint64 {
		t.Errorf("Cut at 100%% = %x", got)
	}
	if got := Cut(hashes, 1, math.MaxUint64-1); got != math.MaxUint64-1 {
		t.Errorf("Cut below its floor: %x", got)
	}
}

func TestHashIsSeededByTheRollout(t *testing.T) {
	if Hash("a", "c") == Hash("b", "c") || Hash("a", "c") == Hash("a", "d") {
		t.Fatal("hash ignores an input")
	}
	if Hash("ab", "c") == Hash("a", "bc") {
		t.Fatal("hash does not separate id and client id")
	}
}

func TestEncodeDecode(t *testing.T) {
	s := &Staged{ID: "r-1", Stage: 10, Cut: 0x00ff00ff00ff00ff, Puts: map[string]json.RawMessage{"a": json.RawMessage(`{"x":1}`)},
		Deletes: []string{"b"}, Prevalidate: true}
	raw, err := Encode(s)
	if err != nil {
		t.Fatal(err)
	}
	got, err := Decode(raw)
	if err != nil {
		t.Fatal(err)
	}
	if got.ID != s.ID || got.Cut != s.Cut || got.Stage != s.Stage || !got.Prevalidate || string(got.Puts["a"]) != `{"x":1}` || len(got.Deletes) != 1 {
		t.Fatalf("round trip: %+v from %s", got, raw)
	}
	for _, bad := range []string{
		``, `[]`, `{}`, `{"id":"r","stage":10}`, `{"id":"r","stage":10,"cut":"xyz"}`,
		`{"id":"r","stage":0,"cut":"0000000000000000"}`, `{"id":"r","stage":101,"cut":"0000000000000000"}`,
		`{"id":"","stage":10,"cut":"0000000000000000"}`,
		`{"id":"r","stage":10,"cut":"0000000000000000","puts":{"$holdfast/x":1}}`,
		`{"id":"r","stage":10,"cut":"0000000000000000","puts":{"a":1},"deletes":["a"]}`,
		`{"id":"r","stage":10,"cut":"0000000000000000","puts":{"a b":1}}`,
		`{"id":"r","stage":10,"cut":"0000000000000000"} {}`,
	} {
		if _, err := Decode([]byte(bad)); !errors.Is(err, ErrMalformed) {
			t.Errorf("Decode(%s) = %v, want ErrMalformed", bad, err)
		}
	}
}

func TestServe(t *testing.T) {
	staged := func(cut uint64) json.RawMessage {
		raw, err := Encode(&Staged{ID: "r", Stage: 50, Cut: cut, Puts: map[string]json.RawMessage{"a": json.RawMessage(`2`), "new": json.RawMessage(`"n"`)}, Deletes: []string{"b"}})
		if err != nil {
			t.Fatal(err)
		}
		return raw
	}
	build := func(vals map[string]json.RawMessage) *snapshot.Snapshot {
		s, err := snapshot.Build("ns", "store", 7, vals)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	base := map[string]json.RawMessage{"a": json.RawMessage(`1`), "b": json.RawMessage(`true`)}

	plain := build(base)
	if v, err := Serve(plain, "c"); err != nil || v.Served != plain || v.Staged != nil {
		t.Fatalf("no rollout: %+v, %v", v, err)
	}
	for _, tc := range []struct {
		name   string
		cut    uint64
		member bool
		want   map[string]string
	}{
		{"member", math.MaxUint64, true, map[string]string{"a": "2", "new": `"n"`}},
		{"not a member", 0, false, map[string]string{"a": "1", "b": "true"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			with := map[string]json.RawMessage{Key: staged(tc.cut)}
			for k, v := range base {
				with[k] = v
			}
			v, err := Serve(build(with), "c")
			if err != nil {
				t.Fatal(err)
			}
			if v.Member != tc.member || v.Staged == nil || v.Served.Revision() != 7 {
				t.Fatalf("view %+v", v)
			}
			if v.Served.Len() != len(tc.want) {
				t.Fatalf("served %v, want %v", v.Served.Keys(), tc.want)
			}
			for k, want := range tc.want {
				if got, ok := v.Served.Get(k); !ok || string(got.Raw()) != want {
					t.Errorf("served %s = %s, want %s", k, got.Raw(), want)
				}
			}
			if _, ok := v.Candidate.Get("new"); !ok {
				t.Error("candidate lacks the staged change")
			}
		})
	}
	bad := build(map[string]json.RawMessage{Key: json.RawMessage(`{"id":"r"}`)})
	if _, err := Serve(bad, "c"); !errors.Is(err, ErrMalformed) {
		t.Fatalf("malformed rollout served: %v", err)
	}
}

func FuzzDecode(f *testing.F) {
	f.Add([]byte(`{"id":"r","stage":10,"cut":"00ff00ff00ff00ff","puts":{"a":1},"deletes":["b"],"prevalidate":true}`))
	f.Add([]byte(`{"id":"r","stage":100,"cut":"ffffffffffffffff"}`))
	f.Add([]byte(`{"id":1}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		s, err := Decode(data)
		if err != nil {
			if !errors.Is(err, ErrMalformed) {
				t.Fatalf("error not ErrMalformed: %v", err)
			}
			return
		}
		raw, err := Encode(s)
		if err != nil {
			t.Fatalf("decoded rollout does not encode: %v", err)
		}
		again, err := Decode(raw)
		if err != nil || again.Cut != s.Cut || again.ID != s.ID {
			t.Fatalf("re-decode: %+v, %v", again, err)
		}
	})
}
