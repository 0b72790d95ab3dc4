package snapshot

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
	"unsafe"

	"github.com/holdfast-dev/holdfast/internal/jsonscan"
)

func TestBuildJSON(t *testing.T) {
	s, err := BuildJSON("ns", "s1", 7, json.RawMessage(` {"a" : 1, "b":"x", "c\u00e9":{"d":[1,2]}, "e":"\u00e9", "f":"250ms", "g":-0, "h":9007199254740993} `))
	if err != nil {
		t.Fatal(err)
	}
	if s.Len() != 7 || s.Namespace() != "ns" || s.StoreID() != "s1" || s.Revision() != 7 {
		t.Fatalf("Len, Namespace, StoreID, Revision = %d, %s, %s, %d", s.Len(), s.Namespace(), s.StoreID(), s.Revision())
	}
	if got := s.Keys(); !slices.Equal(got, []string{"a", "b", "cé", "e", "f", "g", "h"}) {
		t.Errorf("Keys = %q", got)
	}
	for key, want := range map[string]string{"a": "1", "b": "x", "cé": `{"d":[1,2]}`, "e": "é", "f": "250ms", "g": "-0", "h": "9007199254740993"} {
		if v, ok := s.Get(key); !ok || v.String() != want {
			t.Errorf("Get(%q) = %v, %v; want %s", key, v, ok, want)
		}
	}
	if v, _ := s.Get("e"); string(v.Raw()) != `"\u00e9"` {
		t.Errorf("Raw of an escaped string = %s, want its text", v.Raw())
	}
	if v, _ := s.Get("f"); v.Kind() != KindString {
		t.Errorf("kind of f = %v", v.Kind())
	} else if d, ok := v.Duration(); !ok || d != 250*time.Millisecond {
		t.Errorf("Duration of f = %v, %v", d, ok)
	}
	if v, _ := s.Get("h"); v.Kind() != KindNumber {
		t.Errorf("kind of h = %v", v.Kind())
	} else if i, ok := v.Int64(); !ok || i != 9007199254740993 {
		t.Errorf("Int64 of h = %d, %v: an integer beyond 2^53 must stay exact", i, ok)
	}
	if _, ok := s.Get("absent"); ok {
		t.Error("Get of an absent key succeeded")
	}
	for _, empty := range []string{``, ` `, `{}`, " {\n} "} {
		s, err := BuildJSON("ns", "s1", 1, json.RawMessage(empty))
		if err != nil || s.Len() != 0 {
			t.Errorf("BuildJSON(%q) = %v, %v; want an empty snapshot", empty, s, err)
			continue
		}
		if _, ok := s.Get("a"); ok {
			t.Errorf("Get in an empty snapshot succeeded")
		}
	}
}

func TestBuildJSONRejects(t *testing.T) {
	for _, bad := range []string{`null`, `[]`, `"x"`, `{`, `{"a"}`, `{"a":}`, `{"a":1,}`, `{"a":1}x`, `{"a":01}`, `{a:1}`,
		`{"a":1 "b":2}`, `{"a":"\x01"}`, `{"a":"\q"}`, `{"a":[1,]}`, `{"a":tru}`, `{"a":1,"a":2}`, `{"a":1,"\u0061":2}`} {
		if _, err := BuildJSON("ns", "s", 1, json.RawMessage(bad)); err == nil {
			t.Errorf("BuildJSON(%q) succeeded; want an error", bad)
		}
	}
	// The error names its package once: "cache: values: not a JSON object: ...".
	for _, bad := range []string{`null`, `{"a":1,"a":2}`, `{"a":tru}`} {
		if _, err := BuildJSON("ns", "s", 1, json.RawMessage(bad)); err == nil || strings.Count(err.Error(), "cache:") != 1 {
			t.Errorf("BuildJSON(%q) error %q; want one \"cache:\"", bad, err)
		}
	}
	deep := `{"a":` + strings.Repeat("[", jsonscan.MaxDepth-1) + strings.Repeat("]", jsonscan.MaxDepth-1) + `}`
	if _, err := BuildJSON("ns", "s", 1, json.RawMessage(deep)); err != nil || !json.Valid([]byte(deep)) {
		t.Errorf("nesting at encoding/json's limit: %v (json.Valid %v)", err, json.Valid([]byte(deep)))
	}
	deeper := `{"a":` + strings.Repeat("[", jsonscan.MaxDepth) + strings.Repeat("]", jsonscan.MaxDepth) + `}`
	if _, err := BuildJSON("ns", "s", 1, json.RawMessage(deeper)); err == nil || json.Valid([]byte(deeper)) {
		t.Errorf("nesting past encoding/json's limit: %v (json.Valid %v)", err, json.Valid([]byte(deeper)))
	}
}

