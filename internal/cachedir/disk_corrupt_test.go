package cachedir

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// withCRC returns b with its trailing checksum recomputed, so a test (or the
// fuzzer) reaches the checks behind it.
func withCRC(b []byte) []byte {
	if len(b) < checksumLen {
		return b
	}
	b = bytes.Clone(b)
	body := b[:len(b)-checksumLen]
	binary.LittleEndian.PutUint32(b[len(body):], crc32.Checksum(body, castagnoli))
	return b
}

func encodeTest(tb testing.TB, rec *Record) []byte {
	tb.Helper()
	b, err := Encode(rec)
	if err != nil {
		tb.Fatal(err)
	}
	return b
}

// plant writes data as ns's file, bypassing Save.
func plant(tb testing.TB, d *Dir, ns string, data []byte) string {
	tb.Helper()
	p, err := d.Path(ns)
	if err != nil {
		tb.Fatal(err)
	}
	if err := os.WriteFile(p, data, 0o600); err != nil {
		tb.Fatal(err)
	}
	return p
}

// expectCorrupt loads ns and checks the file at p was refused as corrupt and
// moved aside whole, holding want (when not nil), and that a second load
// finds no file.
func expectCorrupt(tb testing.TB, d *Dir, ns, p string, want []byte) *CorruptError {
	tb.Helper()
	rec, err := d.Load(ns)
	if rec != nil {
		tb.Fatalf("a corrupt file was served: revision %d", rec.Revision)
	}
	var ce *CorruptError
	if !errors.As(err, &ce) || !errors.Is(err, ErrCorrupt) {
		tb.Fatalf("got %v, want a *CorruptError", err)
	}
	if ce.Path != p || ce.MovedTo != p+".corrupt" || ce.Reason == "" {
		tb.Fatalf("CorruptError %+v", ce)
	}
	if !strings.HasPrefix(err.Error(), "cache: ") {
		tb.Fatalf("unprefixed error %q", err)
	}
	if want != nil {
		got, err := os.ReadFile(ce.MovedTo)
		if err != nil || !bytes.Equal(got, want) {
			tb.Fatalf("moved-aside file differs: %v", err)
		}
	}
	if _, err := d.Load(ns); !errors.Is(err, fs.ErrNotExist) {
		tb.Fatalf("after moving aside, load gives %v, want not-exist", err)
	}
	return ce
}

func TestLoadTruncatedAtEveryOffset(t *testing.T) {
	d := openTestDir(t)
	full := encodeTest(t, testRecord(t, "ns", 17, 12, 40))
	for n := 0; n < len(full); n++ {
		p := plant(t, d, "ns", full[:n])
		expectCorrupt(t, d, "ns", p, full[:n])
	}
	p := plant(t, d, "ns", full)
	if _, err := d.Load("ns"); err != nil {
		t.Fatalf("the untruncated file: %v (%s)", err, p)
	}
}

func TestLoadBitFlips(t *testing.T) {
	d := openTestDir(t)
	full := encodeTest(t, testRecord(t, "ns", 17, 12, 40))
	// Every bit of every byte, in memory: CRC-32C catches every single-bit
	// error, and the header checks before it catch the rest.
	for i := range full {
		for bit := 0; bit < 8; bit++ {
			b := bytes.Clone(full)
			b[i] ^= 1 << bit
			if rec, err := Decode(b); err == nil || !errors.Is(err, ErrCorrupt) || rec != nil {
				t.Fatalf("flip of bit %d at byte %d: record %v, err %v", bit, i, rec != nil, err)
			}
		}
	}
	// One bit per byte through the file and Load.
	for i := range full {
		b := bytes.Clone(full)
		b[i] ^= 1 << (i % 8)
		p := plant(t, d, "ns", b)
		expectCorrupt(t, d, "ns", p, b)
	}
}

