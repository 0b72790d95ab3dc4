package cachedir

import (
	"bytes"
	"errors"
	"io/fs"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/holdfast-dev/holdfast/internal/snapshot"
)

// ruleRecord returns a small record of "ns" of store at rev, confirmed at
// confirmed (Unix seconds; 0 = unknown).
func ruleRecord(tb testing.TB, store string, rev int64, confirmed int64) *Record {
	tb.Helper()
	r := testRecord(tb, "ns", rev, 2, 10)
	s, err := snapshot.Build("ns", store, rev, maps.Collect(r.Snapshot.RawAll()))
	if err != nil {
		tb.Fatal(err)
	}
	r.StoreID, r.Snapshot = store, s
	r.ConfirmedAt = time.Time{}
	if confirmed != 0 {
		r.ConfirmedAt = time.Unix(confirmed, 0)
	}
	return r
}

// The rule of Save over a record on disk: which records replace it and
// which are refused.
func TestSaveRule(t *testing.T) {
	const t0 = 1_790_000_000
	type rec struct {
		store     string
		rev       int64
		confirmed int64
		newHist   bool
	}
	cases := []struct {
		name      string
		disk      *rec // nil: no file
		save      rec
		supersede bool
	}{
		{"no file", nil, rec{"s", 1, t0, false}, false},
		{"higher revision", &rec{"s", 3, t0, false}, rec{"s", 4, t0 - 100, false}, false},
		{"lower revision", &rec{"s", 3, t0, false}, rec{"s", 1, t0 + 100, false}, true},
		{"lower revision, zero confirmation", &rec{"s", 3, 0, false}, rec{"s", 1, t0, false}, true},
		{"same revision confirmed later", &rec{"s", 3, t0, false}, rec{"s", 3, t0 + 1, false}, false},
		{"same revision confirmed at the same time", &rec{"s", 3, t0, false}, rec{"s", 3, t0, false}, false},
		{"same revision confirmed earlier", &rec{"s", 3, t0, false}, rec{"s", 3, t0 - 1, false}, true},
		{"same revision, confirmation unknown", &rec{"s", 3, t0, false}, rec{"s", 3, 0, false}, true},
		{"same revision, unknown on disk", &rec{"s", 3, 0, false}, rec{"s", 3, t0, false}, false},
		{"other store, lower revision", &rec{"s", 3, t0, false}, rec{"t", 1, t0 - 100, false}, false},
		{"other store, higher revision", &rec{"s", 3, t0, false}, rec{"t", 9, t0, false}, false},
		{"empty store id vs set", &rec{"", 3, t0, false}, rec{"s", 1, t0, false}, false},
		{"new history, lower revision", &rec{"s", 3, t0, false}, rec{"s", 1, t0, true}, false},
		{"new history, same revision confirmed earlier", &rec{"s", 3, t0, false}, rec{"s", 3, t0 - 1, true}, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			d := openTestDir(t)
			var disk *Record
			if c.disk != nil {
				disk = ruleRecord(t, c.disk.store, c.disk.rev, c.disk.confirmed)
				if err := d.Save(disk); err != nil {
					t.Fatal(err)
				}
			}
			r := ruleRecord(t, c.save.store, c.save.rev, c.save.confirmed)
			r.NewHistory = c.save.newHist
			err := d.Save(r)
			got := mustLoad(t, d, "ns")
			if !c.supersede {
				if err != nil {
					t.Fatalf("save: %v", err)
				}
				sameRecord(t, got, r)
				if got.NewHistory {
					t.Error("NewHistory came back from the file")
				}
				return
			}
			var se *SupersededError
			if !errors.Is(err, ErrSuperseded) || !errors.As(err, &se) {
				t.Fatalf("save: %v, want a *SupersededError", err)
			}
			want := SupersededError{Namespace: "ns", StoreID: r.StoreID,
				Revision: r.Revision, ConfirmedAt: r.ConfirmedAt,
				DiskRevision: disk.Revision, DiskConfirmedAt: disk.ConfirmedAt}
			if se.Namespace != want.Namespace || se.StoreID != want.StoreID || se.Revision != want.Revision ||
				se.DiskRevision != want.DiskRevision || !se.ConfirmedAt.Equal(want.ConfirmedAt) ||
				!se.DiskConfirmedAt.Equal(want.DiskConfirmedAt) {
				t.Fatalf("error %+v, want %+v", *se, want)
			}
			if !strings.HasPrefix(err.Error(), "cache: ") {
				t.Errorf("unprefixed error %q", err)
			}
			sameRecord(t, got, disk)
			assertNoTemp(t, d)
		})
	}
}