// TestBuildJSONCopies: the caller may reuse its buffer.
func TestBuildJSONCopies(t *testing.T) {
	buf := []byte(`{"a":"x","b":1}`)
	s, err := BuildJSON("ns", "s", 1, buf)
	if err != nil {
		t.Fatal(err)
	}
	for i := range buf {
		buf[i] = ' '
	}
	if v, _ := s.Get("a"); v.String() != "x" {
		t.Fatalf("after the caller's buffer changed, a = %v", v)
	}
}

// FuzzBuildJSON checks BuildJSON against encoding/json: it accepts the
// JSON objects json.Unmarshal decodes into a map (but those with a key
// twice), and each key's value is what NewValue makes of its text.
func FuzzBuildJSON(f *testing.F) {
	for _, s := range []string{`{}`, ` {"a":1,"b":[true,null],"c":{"d":"e"}} `, `{"k\u00e9y":"v\"al","x":-0.5e3}`,
		`{"a":1,"a":2}`, `{"a":1,"\u0061":2}`, "{\"\xff\":\"\xfe\"}", `{"a":"1h"}`, `null`, `{"a":[}`, `{"a":1,}`,
		`{"\ud800\udc00":1,"\ud800\ud800":2,"\udc00x":3,"\ud800\u0041":4,"\ud800":5}`, "{\"\xed\xa0\x80\":1,\"\xf0\x9f\x98\":2,\"\\/\\b\\f\\n\\r\\t\\\"\\\\\":3}"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, obj []byte) {
		s, err := BuildJSON("ns", "s", 1, obj)
		var m map[string]json.RawMessage
		jerr := json.Unmarshal(obj, &m)
		switch {
		case len(bytes.Trim(obj, " \t\r\n")) == 0:
			if err != nil || s.Len() != 0 {
				t.Fatalf("BuildJSON(%q) = %v; want an empty snapshot", obj, err)
			}
			return
		case jerr == nil && m == nil: // null
			if err == nil {
				t.Fatalf("BuildJSON(%q) succeeded on a non-object", obj)
			}
			return
		case jerr == nil && duplicateKey(obj):
			if err == nil || !strings.Contains(err.Error(), "appears twice") {
				t.Fatalf("BuildJSON(%q) = %v; want a duplicate key error", obj, err)
			}
			return
		case (err == nil) != (jerr == nil):
			t.Fatalf("BuildJSON(%q) error %v; json.Unmarshal error %v", obj, err, jerr)
		case err != nil:
			return
		}
		if s.Len() != len(m) {
			t.Fatalf("BuildJSON(%q).Len() = %d; json has %d keys", obj, s.Len(), len(m))
		}
		for k, raw := range m {
			v, ok := s.Get(k)
			if !ok {
				t.Fatalf("BuildJSON(%q): key %q missing", obj, k)
			}
			checkValue(t, v, raw, generic(t, raw))
		}
	})
}

// duplicateKey reports whether the JSON object obj names a key twice, as
// json.Unmarshal decodes keys.
func duplicateKey(obj []byte) bool {
	dec := json.NewDecoder(bytes.NewReader(obj))
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return false
	}
	seen := map[string]bool{}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return false
		}
		k, _ := tok.(string)
		if seen[k] {
			return true
		}
		seen[k] = true
		var skip json.RawMessage
		if dec.Decode(&skip) != nil {
			return false
		}
	}
	return false
}