// readHeader, Save's look at the file it would replace, refuses every
// truncation and every bit flip of a file as Decode does, and reads the
// whole file's header right.
func TestReadHeaderDamage(t *testing.T) {
	rec := testRecord(t, "ns", 17, 12, 40)
	full := encodeTest(t, rec)
	check := func(what string, b []byte) {
		t.Helper()
		if _, err := readHeader(bytes.NewReader(b), int64(len(b))); !errors.Is(err, ErrCorrupt) {
			t.Fatalf("%s: %v, want ErrCorrupt", what, err)
		}
	}
	for n := 0; n < len(full); n++ {
		check(fmt.Sprintf("truncated to %d", n), full[:n])
		// A file that shrank or grew between stat and read.
		if _, err := readHeader(bytes.NewReader(full[:n]), int64(len(full))); !errors.Is(err, ErrCorrupt) {
			t.Fatalf("shrank to %d: %v", n, err)
		}
	}
	if _, err := readHeader(bytes.NewReader(append(bytes.Clone(full), 0)), int64(len(full))); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("grew: %v", err)
	}
	for i := range full {
		for bit := 0; bit < 8; bit++ {
			b := bytes.Clone(full)
			b[i] ^= 1 << bit
			check(fmt.Sprintf("flip of bit %d at byte %d", bit, i), b)
		}
	}
	h, err := readHeader(bytes.NewReader(full), int64(len(full)))
	if err != nil {
		t.Fatal(err)
	}
	if want := (header{"ns", "store-1", 17, 24, rec.ConfirmedAt.UnixNano()}); h != want {
		t.Fatalf("header %+v, want %+v", h, want)
	}
	if _, err := readHeader(bytes.NewReader(nil), MaxFileSize+1); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("oversized: %v", err)
	}
}

func TestLoadForeignAndMalformed(t *testing.T) {
	good := encodeTest(t, testRecord(t, "ns", 3, 4, 20))
	versioned := func(v uint16) []byte {
		b := bytes.Clone(good)
		binary.LittleEndian.PutUint16(b[len(formatMagic):], v)
		return withCRC(b)
	}
	flagged := bytes.Clone(good)
	binary.LittleEndian.PutUint16(flagged[len(formatMagic)+2:], 1)
	badMagic := bytes.Clone(good)
	copy(badMagic, "HFCACHE1")
	trailing := withCRC(append(bytes.Clone(good[:len(good)-checksumLen]), 0, 0, 0, 0, 0))
	cases := map[string]struct {
		data   []byte
		reason string
	}{
		"empty":          {nil, "empty"},
		"wrong magic":    {withCRC(badMagic), "magic"},
		"json":           {[]byte(`{"ns":"ns","values":{}}`), "magic"},
		"version 0":      {versioned(0), "version 0"},
		"version 2":      {versioned(2), "version 2"},
		"unknown flags":  {withCRC(flagged), "flags"},
		"bad checksum":   {append(bytes.Clone(good[:len(good)-1]), good[len(good)-1]^0xff), "checksum"},
		"trailing bytes": {trailing, "after the values"},
		"magic only":     {[]byte(formatMagic), "truncated"},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			d := openTestDir(t)
			p := plant(t, d, "ns", c.data)
			ce := expectCorrupt(t, d, "ns", p, c.data)
			if !strings.Contains(ce.Reason, c.reason) {
				t.Errorf("reason %q does not mention %q", ce.Reason, c.reason)
			}
		})
	}
}

func TestLoadOtherNamespace(t *testing.T) {
	var logs bytes.Buffer
	d, err := OpenDir(t.TempDir(), WithDirLogger(slog.New(slog.NewTextHandler(&logs, nil))))
	if err != nil {
		t.Fatal(err)
	}
	other := encodeTest(t, testRecord(t, "other", 3, 4, 20))
	p := plant(t, d, "ns", other)
	ce := expectCorrupt(t, d, "ns", p, other)
	if !strings.Contains(ce.Reason, `"other"`) {
		t.Errorf("reason %q", ce.Reason)
	}
	if !strings.Contains(logs.String(), "moved aside") {
		t.Errorf("not logged: %s", logs.String())
	}
}

