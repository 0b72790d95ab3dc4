package snapshot_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/holdfast-dev/holdfast/internal/snapshot"
	"github.com/holdfast-dev/holdfast/internal/wire"
	"github.com/holdfast-dev/holdfast/transport"
)

// The memory a snapshot costs the client, as multiples of its size on the
// wire (a 60 MiB snapshot of tiny keys once retained 749 MiB and peaked at
// 2.3 GiB). The worst case is the most keys per byte: keys of 1
// to 4 bytes, each with the value 0, about 8 bytes a key on the wire.
const (
	maxRetainedRatio  = 8  // what the built snapshot keeps
	maxAllocatedRatio = 25 // everything allocated to fetch, decode and build it
)

// keyAlphabet is the printable ASCII that a JSON string holds unescaped.
const keyAlphabet = "!#$%&'()*+,-./0123456789:;<=>?@ABCDEFGHIJKLMNOPQRSTUVWXYZ[]^_`abcdefghijklmnopqrstuvwxyz{|}~"

// tinyKeysBody is a GET /sdk/snapshot body of the shortest distinct keys,
// each with the value 0: n of them, or as many as fit in size bytes when
// n is 0.
func tinyKeysBody(n, size int) []byte {
	var b bytes.Buffer
	b.WriteString(`{"ns":"mem","store_id":"s1","revision":1,"cursor":1,"values":{`)
	keys := 0
	full := func(key []byte) bool {
		if n > 0 {
			return keys == n
		}
		return b.Len()+len(key)+8 > size
	}
	key := make([]byte, 0, 8)
	var gen func(depth int) bool // false when full
	gen = func(depth int) bool {
		if depth == 0 {
			if full(key) {
				return false
			}
			if keys > 0 {
				b.WriteByte(',')
			}
			b.WriteByte('"')
			b.Write(key)
			b.WriteString(`":0`)
			keys++
			return true
		}
		for i := 0; i < len(keyAlphabet); i++ {
			key = append(key, keyAlphabet[i])
			more := gen(depth - 1)
			key = key[:len(key)-1]
			if !more {
				return false
			}
		}
		return true
	}
	for l := 1; gen(l); l++ {
	}
	b.WriteString("}}")
	return b.Bytes()
}

// costs are what one fetch-decode-build cost, in bytes.
type costs struct {
	wire, retained, allocated uint64
	keys                      int
}

func (c costs) retainedX() float64  { return float64(c.retained) / float64(c.wire) }
func (c costs) allocatedX() float64 { return float64(c.allocated) / float64(c.wire) }

// measure serves body over loopback HTTP, fetches it with an HTTPSource
// made with opts and builds the snapshot, as the client does; it reports
// what that allocated and what the snapshot retains, the garbage collected
// before and after.
func measure(tb testing.TB, body []byte, opts ...transport.HTTPOption) (costs, error) {
	tb.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(body)
	}))
	defer srv.Close()
	src, err := transport.NewHTTPSource(srv.URL, opts...)
	if err != nil {
		tb.Fatal(err)
	}
	defer src.Close()
	var before, built, dropped runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	snap, err := fetchAndBuild(src)
	runtime.GC()
	runtime.ReadMemStats(&built)
	c := costs{wire: uint64(len(body)), allocated: built.TotalAlloc - before.TotalAlloc}
	if snap != nil {
		c.keys = snap.Len()
	}
	// What the snapshot retains is what letting it go frees.
	runtime.KeepAlive(snap)
	snap = nil
	runtime.GC()
	runtime.ReadMemStats(&dropped)
	if built.HeapAlloc > dropped.HeapAlloc {
		c.retained = built.HeapAlloc - dropped.HeapAlloc
	}
	return c, err
}

func fetchAndBuild(src *transport.HTTPSource) (*snapshot.Snapshot, error) {
	ts, err := src.Snapshot(context.Background(), transport.SnapshotRequest{Namespace: "mem"})
	if err != nil {
		return nil, err
	}
	return snapshot.BuildJSON(ts.Namespace, ts.StoreID, ts.Revision, ts.Values)
}