// TestApplyMatchesMap applies random change sets and checks every
// snapshot against a plain map, across growth and shrinking of the index.
func TestApplyMatchesMap(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	want := map[string]json.RawMessage{}
	snap, err := Build("ns", "s", 0, want)
	if err != nil {
		t.Fatal(err)
	}
	for rev := int64(1); rev <= 400; rev++ {
		size := 1 + rng.IntN(40)
		if rev > 200 {
			size = rng.IntN(3) // mostly deletes: the index shrinks
		}
		puts := map[string]json.RawMessage{}
		for range size {
			k := "k" + strconv.Itoa(rng.IntN(300))
			puts[k] = json.RawMessage(strconv.Itoa(rng.IntN(1000)))
		}
		var deletes []string
		for range rng.IntN(10) + int(rev/200)*20 {
			deletes = append(deletes, "k"+strconv.Itoa(rng.IntN(300)))
		}
		next, err := snap.Apply(rev, time.Time{}, puts, deletes)
		if err != nil {
			t.Fatal(err)
		}
		before := maps.Clone(want)
		for _, k := range deletes {
			delete(want, k)
		}
		maps.Copy(want, puts)
		checkSnapshot(t, next, want)
		checkSnapshot(t, snap, before) // unchanged
		snap = next
	}
}

func checkSnapshot(t *testing.T, s *Snapshot, want map[string]json.RawMessage) {
	t.Helper()
	if s.Len() != len(want) {
		t.Fatalf("revision %d: Len = %d, want %d", s.Revision(), s.Len(), len(want))
	}
	for k, raw := range want {
		if v, ok := s.Get(k); !ok || string(v.Raw()) != string(raw) {
			t.Fatalf("revision %d: Get(%q) = %s, %v; want %s", s.Revision(), k, v.Raw(), ok, raw)
		}
	}
	for i := range 300 {
		k := "k" + strconv.Itoa(i)
		if _, ok := s.Get(k); ok != (want[k] != nil) {
			t.Fatalf("revision %d: Get(%q) found %v", s.Revision(), k, ok)
		}
	}
	if keys := s.Keys(); !slices.Equal(keys, slices.Sorted(maps.Keys(want))) {
		t.Fatalf("revision %d: Keys = %v", s.Revision(), keys)
	}
}

func TestApplyDeleteAndPutOneKey(t *testing.T) {
	base, err := BuildJSON("ns", "s", 1, json.RawMessage(`{"a":1,"b":2}`))
	if err != nil {
		t.Fatal(err)
	}
	next, err := base.Apply(2, time.Time{}, map[string]json.RawMessage{"a": json.RawMessage(`3`)}, []string{"a", "a", "b", "zz"})
	if err != nil {
		t.Fatal(err)
	}
	checkSnapshot(t, next, map[string]json.RawMessage{"a": json.RawMessage(`3`)})
	empty, err := next.Apply(3, time.Time{}, nil, []string{"a"})
	if err != nil {
		t.Fatal(err)
	}
	checkSnapshot(t, empty, map[string]json.RawMessage{})
	again, err := empty.Apply(4, time.Time{}, map[string]json.RawMessage{"c": json.RawMessage(`"x"`)}, nil)
	if err != nil {
		t.Fatal(err)
	}
	checkSnapshot(t, again, map[string]json.RawMessage{"c": json.RawMessage(`"x"`)})
}

func TestFromValuesAndRawAll(t *testing.T) {
	a, _ := NewValue([]byte(`1`))
	b, _ := NewValue([]byte(`"x"`))
	s := FromValues("ns", "s", 2, map[string]Value{"a": a, "b": b, "z": {}})
	if s.Len() != 3 {
		t.Fatalf("Len = %d", s.Len())
	}
	got := map[string]string{}
	for k, raw := range s.RawAll() {
		got[k] = string(raw)
	}
	if fmt.Sprint(got) != `map[a:1 b:"x" z:]` {
		t.Errorf("RawAll = %v", got)
	}
	if v, ok := s.Get("z"); !ok || v.Kind() != KindInvalid || v.Raw() != nil {
		t.Errorf("the zero Value kept = %v, %v", v, ok)
	}
}

// TestBuildJSONAllocationsPerSnapshot: BuildJSON allocates a few arrays
// per snapshot, not an object per key (strings with escapes aside).
func TestBuildJSONAllocationsPerSnapshot(t *testing.T) {
	if testing.CoverMode() != "" {
		t.Skip("coverage instrumentation allocates")
	}
	var b strings.Builder
	b.WriteByte('{')
	for i := range 1000 {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, `"key-%d":[%d,{"x":"y"}],"s%d":"250ms","f%d":2.5,"n%d":null`, i, i, i, i, i)
	}
	b.WriteByte('}')
	obj := json.RawMessage(b.String())
	allocs := testing.AllocsPerRun(10, func() {
		if _, err := BuildJSON("ns", "s", 1, obj); err != nil {
			t.Fatal(err)
		}
	})
	if allocs > 10 {
		t.Errorf("BuildJSON of 5,000 keys made %.0f allocations; want a few per snapshot", allocs)
	}
}

