package cachedir

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/holdfast-dev/holdfast/internal/snapshot"
)

// benchRecord is a namespace of about 1 MiB: 5,000 keys of about 200 bytes
// of JSON each, objects and strings in turn.
func benchRecord(tb testing.TB) (*Record, map[string]json.RawMessage) {
	tb.Helper()
	const n = 5000
	raw := make(map[string]json.RawMessage, n)
	for i := 0; i < n; i++ {
		var v string
		if i%2 == 0 {
			v = fmt.Sprintf(`{"id":%d,"enabled":true,"ratio":0.25,"name":"feature-%d","tags":["a","b"],"pad":%q}`, i, i, strings.Repeat("x", 90))
		} else {
			v = fmt.Sprintf(`"value %d: %s"`, i, strings.Repeat("y", 180))
		}
		raw[fmt.Sprintf("service/feature-%05d/setting", i)] = json.RawMessage(v)
	}
	s, err := snapshot.Build("bench.ns", "store-1", 4182, raw)
	if err != nil {
		tb.Fatal(err)
	}
	return &Record{Namespace: "bench.ns", StoreID: "store-1", Revision: 4182, Cursor: 4190,
		ConfirmedAt: time.Now(), Snapshot: s}, raw
}

func benchDir(b *testing.B) (*Dir, *Record, map[string]json.RawMessage, []byte, string) {
	b.Helper()
	rec, raw := benchRecord(b)
	d, err := OpenDir(b.TempDir())
	if err != nil {
		b.Fatal(err)
	}
	if err := d.Save(rec); err != nil {
		b.Fatal(err)
	}
	path, _ := d.Path(rec.Namespace)
	data, err := os.ReadFile(path)
	if err != nil {
		b.Fatal(err)
	}
	return d, rec, raw, data, path
}

func BenchmarkLoad1MiB(b *testing.B) {
	d, _, _, data, _ := benchDir(b)
	b.SetBytes(int64(len(data)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := d.Load("bench.ns"); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkReadFile1MiB is Load's floor for I/O: os.ReadFile of the same file.
func BenchmarkReadFile1MiB(b *testing.B) {
	_, _, _, data, path := benchDir(b)
	b.SetBytes(int64(len(data)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := os.ReadFile(path); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkDecode1MiB is Load without the file system.
func BenchmarkDecode1MiB(b *testing.B) {
	_, _, _, data, _ := benchDir(b)
	b.SetBytes(int64(len(data)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Decode(data); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkBuild1MiB is Load's floor for decoding: Build of the same values
// from a map, as a snapshot from the network is built.
func BenchmarkBuild1MiB(b *testing.B) {
	_, _, raw, data, _ := benchDir(b)
	b.SetBytes(int64(len(data)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := snapshot.Build("bench.ns", "store-1", 1, raw); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkSave1MiB(b *testing.B) {
	d, rec, _, data, _ := benchDir(b)
	b.SetBytes(int64(len(data)))
	b.ReportAllocs()
	for b.Loop() {
		if err := d.Save(rec); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkEncode1MiB(b *testing.B) {
	_, rec, _, data, _ := benchDir(b)
	b.SetBytes(int64(len(data)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Encode(rec); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkWriteFileFsync1MiB is Save's floor: os.WriteFile of the same bytes
// in place, then fsync of the file (no temp file, rename or directory fsync,
// so not crash-safe).
func BenchmarkWriteFileFsync1MiB(b *testing.B) {
	_, _, _, data, path := benchDir(b)
	path = filepath.Join(filepath.Dir(path), "plain")
	b.SetBytes(int64(len(data)))
	b.ReportAllocs()
	for b.Loop() {
		if err := os.WriteFile(path, data, 0o600); err != nil {
			b.Fatal(err)
		}
		f, err := os.Open(path)
		if err != nil {
			b.Fatal(err)
		}
		if err := f.Sync(); err != nil {
			b.Fatal(err)
		}
		f.Close()
	}
}

// BenchmarkStatHeader1MiB is what Save adds to read the file it replaces:
// open, stream the checksum through a small buffer, parse the header.
func BenchmarkStatHeader1MiB(b *testing.B) {
	_, _, _, data, path := benchDir(b)
	b.SetBytes(int64(len(data)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := statHeader(path); err != nil {
			b.Fatal(err)
		}
	}
}