// TestSnapshotMemoryBound: the worst snapshot the client accepts (as many
// tiny keys as WithMaxSnapshotKeys allows by default) retains at most 8x
// and allocates at most 25x its size on the wire, fetch, decode and build
// together; a 60 MiB one of tiny keys is refused with ErrTooLarge, naming
// the limit, at the cost of reading it.
func TestSnapshotMemoryBound(t *testing.T) {
	defer goleak.VerifyNone(t)
	if testing.CoverMode() != "" || raceEnabled {
		t.Skip("instrumentation changes what is allocated")
	}
	// At the limit; and just past a power of two, where the index has
	// the most buckets per key.
	for _, keys := range []int{transport.DefaultMaxSnapshotKeys, transport.DefaultMaxSnapshotKeys/2 + 1} {
		c, err := measure(t, tinyKeysBody(keys, 0))
		if err != nil {
			t.Fatal(err)
		}
		if c.keys != keys {
			t.Fatalf("built %d keys, want %d", c.keys, keys)
		}
		t.Logf("%d keys, %d bytes on the wire: retained %.2fx, allocated %.2fx", c.keys, c.wire, c.retainedX(), c.allocatedX())
		if c.retainedX() > maxRetainedRatio {
			t.Errorf("%d keys retained %d bytes, %.2fx the wire; want at most %dx", keys, c.retained, c.retainedX(), maxRetainedRatio)
		}
		if c.allocatedX() > maxAllocatedRatio {
			t.Errorf("%d keys allocated %d bytes, %.2fx the wire; want at most %dx", keys, c.allocated, c.allocatedX(), maxAllocatedRatio)
		}
	}

	if testing.Short() {
		return
	}
	big := tinyKeysBody(0, 60<<20)
	c, err := measure(t, big)
	if !errors.Is(err, transport.ErrTooLarge) || !strings.Contains(err.Error(), strconv.Itoa(transport.DefaultMaxSnapshotKeys)) {
		t.Fatalf("60 MiB of tiny keys: error %v; want ErrTooLarge naming the limit", err)
	}
	t.Logf("60 MiB of tiny keys refused: allocated %.2fx, retained %d bytes", c.allocatedX(), c.retained)
	if c.allocatedX() > maxAllocatedRatio {
		t.Errorf("refusing allocated %.2fx the wire", c.allocatedX())
	}
}

// tinyKey is the i-th of the shortest distinct keys over keyAlphabet, in
// tinyKeysBody's order.
func tinyKey(i int) string {
	l, span := 1, len(keyAlphabet)
	for ; i >= span; l, span = l+1, span*len(keyAlphabet) {
		i -= span
	}
	b := make([]byte, l)
	for j := l - 1; j >= 0; j-- {
		b[j] = keyAlphabet[i%len(keyAlphabet)]
		i /= len(keyAlphabet)
	}
	return string(b)
}

// escapesBody is a GET /sdk/snapshot body of n keys, each tinyKey(i)
// written as key(tinyKey(i)), with the value value.
func escapesBody(n int, key func(string) string, value string) []byte {
	var b bytes.Buffer
	b.WriteString(`{"ns":"mem","store_id":"s1","revision":1,"cursor":1,"values":{`)
	for i := range n {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(`"` + key(tinyKey(i)) + `":` + value)
	}
	b.WriteString("}}")
	return b.Bytes()
}