func TestLoadDirectoryInPlace(t *testing.T) {
	for _, nonEmpty := range []bool{false, true} {
		d := openTestDir(t)
		p, _ := d.Path("ns")
		if err := os.Mkdir(p, 0o700); err != nil {
			t.Fatal(err)
		}
		if nonEmpty {
			if err := os.WriteFile(filepath.Join(p, "x"), []byte("x"), 0o600); err != nil {
				t.Fatal(err)
			}
		}
		expectCorrupt(t, d, "ns", p, nil)
		// With it moved aside, saving works again.
		rec := testRecord(t, "ns", 1, 2, 10)
		if err := d.Save(rec); err != nil {
			t.Fatal(err)
		}
		sameRecord(t, mustLoad(t, d, "ns"), rec)
	}
}

func TestLoadReplacesOlderCorrupt(t *testing.T) {
	d := openTestDir(t)
	p, _ := d.Path("ns")
	// An older .corrupt file, then a directory in the file's place: the
	// directory replaces the file.
	if err := os.WriteFile(p+".corrupt", []byte("old"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(p, 0o700); err != nil {
		t.Fatal(err)
	}
	expectCorrupt(t, d, "ns", p, nil)
	if fi, err := os.Stat(p + ".corrupt"); err != nil || !fi.IsDir() {
		t.Fatalf("older .corrupt not replaced: %v", err)
	}
	// Then an older .corrupt directory, replaced by a corrupt file.
	plant(t, d, "ns", []byte("new"))
	expectCorrupt(t, d, "ns", p, []byte("new"))
	// And a file by a file.
	plant(t, d, "ns", []byte("newer"))
	expectCorrupt(t, d, "ns", p, []byte("newer"))
}

func TestLoadOversized(t *testing.T) {
	d := openTestDir(t)
	p, _ := d.Path("ns")
	f, err := os.Create(p)
	if err != nil {
		t.Fatal(err)
	}
	// Sparse: no disk space is used, and Load must not read it.
	if err := f.Truncate(MaxFileSize + 1); err != nil {
		f.Close()
		t.Skipf("cannot make a sparse file: %v", err)
	}
	f.Close()
	ce := expectCorrupt(t, d, "ns", p, nil)
	if !strings.Contains(ce.Reason, "limit") {
		t.Errorf("reason %q", ce.Reason)
	}
}

func TestLoadCorruptCannotMove(t *testing.T) {
	if runtime.GOOS == "windows" {
		t.Skip("directory modes are not enforced on Windows")
	}
	d := openTestDir(t)
	p := plant(t, d, "ns", []byte("garbage"))
	if err := os.Chmod(d.path, 0o500); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.Chmod(d.path, 0o700) })
	if err := os.Rename(p, p+".probe"); err == nil {
		os.Rename(p+".probe", p)
		t.Skip("running with privileges that ignore directory permissions (root?): cannot make the move aside fail")
	}
	rec, err := d.Load("ns")
	var ce *CorruptError
	if rec != nil || !errors.As(err, &ce) || ce.MovedTo != "" {
		t.Fatalf("got %v, %v", rec, err)
	}
	if _, err := os.Stat(p); err != nil {
		t.Fatalf("file should stay: %v", err)
	}
}

// Decode checks lengths against what remains before allocating: a header
// claiming huge sizes costs nothing.
func TestDecodeHugeLengths(t *testing.T) {
	var b []byte
	b = append(b, formatMagic...)
	b = binary.LittleEndian.AppendUint16(b, formatVersion)
	b = binary.LittleEndian.AppendUint16(b, 0)
	b = appendBytes(b, "ns")
	b = appendBytes(b, "s")
	b = append(b, make([]byte, 24)...)
	head := b
	for _, tail := range [][]byte{
		binary.AppendUvarint(nil, 1<<62),                                   // count
		binary.AppendUvarint(binary.AppendUvarint(nil, 1), 1<<40),          // key length
		append(appendBytes(binary.AppendUvarint(nil, 1), "k"), 0xff, 0x7f), // value length
		binary.AppendUvarint(nil, ^uint64(0)),
		{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01}, // overlong varint
	} {
		data := withCRC(append(append(bytes.Clone(head), tail...), 0, 0, 0, 0))
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		_, err := Decode(data)
		runtime.ReadMemStats(&after)
		if !errors.Is(err, ErrCorrupt) {
			t.Fatalf("got %v", err)
		}
		if n := after.TotalAlloc - before.TotalAlloc; n > 64<<10 {
			t.Errorf("%d bytes allocated for a %d-byte file", n, len(data))
		}
	}
}