func TestSupersededErrorText(t *testing.T) {
	older := &SupersededError{Namespace: "payments", StoreID: "s1", Revision: 1, DiskRevision: 3}
	if got, want := older.Error(), `cache: save of namespace "payments" at revision 1 not written: the file holds revision 3 of store "s1"`; got != want {
		t.Errorf("got %q\nwant %q", got, want)
	}
	t0 := time.Date(2026, 1, 2, 3, 4, 5, 6, time.UTC)
	same := &SupersededError{Namespace: "payments", StoreID: "s1", Revision: 3, DiskRevision: 3,
		ConfirmedAt: t0, DiskConfirmedAt: t0.Add(time.Second)}
	if got, want := same.Error(), `cache: save of namespace "payments" at revision 3 confirmed 2026-01-02T03:04:05.000000006Z not written: the file holds it confirmed 2026-01-02T03:04:06.000000006Z`; got != want {
		t.Errorf("got %q\nwant %q", got, want)
	}
	if !errors.Is(same, ErrSuperseded) {
		t.Error("does not match ErrSuperseded")
	}
}

// A file on disk that cannot be served is replaced by the next save, whatever
// its header claims; one that cannot be read is not.
func TestSaveOverBadFile(t *testing.T) {
	newer := encodeTest(t, ruleRecord(t, "s", 9, 1_790_000_000))
	other := encodeTest(t, &Record{Namespace: "other", StoreID: "s", Revision: 9,
		Snapshot: emptySnapshot("other", "s", 9)})
	// A value turned invalid under a valid checksum: the header alone
	// looks newer.
	badValue := bytes.Clone(newer)
	i := bytes.Index(badValue, []byte(`{"id":0`))
	if i < 0 {
		t.Fatal("no value to damage")
	}
	badValue[i] = '!'
	badValue = withCRC(badValue)
	if _, err := Decode(badValue); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("damaged value decodes: %v", err)
	}
	flipped := bytes.Clone(newer)
	flipped[len(flipped)/2] ^= 1
	cases := map[string][]byte{
		"garbage":                   []byte("not a cache file at all, but long enough to have a header"),
		"empty":                     nil,
		"truncated":                 newer[:len(newer)-1],
		"grown":                     append(bytes.Clone(newer), 0),
		"bit flip":                  flipped,
		"other namespace":           other,
		"newer, a value not JSON":   badValue,
		"newer, trailing bytes":     withCRC(append(bytes.Clone(newer[:len(newer)-checksumLen]), 'x', 0, 0, 0, 0)),
		"newer, future version":     withCRC(append(append([]byte(formatMagic), 2, 0), newer[len(formatMagic)+2:]...)),
		"newer, unknown flags":      withCRC(append(append([]byte(formatMagic), 1, 0, 1, 0), newer[fixedHeaderLen:]...)),
		"header of a 2 KiB storeid": withCRC(append(append([]byte(formatMagic), 1, 0, 0, 0, 2, 'n', 's', 0x80, 0x10), make([]byte, 4100)...)),
	}
	for name, data := range cases {
		t.Run(name, func(t *testing.T) {
			var logs bytes.Buffer
			d, err := OpenDir(filepath.Join(t.TempDir(), "c"), WithDirLogger(slog.New(slog.NewTextHandler(&logs, nil))))
			if err != nil {
				t.Fatal(err)
			}
			plant(t, d, "ns", data)
			r := ruleRecord(t, "s", 1, 1_790_000_000)
			if err := d.Save(r); err != nil {
				t.Fatalf("save over a bad file: %v", err)
			}
			sameRecord(t, mustLoad(t, d, "ns"), r)
			if !strings.Contains(logs.String(), "replacing a") {
				t.Errorf("replacement not logged: %s", logs.String())
			}
		})
	}
	t.Run("not a regular file", func(t *testing.T) {
		if runtime.GOOS == "windows" {
			t.Skip("no FIFOs")
		}
		d := openTestDir(t)
		p, _ := d.Path("ns")
		if err := mkfifo(p); err != nil {
			t.Skipf("mkfifo: %v", err)
		}
		r := ruleRecord(t, "s", 1, 0)
		if err := d.Save(r); err != nil { // and it did not block opening the FIFO
			t.Fatal(err)
		}
		sameRecord(t, mustLoad(t, d, "ns"), r)
	})
	t.Run("unreadable", func(t *testing.T) {
		if runtime.GOOS == "windows" {
			t.Skip("symlinks need privileges on Windows")
		}
		// A symlink to itself cannot be opened, even by root.
		d := openTestDir(t)
		p, _ := d.Path("ns")
		if err := os.Symlink(filepath.Base(p), p); err != nil {
			t.Fatal(err)
		}
		err := d.Save(ruleRecord(t, "s", 1, 0))
		if err == nil || errors.Is(err, ErrSuperseded) || !strings.HasPrefix(err.Error(), "cache: ") {
			t.Fatalf("save over an unreadable file: %v, want a read error", err)
		}
		if fi, err := os.Lstat(p); err != nil || fi.Mode()&fs.ModeSymlink == 0 {
			t.Fatalf("the unreadable file was replaced: %v", err)
		}
		assertNoTemp(t, d)
	})
	t.Run("dangling symlink", func(t *testing.T) {
		if runtime.GOOS == "windows" {
			t.Skip("symlinks need privileges on Windows")
		}
		d := openTestDir(t)
		p, _ := d.Path("ns")
		if err := os.Symlink("nowhere", p); err != nil {
			t.Fatal(err)
		}
		r := ruleRecord(t, "s", 1, 0)
		if err := d.Save(r); err != nil {
			t.Fatal(err)
		}
		sameRecord(t, mustLoad(t, d, "ns"), r)
	})
}