// TestSnapshotMemoryBoundEscapes: the bound holds for the strings that
// cost the most to decode, those with escapes or bytes that are not
// UTF-8, as keys and as values.
func TestSnapshotMemoryBoundEscapes(t *testing.T) {
	defer goleak.VerifyNone(t)
	if testing.CoverMode() != "" || raceEnabled {
		t.Skip("instrumentation changes what is allocated")
	}
	same := func(k string) string { return k }
	n := transport.DefaultMaxSnapshotKeys/4 + 1 // just past a power of two: the most buckets per key
	for _, c := range []struct {
		name string
		body []byte
	}{
		{"escaped keys", escapesBody(n, func(k string) string { return `\/` + k }, `0`)},
		{"escaped values", escapesBody(n, same, `"\n"`)},
		{"values not UTF-8", escapesBody(n, same, "\"\xff\"")},
		{"keys not UTF-8", escapesBody(n, func(k string) string { return k + "\xff" }, `0`)},
	} {
		cs, err := measure(t, c.body)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if cs.keys != n {
			t.Fatalf("%s: built %d keys, want %d", c.name, cs.keys, n)
		}
		t.Logf("%s: %d keys, %d bytes on the wire: retained %.2fx, allocated %.2fx", c.name, cs.keys, cs.wire, cs.retainedX(), cs.allocatedX())
		if cs.retainedX() > maxRetainedRatio || cs.allocatedX() > maxAllocatedRatio {
			t.Errorf("%s: retained %.2fx and allocated %.2fx the wire; want at most %dx and %dx",
				c.name, cs.retainedX(), cs.allocatedX(), maxRetainedRatio, maxAllocatedRatio)
		}
	}
}

// BenchmarkSnapshotDecode fetches, decodes and builds snapshots of tiny
// keys over loopback HTTP: the most the default key limit lets in, and 60
// MiB of them with the limit raised to let it in. It reports the memory
// as multiples of the wire size (retained-x, alloc-x).
func BenchmarkSnapshotDecode(b *testing.B) {
	cases := []struct {
		name string
		body []byte
		opts []transport.HTTPOption
	}{
		{"1Mkeys", tinyKeysBody(transport.DefaultMaxSnapshotKeys, 0), nil},
		{"60MiB", tinyKeysBody(0, 60<<20), []transport.HTTPOption{transport.WithMaxSnapshotKeys(16 << 20)}},
	}
	for _, bc := range cases {
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(len(bc.body)))
			var c costs
			for b.Loop() {
				var err error
				if c, err = measure(b, bc.body, bc.opts...); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(c.retainedX(), "retained-x")
			b.ReportMetric(c.allocatedX(), "alloc-x")
			b.ReportMetric(float64(c.keys), "keys")
		})
	}
}

// TestApplyKeepsNoDeletedText: a snapshot that Apply makes from a built
// one keeps no more of the built one's text than its own values need, so
// that deleting the biggest value frees it; it retains at most
// maxRetainedRatio times its own size on the wire.
func TestApplyKeepsNoDeletedText(t *testing.T) {
	if testing.CoverMode() != "" || raceEnabled {
		t.Skip("instrumentation changes what is allocated")
	}
	var b strings.Builder
	b.WriteString(`{"big":"` + strings.Repeat("x", 4<<20) + `"`)
	for i := range 100 {
		fmt.Fprintf(&b, `,"key-%d":"value-%d","e%d":"\u00e9%d"`, i, i, i, i)
	}
	b.WriteString("}")
	base, err := snapshot.BuildJSON("ns", "s", 1, json.RawMessage(b.String()))
	if err != nil {
		t.Fatal(err)
	}
	next, err := base.Apply(2, time.Time{}, map[string]json.RawMessage{"new": json.RawMessage(`1`)}, []string{"big"})
	if err != nil {
		t.Fatal(err)
	}
	base = nil
	onWire, err := wire.EncodeValues(next.RawValues())
	if err != nil {
		t.Fatal(err)
	}
	var kept, dropped runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&kept)
	if v, ok := next.Get("e7"); !ok || v.String() != "é7" || string(v.Raw()) != `"\u00e97"` {
		t.Fatalf("e7 = %v (%s), %v", v, v.Raw(), ok)
	}
	runtime.KeepAlive(next)
	next = nil
	runtime.GC()
	runtime.ReadMemStats(&dropped)
	retained := int64(kept.HeapAlloc) - int64(dropped.HeapAlloc)
	t.Logf("after the big value's delete: retained %d bytes, %d on the wire", retained, len(onWire))
	if retained > maxRetainedRatio*int64(len(onWire)) {
		t.Errorf("the applied snapshot retains %d bytes, %.0fx its %d bytes on the wire; want at most %dx",
			retained, float64(retained)/float64(len(onWire)), len(onWire), maxRetainedRatio)
	}
}
