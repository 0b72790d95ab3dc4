package snapshot

import (
	"encoding/json"
	"strings"
	"sync"
	"testing"
	"time"
)

// keyLengths are the lengths where the hash and sameKey change how they
// read a key: byte by byte, 4 or 8 bytes at a time, 16 or 48 a round.
var keyLengths = []int{0, 1, 2, 3, 4, 5, 7, 8, 9, 15, 16, 17, 31, 32, 33, 47, 48, 49, 63, 64, 65, 96, 97}

// TestGetKeyLengths: keys of every length the reads change at, sharing
// prefixes, are found, and a key that differs from one of them in one byte,
// anywhere, is not.
func TestGetKeyLengths(t *testing.T) {
	long := strings.Repeat("abcdefghijklmnopqrstuvwxyz0123456789", 3)
	raw := map[string]json.RawMessage{}
	for _, n := range keyLengths {
		raw[long[:n]] = json.RawMessage(`"` + long[:n] + `"`)
	}
	s, err := Build("ns", "s", 1, raw)
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range keyLengths {
		key := strings.Clone(long[:n]) // not the snapshot's own string
		if v, ok := s.Get(key); !ok || v.String() != key {
			t.Errorf("Get(%q) = %v, %v", key, v, ok)
		}
		for i := range n {
			b := []byte(key)
			b[i] ^= 0x20
			if v, ok := s.Get(string(b)); ok {
				t.Errorf("Get(%q), %q changed at byte %d, found %v", b, key, i, v)
			}
		}
		if _, ok := s.Get(key + "~"); ok { // no key has a '~'
			t.Errorf("Get of %q with a byte more found something", key)
		}
	}
}

// TestGetWhileApplying: readers Get from a built snapshot while new
// snapshots are made from it, some of which copy their texts out of its
// (go test -race).
func TestGetWhileApplying(t *testing.T) {
	raw := map[string]json.RawMessage{}
	for i := range 200 {
		raw[keyOf(i)] = json.RawMessage(`"\u0031"`)
		if i%2 == 0 {
			raw[keyOf(i)] = json.RawMessage(`"1"`)
		}
	}
	text, err := json.Marshal(raw)
	if err != nil {
		t.Fatal(err)
	}
	base, err := BuildJSON("ns", "s", 1, text)
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	done := make(chan struct{})
	for range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-done:
					return
				default:
				}
				for i := range 200 {
					if v, ok := base.Get(keyOf(i)); !ok || v.String() != "1" {
						t.Errorf("Get(%q) = %v, %v while applying", keyOf(i), v, ok)
						return
					}
				}
			}
		}()
	}
	compacted := false
	for rev := int64(2); rev < 200; rev++ {
		puts := map[string]json.RawMessage{keyOf(int(rev)): json.RawMessage(`2`), keyOf(1000 + int(rev)): json.RawMessage(`3`)}
		var deletes []string
		if rev%2 == 0 {
			deletes = []string{keyOf(int(rev) / 2)}
		}
		if rev%50 == 0 { // shrink: relayout
			for i := range 200 {
				deletes = append(deletes, keyOf(i))
			}
		}
		next, err := base.Apply(rev, time.Time{}, puts, deletes)
		if err != nil {
			t.Fatal(err)
		}
		compacted = compacted || next.text != base.text
	}
	close(done)
	wg.Wait()
	if !compacted {
		t.Error("no change copied its texts out of the built snapshot's")
	}
}

func keyOf(i int) string {
	return "key-" + strings.Repeat("x", i%20) + string(rune('a'+i%26)) + string(rune('a'+i/26%26)) + string(rune('a'+i/676))
}

// TestLayoutRoundsMustAgree: a fill whose adding round places more or
// fewer keys than its counting round counted fails the layout instead of
// corrupting the index. (A key swapped for another of the same bucket
// leaves a consistent index of other keys: not detectable, not corrupt.)
func TestLayoutRoundsMustAgree(t *testing.T) {
	for name, add := range map[string][]string{
		"one key fewer": {"a", "b"},
		"one key more":  {"a", "b", "c", "d"},
	} {
		_, err := layout(3, func(b *builder) error {
			for _, k := range []string{"a", "b", "c"} {
				b.count(k)
			}
			for _, k := range add {
				b.add(k)
			}
			return nil
		})
		if err == nil {
			t.Errorf("%s: layout succeeded", name)
		}
	}
}