// holdLock takes ns's lock on d as another process would, through a file
// of its own, and returns the function that releases it.
func holdLock(tb testing.TB, d *Dir, ns string) func() {
	tb.Helper()
	p, _ := d.Path(ns)
	f, err := os.OpenFile(p+lockExt, os.O_RDWR|os.O_CREATE, filePerm)
	if err != nil {
		tb.Fatal(err)
	}
	ok, err := tryLock(f)
	if err != nil || !ok {
		tb.Fatalf("take the lock: %v %v", ok, err)
	}
	tb.Cleanup(func() { f.Close() })
	return func() { f.Close() }
}

// A lock held beyond the timeout (a stuck or stopped process) fails the
// save with a deadline error and leaves the file and no temporary file.
func TestSaveLockTimeout(t *testing.T) {
	if !haveFlock {
		t.Skip("no locks on this platform")
	}
	d := openTestDir(t)
	first := ruleRecord(t, "s", 1, 0)
	if err := d.Save(first); err != nil {
		t.Fatal(err)
	}
	holdLock(t, d, "ns")
	d.lockTimeout = 20 * time.Millisecond
	waits := 0
	d.hookLockWait = func() { waits++ }
	err := d.Save(ruleRecord(t, "s", 2, 0))
	if !errors.Is(err, os.ErrDeadlineExceeded) || errors.Is(err, ErrSuperseded) || !strings.Contains(err.Error(), "ns.hfc.lock") {
		t.Fatalf("save while the lock is held: %v", err)
	}
	if waits < 2 {
		t.Errorf("polled the lock %d times", waits)
	}
	sameRecord(t, mustLoad(t, d, "ns"), first)
	assertNoTemp(t, d)
}

// A save waits for the lock and goes on once it is released.
func TestSaveWaitsForLock(t *testing.T) {
	if !haveFlock {
		t.Skip("no locks on this platform")
	}
	d := openTestDir(t)
	release := holdLock(t, d, "ns")
	waiting := make(chan struct{})
	var once sync.Once
	d.hookLockWait = func() { once.Do(func() { close(waiting) }) }
	r := ruleRecord(t, "s", 1, 0)
	saved := make(chan error, 1)
	go func() { saved <- d.Save(r) }()
	select {
	case <-waiting:
	case err := <-saved:
		t.Fatalf("saved (%v) while the lock was held", err)
	}
	p, _ := d.Path("ns")
	if _, err := os.Stat(p); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("a file appeared while the lock was held: %v", err)
	}
	release()
	if err := <-saved; err != nil {
		t.Fatal(err)
	}
	sameRecord(t, mustLoad(t, d, "ns"), r)
}

