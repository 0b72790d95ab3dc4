package dataplane

import (
	"bytes"
	"compress/gzip"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"strings"
	"sync"
	"testing"

	"github.com/holdfast-dev/holdfast/internal/wire"
	"github.com/holdfast-dev/holdfast/transport"
)

// TestSnapshotBodyIsTheEncodedWhole: a reply written from the shared
// values (head, values, tail) is byte for byte what encoding the whole
// transport.Snapshot gives, and its gzip form (stored blocks around the
// shared compressed values) decodes to the same bytes, as one member.
func TestSnapshotBodyIsTheEncodedWhole(t *testing.T) {
	big := make(map[string]json.RawMessage)
	for i := range 2000 {
		big[fmt.Sprintf("key/%04d", i)] = json.RawMessage(fmt.Sprintf(`{"n":%d,"s":"<&>%s"}`, i, strings.Repeat("x", i%97)))
	}
	for _, tc := range []struct {
		name        string
		ns, storeID string
		values      map[string]json.RawMessage
		age         int64
		unconfirmed bool
	}{
		{"empty", "app", "s1", map[string]json.RawMessage{}, 0, false},
		{"aged", "app", "s1", map[string]json.RawMessage{"a": json.RawMessage(`1`)}, 1234, false},
		{"unconfirmed", "team.app-2", "store<&>", map[string]json.RawMessage{"k\u2028": json.RawMessage(`"v"`)}, 5, true},
		{"big", "big", "s2", big, 0, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			encoded, err := wire.EncodeValues(tc.values)
			if err != nil {
				t.Fatal(err)
			}
			want, err := json.Marshal(transport.Snapshot{Namespace: tc.ns, StoreID: tc.storeID, Revision: 7, Cursor: 9,
				CompactRevision: 3, Values: encoded, AgeMillis: tc.age, Unconfirmed: tc.unconfirmed})
			if err != nil {
				t.Fatal(err)
			}
			want = append(want, '\n')
			c := newSnapCache(DefaultSnapshotCacheBytes)
			plain, e, err := c.values(tc.ns, false, tc.values)
			if err != nil {
				t.Fatal(err)
			}
			head, tail := snapshotHead(tc.ns, tc.storeID, 7, 9, 3), snapshotTail(tc.age, tc.unconfirmed)
			if got := bytes.Join([][]byte{head, plain, tail}, nil); !bytes.Equal(got, want) {
				t.Fatalf("body\n%.300s\nwant\n%.300s", got, want)
			}
			var z bytes.Buffer
			if err := writeGzip(&z, head, plain, c.gzipped(e), tail); err != nil {
				t.Fatal(err)
			}
			zr, err := gzip.NewReader(&z)
			if err != nil {
				t.Fatal(err)
			}
			zr.Multistream(false) // one member, as readers that stop at the first expect
			got, err := io.ReadAll(zr)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got, want) {
				t.Fatalf("gzip body decodes to\n%.300s\nwant\n%.300s", got, want)
			}
			if rest, _ := io.ReadAll(&z); len(rest) != 0 {
				t.Fatalf("%d bytes after the member", len(rest))
			}
		})
	}
}

// TestSnapshotCacheSharesAndReplaces: concurrent readers of one content
// share one encoding; a new content (a new map) replaces it; the byte
// bound evicts the least recently used.
func TestSnapshotCacheSharesAndReplaces(t *testing.T) {
	c := newSnapCache(3 << 10)
	v1 := map[string]json.RawMessage{"k": json.RawMessage(`"` + strings.Repeat("a", 1000) + `"`)}
	var wg sync.WaitGroup
	got := make([][]byte, 16)
	for i := range got {
		wg.Go(func() { got[i], _, _ = c.values("ns", false, v1) })
	}
	wg.Wait()
	for _, g := range got[1:] {
		if &g[0] != &got[0][0] {
			t.Fatal("two encodings of one content")
		}
	}
	v2 := maps.Clone(v1)
	if p, _, _ := c.values("ns", false, v2); &p[0] == &got[0][0] {
		t.Fatal("a new content served the old encoding")
	}
	if c.lru.Len() != 1 {
		t.Fatalf("%d entries for one namespace", c.lru.Len())
	}
	// The base view is an entry of its own.
	if _, _, err := c.values("ns", true, v1); err != nil || c.lru.Len() != 2 {
		t.Fatalf("base view: %v, %d entries", err, c.lru.Len())
	}
	// Past 3 KiB (three 1 KiB entries), the least recently used goes.
	for i := range 3 {
		c.values(fmt.Sprintf("other-%d", i), false, v1)
	}
	if c.size > c.max {
		t.Fatalf("cache holds %d bytes, bound %d", c.size, c.max)
	}
	if _, ok := c.entries[snapKey{"ns", false}]; ok {
		t.Fatal("the least recently used entry stayed past the bound")
	}
	// An invalid value is an error for every reader, encoded or not.
	bad := map[string]json.RawMessage{"k": json.RawMessage(`{`)}
	for range 2 {
		if _, _, err := c.values("bad", false, bad); err == nil {
			t.Fatal("an invalid value encoded")
		}
	}
}

// BenchmarkSnapshotReply: the body of one reply of a 1 MiB namespace,
// encoded whole for each reader (as before the cache) against written
// around the shared encoding, plain and gzipped.
//
//	go test -run '^$' -bench SnapshotReply -benchmem ./internal/dataplane/
func BenchmarkSnapshotReply(b *testing.B) {
	values := make(map[string]json.RawMessage)
	for i := range 1024 {
		values[fmt.Sprintf("key/%04d", i)] = json.RawMessage(fmt.Sprintf(`"%d-%s"`, i, strings.Repeat("x", 1000)))
	}
	whole := func(gz bool) {
		encoded, _ := wire.EncodeValues(values)
		data, _ := json.Marshal(transport.Snapshot{Namespace: "big", StoreID: "s", Revision: 7, Cursor: 9, Values: encoded, AgeMillis: 12})
		data = append(data, '\n')
		if gz {
			zw := gzip.NewWriter(io.Discard)
			_, _ = zw.Write(data)
			_ = zw.Close()
		}
	}
	c := newSnapCache(DefaultSnapshotCacheBytes)
	shared := func(gz bool) {
		plain, e, _ := c.values("big", false, values)
		head, tail := snapshotHead("big", "s", 7, 9, 0), snapshotTail(12, false)
		if gz {
			_ = writeGzip(io.Discard, head, plain, c.gzipped(e), tail)
			return
		}
		_, _ = io.Discard.Write(head)
		_, _ = io.Discard.Write(plain)
		_, _ = io.Discard.Write(tail)
	}
	for _, gz := range []bool{false, true} {
		for name, f := range map[string]func(bool){"encoded-each": whole, "shared": shared} {
			b.Run(fmt.Sprintf("gzip=%v/%s", gz, name), func(b *testing.B) {
				b.ReportAllocs()
				for b.Loop() {
					f(gz)
				}
			})
		}
	}
}