func TestDecodeRejects(t *testing.T) {
	mk := func(ns string, entries ...string) []byte {
		var b []byte
		b = append(b, formatMagic...)
		b = binary.LittleEndian.AppendUint16(b, formatVersion)
		b = binary.LittleEndian.AppendUint16(b, 0)
		b = appendBytes(b, ns)
		b = appendBytes(b, "s")
		b = append(b, make([]byte, 24)...)
		b = binary.AppendUvarint(b, uint64(len(entries)/2))
		for _, e := range entries {
			b = appendBytes(b, e)
		}
		return withCRC(append(b, 0, 0, 0, 0))
	}
	if _, err := Decode(mk("ns", "k", "1")); err != nil {
		t.Fatalf("the well-formed case: %v", err)
	}
	for name, data := range map[string][]byte{
		"bad namespace":   mk("../x", "k", "1"),
		"empty namespace": mk("", "k", "1"),
		"duplicate key":   mk("ns", "k", "1", "k", "2"),
		"invalid json":    mk("ns", "k", "{"),
		"empty value":     mk("ns", "k", ""),
		"two values":      mk("ns", "k", "1 2"),
	} {
		if rec, err := Decode(data); !errors.Is(err, ErrCorrupt) || rec != nil {
			t.Errorf("%s: got %v", name, err)
		}
	}
}

func fuzzSeeds(tb testing.TB) [][]byte {
	small := testRecord(tb, "payments.prod", 4182, 6, 30)
	empty := &Record{Namespace: "e", StoreID: "", Snapshot: emptySnapshot("e", "", 0)}
	return [][]byte{
		encodeTest(tb, small),
		encodeTest(tb, empty),
		encodeTest(tb, testRecord(tb, "a", 1, 1, 1)),
		nil,
		[]byte(formatMagic),
	}
}

// FuzzDecode feeds Decode arbitrary bytes, and the same bytes with a
// recomputed checksum so that the fuzzer explores the parser behind the
// checksum. Decode must not panic, and what it accepts must re-encode to a
// file that decodes to the same record. readHeader, Save's streaming look at
// the file it replaces, must accept what Decode accepts, with the same
// header, and refuse only as corrupt.
func FuzzDecode(f *testing.F) {
	for _, s := range fuzzSeeds(f) {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		for _, in := range [][]byte{data, withCRC(data)} {
			rec, err := Decode(in)
			h, herr := readHeader(bytes.NewReader(in), int64(len(in)))
			if herr != nil && !errors.Is(herr, ErrCorrupt) {
				t.Fatalf("readHeader: %v", herr)
			}
			if err == nil && (herr != nil || h.namespace != rec.Namespace || h.storeID != rec.StoreID ||
				h.revision != rec.Revision || h.cursor != rec.Cursor || !h.confirmedAt().Equal(rec.ConfirmedAt)) {
				t.Fatalf("Decode accepts %+v; readHeader gives %+v, %v", rec, h, herr)
			}
			if err != nil {
				if rec != nil || !errors.Is(err, ErrCorrupt) {
					t.Fatalf("error %v with record %v", err, rec)
				}
				continue
			}
			out, err := Encode(rec)
			if err != nil {
				t.Fatalf("a decoded record does not encode: %v", err)
			}
			again, err := Decode(out)
			if err != nil {
				t.Fatalf("re-encoded record does not decode: %v", err)
			}
			sameRecord(t, again, rec)
		}
	})
}

func TestLoadFIFO(t *testing.T) {
	if runtime.GOOS == "windows" {
		t.Skip("no FIFOs")
	}
	d := openTestDir(t)
	p, _ := d.Path("ns")
	if err := mkfifo(p); err != nil {
		t.Skipf("mkfifo: %v", err)
	}
	ce := expectCorrupt(t, d, "ns", p, nil)
	if !strings.Contains(ce.Reason, "regular") {
		t.Errorf("reason %q", ce.Reason)
	}
}