// Load moves a corrupt file aside under the lock; while another holds it, it
// leaves the file and says so.
func TestMoveAsideTakesLock(t *testing.T) {
	if !haveFlock {
		t.Skip("no locks on this platform")
	}
	var logs bytes.Buffer
	d, err := OpenDir(filepath.Join(t.TempDir(), "c"), WithDirLogger(slog.New(slog.NewTextHandler(&logs, nil))))
	if err != nil {
		t.Fatal(err)
	}
	p := plant(t, d, "ns", []byte("garbage"))
	release := holdLock(t, d, "ns")
	d.lockTimeout = 10 * time.Millisecond
	var ce *CorruptError
	if _, err := d.Load("ns"); !errors.As(err, &ce) || ce.MovedTo != "" {
		t.Fatalf("load with the lock held: %v", err)
	}
	if _, err := os.Stat(p); err != nil {
		t.Fatalf("the file was moved without the lock: %v", err)
	}
	if !strings.Contains(logs.String(), "cannot lock") {
		t.Errorf("not logged: %s", logs.String())
	}
	release()
	expectCorrupt(t, d, "ns", p, []byte("garbage"))
}

// Lock files are not namespace files, temporary files or corrupt files: the
// sweep leaves them, however old, and they do not collide with namespaces
// whose names end like them.
func TestLockFilesNames(t *testing.T) {
	if !haveFlock {
		t.Skip("no lock files on this platform")
	}
	p := filepath.Join(t.TempDir(), "c")
	d, err := OpenDir(p)
	if err != nil {
		t.Fatal(err)
	}
	names := []string{"x", "x.hfc", "x.lock", "x.hfc.lock", "x.hfc.corrupt"}
	var recs []*Record
	for i, ns := range names {
		r := testRecord(t, ns, int64(i+1), 1, 10)
		if err := d.Save(r); err != nil {
			t.Fatal(err)
		}
		recs = append(recs, r)
	}
	old := time.Now().Add(-2 * staleTempAge)
	ents, err := os.ReadDir(p)
	if err != nil {
		t.Fatal(err)
	}
	var locks []string
	for _, e := range ents {
		if isTempName(e.Name()) {
			t.Errorf("%s taken for a temporary file", e.Name())
		}
		if strings.HasSuffix(e.Name(), fileExt+lockExt) {
			locks = append(locks, e.Name())
			if err := os.Chtimes(filepath.Join(p, e.Name()), old, old); err != nil {
				t.Fatal(err)
			}
		}
	}
	if len(locks) != len(names) {
		t.Fatalf("lock files %v for namespaces %v", locks, names)
	}
	for _, n := range []string{".x.hfc.lock", ".x.hfc1.lock", ".x.hfc.lock1"} {
		if isTempName(n) {
			t.Errorf("%s taken for a temporary file", n)
		}
	}
	if _, err := OpenDir(p); err != nil {
		t.Fatal(err)
	}
	for _, l := range locks {
		if _, err := os.Stat(filepath.Join(p, l)); err != nil {
			t.Errorf("lock file %s swept: %v", l, err)
		}
	}
	for i, ns := range names {
		sameRecord(t, mustLoad(t, d, ns), recs[i])
	}
}

// Saves racing in one process, through one Dir and through several on the
// same directory (whose locks exclude each other as another process's do):
// the file never goes back and ends holding the newest saved.
func TestDirConcurrentSavesKeepNewest(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "c")
	shared, err := OpenDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	dirs := []*Dir{shared, shared}
	if haveFlock { // without locks, only one Dir's saves are ordered
		for range 2 {
			d, err := OpenDir(dir)
			if err != nil {
				t.Fatal(err)
			}
			dirs = append(dirs, d)
		}
	}
	type result struct {
		acked int64
		err   error
	}
	results := make(chan result, len(dirs))
	for _, d := range dirs {
		go func() {
			acked, err := raceSaves(d)
			results <- result{acked, err}
		}()
	}
	var acked int64
	left := len(dirs)
	w := watchMonotonic(t, shared, func() bool {
		select {
		case r := <-results:
			if r.err != nil {
				t.Error(r.err)
			}
			acked = max(acked, r.acked)
			left--
		default:
		}
		return left == 0
	})
	checkFinal(t, shared, w, acked)
}