// collide returns n keys that fall in one bucket of x, found by trying.
func collide(x *index, n int, prefix string) []string {
	var keys []string
	want := uint64(1<<64-1) >> x.shift // the last bucket
	for i := 0; len(keys) < n; i++ {
		k := prefix + strconv.Itoa(i)
		if x.hashOf(k)>>x.shift == want {
			keys = append(keys, k)
		}
	}
	return keys
}

func maxGroup(x *index) int {
	most := 0
	for b := range x.buckets() {
		most = max(most, int(x.start[b+1]-x.start[b]))
	}
	return most
}

// TestCrowdedBucketRelaysOut: keys that crowd one bucket (a server that
// found the hash's key) make the index hash with hash/maphash instead, so
// that lookups and the duplicate check stay short.
func TestCrowdedBucketRelaysOut(t *testing.T) {
	var keys []string
	x, err := layout(maxBucket+8, func(b *builder) error {
		if keys == nil {
			keys = collide(&b.x, maxBucket+8, "k")
		}
		for _, k := range keys {
			b.count(k)
		}
		for _, k := range keys {
			if err := b.add(k).set(`1`); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if !x.strong || maxGroup(&x) > maxBucket {
		t.Fatalf("strong = %v, fullest bucket %d; want hash/maphash and at most %d", x.strong, maxGroup(&x), maxBucket)
	}
	s := &Snapshot{index: x}
	for _, k := range keys {
		if v, ok := s.Get(k); !ok || v.String() != "1" {
			t.Fatalf("Get(%q) = %v, %v", k, v, ok)
		}
	}
	// The read path stays allocation-free with hash/maphash too.
	if n := testing.AllocsPerRun(100, func() { s.Get(keys[0]); s.Get("absent") }); n != 0 {
		t.Errorf("Get on a relaid-out index allocates %v times", n)
	}
}

// TestApplyCrowdedBucketRelaysOut: puts that crowd one bucket of the
// applied snapshot's layout make the change lay it out again.
func TestApplyCrowdedBucketRelaysOut(t *testing.T) {
	want := map[string]json.RawMessage{}
	for i := range 2000 {
		want["base"+strconv.Itoa(i)] = json.RawMessage(`0`)
	}
	base, err := Build("ns", "s", 1, want)
	if err != nil {
		t.Fatal(err)
	}
	puts := map[string]json.RawMessage{}
	for _, k := range collide(&base.index, maxBucket+8, "put") {
		puts[k] = json.RawMessage(`1`)
	}
	next, err := base.Apply(2, time.Time{}, puts, nil)
	if err != nil {
		t.Fatal(err)
	}
	if maxGroup(&next.index) > maxBucket {
		t.Fatalf("fullest bucket after the change holds %d; want at most %d", maxGroup(&next.index), maxBucket)
	}
	maps.Copy(want, puts)
	for k, raw := range want {
		if v, ok := next.Get(k); !ok || string(v.Raw()) != string(raw) {
			t.Fatalf("Get(%q) = %s, %v; want %s", k, v.Raw(), ok, raw)
		}
	}
}

// TestKeyHashReadsOnlyTheKey: every length hashes the key's bytes and
// nothing past them (a key that is a prefix of a longer string hashes as
// the same key alone).
func TestKeyHashReadsOnlyTheKey(t *testing.T) {
	k := newKeyHash()
	long := strings.Repeat("abcdefghijklmnopqrstuvwxyz0123456789", 4)
	seen := map[uint64]int{}
	for n := 0; n <= len(long); n++ {
		h := k.sum(long[:n])
		if h != k.sum(strings.Clone(long[:n])) {
			t.Fatalf("length %d: the hash depends on more than the key", n)
		}
		if m, dup := seen[h]; dup {
			t.Fatalf("lengths %d and %d hash alike", m, n)
		}
		seen[h] = n
	}
}

// TestSizes holds the sizes the memory bound rests on (64-bit platforms).
func TestSizes(t *testing.T) {
	if unsafe.Sizeof(uintptr(0)) != 8 {
		t.Skip("sizes are for 64-bit platforms")
	}
	if got := unsafe.Sizeof(valueData{}); got != 24 {
		t.Errorf("valueData is %d bytes, want 24", got)
	}
	if entrySize != 40 {
		t.Errorf("an entry is %d bytes, want 40", entrySize)
	}
}

// TestApplyCompacts: as Apply deletes the values of a built snapshot, the
// new snapshots copy what they still use out of its text, and every
// snapshot, new and old, keeps its keys and values.
func TestApplyCompacts(t *testing.T) {
	var b strings.Builder
	want := map[string]string{} // key to String()
	raws := map[string]string{} // key to Raw()
	b.WriteByte('{')
	for i := range 64 {
		if i > 0 {
			b.WriteByte(',')
		}
		switch i % 4 {
		case 0:
			fmt.Fprintf(&b, `"plain-%d":"v%d"`, i, i)
			want[fmt.Sprintf("plain-%d", i)], raws[fmt.Sprintf("plain-%d", i)] = fmt.Sprintf("v%d", i), fmt.Sprintf(`"v%d"`, i)
		case 1:
			fmt.Fprintf(&b, `"esc\u00e9-%d":[%d, true]`, i, i)
			want[fmt.Sprintf("escé-%d", i)], raws[fmt.Sprintf("escé-%d", i)] = fmt.Sprintf("[%d, true]", i), fmt.Sprintf("[%d, true]", i)
		case 2:
			fmt.Fprintf(&b, `"s%d":"\u00e9\/%d"`, i, i)
			want[fmt.Sprintf("s%d", i)], raws[fmt.Sprintf("s%d", i)] = fmt.Sprintf("é/%d", i), fmt.Sprintf(`"\u00e9\/%d"`, i)
		case 3:
			fmt.Fprintf(&b, `"n%d":%d.5`, i, i)
			want[fmt.Sprintf("n%d", i)], raws[fmt.Sprintf("n%d", i)] = fmt.Sprintf("%d.5", i), fmt.Sprintf("%d.5", i)
		}
	}
	b.WriteByte('}')
	snap, err := BuildJSON("ns", "s", 1, json.RawMessage(b.String()))
	if err != nil {
		t.Fatal(err)
	}
	check := func(s *Snapshot, want, raws map[string]string) {
		t.Helper()
		if s.Len() != len(want) {
			t.Fatalf("revision %d: Len = %d, want %d", s.Revision(), s.Len(), len(want))
		}
		for k, w := range want {
			if v, ok := s.Get(k); !ok || v.String() != w || string(v.Raw()) != raws[k] {
				t.Fatalf("revision %d: Get(%q) = %v (%s), %v; want %s (%s)", s.Revision(), k, v, v.Raw(), ok, w, raws[k])
			}
		}
		n := 0
		for k, raw := range s.RawAll() {
			if n++; string(raw) != raws[k] {
				t.Fatalf("revision %d: RawAll gave %q: %s; want %s", s.Revision(), k, raw, raws[k])
			}
		}
	}
	compacted := 0
	keys := slices.Sorted(maps.Keys(want))
	type state struct {
		s          *Snapshot
		want, raws map[string]string
	}
	var history []state
	for rev := int64(2); len(keys) > 0; rev++ {
		history = append(history, state{snap, maps.Clone(want), maps.Clone(raws)})
		gone := keys[:min(5, len(keys))]
		keys = keys[len(gone):]
		put := fmt.Sprintf("put-%d", rev)
		next, err := snap.Apply(rev, time.Time{}, map[string]json.RawMessage{put: json.RawMessage(`"p"`)}, gone)
		if err != nil {
			t.Fatal(err)
		}
		for _, k := range gone {
			delete(want, k)
			delete(raws, k)
		}
		want[put], raws[put] = "p", `"p"`
		if next.text != snap.text {
			compacted++
		}
		if next.inText > len(next.text) || 2*next.inText < len(next.text) {
			t.Fatalf("revision %d: the entries take %d bytes of a text of %d", rev, next.inText, len(next.text))
		}
		check(next, want, raws)
		snap = next
	}
	for _, h := range history {
		check(h.s, h.want, h.raws) // unchanged by the compactions after them
	}
	if compacted < 2 || snap.text != "" {
		t.Errorf("compacted %d times, the last text %q; want a few, and none once no value of the built text is left", compacted, snap.text)
	}
}
