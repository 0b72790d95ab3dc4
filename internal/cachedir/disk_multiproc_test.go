package cachedir

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/holdfast-dev/holdfast/internal/snapshot"
)

// The child process of the tests below is this test binary, run again with
// multiDirEnv naming the cache directory and multiModeEnv what to do. It
// takes its orders on stdin and reports on stdout, one line each.
const (
	multiDirEnv  = "HOLDFAST_CACHE_MULTI_DIR"
	multiModeEnv = "HOLDFAST_CACHE_MULTI_MODE"
)

// TestMultiChild is the child process of the two-process tests.
func TestMultiChild(t *testing.T) {
	dir := os.Getenv(multiDirEnv)
	if dir == "" {
		t.Skip("helper process of the two-process tests")
	}
	d, err := OpenDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	in := bufio.NewScanner(os.Stdin)
	fmt.Println("ready")
	if !in.Scan() {
		t.Fatal("no order from the parent")
	}
	switch mode := os.Getenv(multiModeEnv); mode {
	case "save-r1":
		// A client that fetched r1, was partitioned, and saves on Close.
		fmt.Printf("result %v\n", d.Save(multiRecord(t, 1, time.Now())))
	case "pause-r2":
		// Save r2 over the parent's r1, stopping after the comparison
		// until the parent says go.
		d.hookBeforeCommit = func() {
			fmt.Println("compared")
			in.Scan()
		}
		fmt.Printf("result %v\n", d.Save(multiRecord(t, 2, time.Now())))
	case "race":
		acked, err := raceSaves(d)
		if err != nil {
			t.Fatal(err)
		}
		fmt.Printf("acked %d\n", acked)
	default:
		t.Fatalf("unknown mode %q", mode)
	}
}

// multiRecord is a record of namespace "shared" at rev, confirmed at
// confirmed, whose values name rev (see crashRecord).
func multiRecord(tb testing.TB, rev int64, confirmed time.Time) *Record {
	tb.Helper()
	rec, err := multiRecordErr(rev, confirmed)
	if err != nil {
		tb.Fatal(err)
	}
	return rec
}

func multiRecordErr(rev int64, confirmed time.Time) (*Record, error) {
	n := 50 + int(rev%200)
	raw := make(map[string]json.RawMessage, n)
	for i := 0; i < n; i++ {
		raw["k"+strconv.Itoa(i)] = json.RawMessage(fmt.Sprintf(`{"rev":%d,"i":%d,"pad":%q}`, rev, i, strings.Repeat("p", int(rev%97))))
	}
	s, err := snapshot.Build("shared", "store", rev, raw)
	if err != nil {
		return nil, err
	}
	return &Record{Namespace: "shared", StoreID: "store", Revision: rev, Cursor: rev,
		ConfirmedAt: confirmed.Round(0), Snapshot: s}, nil
}

// raceRounds is how many records each writer of the race tests saves.
const raceRounds = 60

// raceSaves saves revisions 1..raceRounds, each confirmed now, as two
// clients following the same store do, and returns the last revision whose
// save returned nil: the file holds it or something newer once it returns.
func raceSaves(d *Dir) (acked int64, err error) {
	for rev := int64(1); rev <= raceRounds; rev++ {
		rec, err := multiRecordErr(rev, time.Now())
		if err != nil {
			return acked, err
		}
		switch err := d.Save(rec); {
		case err == nil:
			acked = rev
		case errors.Is(err, ErrSuperseded):
		default:
			return acked, fmt.Errorf("save of %d: %w", rev, err)
		}
	}
	return acked, nil
}

// child starts the child process in mode on dir and waits until it has
// opened the directory.
type child struct {
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	lines  chan string
	stderr *strings.Builder
}

func startChild(t *testing.T, dir, mode string) *child {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestMultiChild$", "-test.count=1")
	cmd.Env = append(os.Environ(), multiDirEnv+"="+dir, multiModeEnv+"="+mode)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	c := &child{cmd: cmd, stdin: stdin, lines: make(chan string, 16), stderr: new(strings.Builder)}
	cmd.Stderr = c.stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
	})
	go func() {
		defer close(c.lines)
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			c.lines <- sc.Text()
		}
	}()
	c.expect(t, "ready")
	return c
}

// expect returns the rest of the child's next line that starts with prefix,
// skipping others, within a deadline.
func (c *child) expect(t *testing.T, prefix string) string {
	t.Helper()
	deadline := time.After(time.Minute)
	for {
		select {
		case l, ok := <-c.lines:
			if !ok {
				c.cmd.Wait()
				t.Fatalf("child ended before %q:\n%s", prefix, c.stderr)
			}
			if rest, ok := strings.CutPrefix(l, prefix); ok {
				return strings.TrimSpace(rest)
			}
		case <-deadline:
			t.Fatalf("no %q from the child within a minute:\n%s", prefix, c.stderr)
		}
	}
}

func (c *child) order(t *testing.T) {
	t.Helper()
	if _, err := io.WriteString(c.stdin, "go\n"); err != nil {
		t.Fatal(err)
	}
}

// A client holding r1 (partitioned) saves after another process sharing the
// directory wrote r3: the file keeps r3.
func TestTwoProcessesOlderSaveLoses(t *testing.T) {
	if testing.Short() {
		t.Skip("spawns a process")
	}
	dir := t.TempDir()
	c := startChild(t, dir, "save-r1")
	d, err := OpenDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	r3 := multiRecord(t, 3, time.Now())
	if err := d.Save(r3); err != nil {
		t.Fatal(err)
	}
	c.order(t)
	res := c.expect(t, "result")
	got := mustLoad(t, d, "shared")
	if got.Revision != 3 {
		t.Fatalf("the file holds revision %d after the child's save of r1 (child: %s); want 3", got.Revision, res)
	}
	sameRecord(t, got, r3)
	// The child prints its error; its text names both revisions.
	if want := (&SupersededError{Namespace: "shared", StoreID: "store", Revision: 1, DiskRevision: 3}).Error(); res != want {
		t.Fatalf("child's save of r1 over r3 returned %q, want %q", res, want)
	}
}

// The lock is held from the comparison to the rename: while a child has
// compared its r2 with the r1 on disk and not yet renamed, the parent's save
// of r3 waits, and then finds r2 and replaces it. Without the lock the
// parent's r3 would land first and the child's r2 over it.
func TestTwoProcessesLockSpansCompareAndRename(t *testing.T) {
	if testing.Short() {
		t.Skip("spawns a process")
	}
	if !haveFlock {
		t.Skip("no cross-process lock on this platform")
	}
	dir := t.TempDir()
	d, err := OpenDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Save(multiRecord(t, 1, time.Now())); err != nil {
		t.Fatal(err)
	}
	c := startChild(t, dir, "pause-r2")
	c.order(t)
	c.expect(t, "compared")

	waiting := make(chan struct{}, 1)
	d.hookLockWait = func() {
		select {
		case waiting <- struct{}{}:
		default:
		}
	}
	r3 := multiRecord(t, 3, time.Now())
	saved := make(chan error, 1)
	go func() { saved <- d.Save(r3) }()
	select {
	case <-waiting: // the child holds the lock, as it should
	case err := <-saved:
		t.Errorf("the save of r3 did not wait for the child's lock (it returned %v)", err)
		saved <- err
	case <-time.After(time.Minute):
		t.Fatal("the save of r3 neither waited nor returned within a minute")
	}
	c.order(t)
	if res := c.expect(t, "result"); res != "<nil>" {
		t.Fatalf("child's save of r2 over r1: %s", res)
	}
	select {
	case err := <-saved:
		if err != nil {
			t.Fatalf("save of r3 after the child's r2: %v", err)
		}
	case <-time.After(time.Minute):
		t.Fatal("the save of r3 did not return within a minute of the child's release")
	}
	got := mustLoad(t, d, "shared")
	if got.Revision != 3 {
		t.Fatalf("the file holds revision %d, want 3", got.Revision)
	}
	sameRecord(t, got, r3)
}

// Two processes save the same revisions at the same time, as two clients
// following one store do. The file never goes back (revision, then
// confirmation time), and ends holding the newest record either saved.
func TestTwoProcessesConcurrentSaves(t *testing.T) {
	if testing.Short() {
		t.Skip("spawns a process")
	}
	if !haveFlock {
		t.Skip("no cross-process lock on this platform")
	}
	dir := t.TempDir()
	c := startChild(t, dir, "race")
	d, err := OpenDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	c.order(t)
	var mine int64
	type result struct {
		acked int64
		err   error
	}
	done := make(chan result, 1) // the writer never blocks, even if the test fails first
	go func() {
		acked, err := raceSaves(d)
		done <- result{acked, err}
	}()
	// Watch until both writers are done. Failures are noted, not fatal,
	// so that no writer outlives the test.
	var theirs int64
	mineDone, lines := false, c.lines
	w := watchMonotonic(t, d, func() bool {
		select {
		case r := <-done:
			if r.err != nil {
				t.Error(r.err)
			}
			mine, mineDone = r.acked, true
		case l, ok := <-lines:
			if !ok {
				c.cmd.Wait()
				t.Errorf("child ended before it reported:\n%s", c.stderr)
				lines = nil
				break
			}
			if rest, ok := strings.CutPrefix(l, "acked "); ok {
				var err error
				if theirs, err = strconv.ParseInt(rest, 10, 64); err != nil {
					t.Error(err)
				}
				lines = nil // the child's report is in
			}
		default:
		}
		return mineDone && lines == nil
	})
	if t.Failed() {
		return
	}
	checkFinal(t, d, w, max(mine, theirs))
}

// watch is what a reader saw of the file while writers ran.
type watch struct {
	loads    int
	last     *Record
	wentBack string // the first time the file went back, or ""
}

// watchMonotonic loads "shared" until done reports true, noting whether the
// file ever goes back (it does not fail the test at once, so that no writer
// outlives it).
func watchMonotonic(t *testing.T, d *Dir, done func() bool) watch {
	t.Helper()
	var w watch
	for !done() {
		rec, err := d.Load("shared")
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				continue
			}
			t.Error(err)
			continue
		}
		if rec.Snapshot.Len() != 50+int(rec.Revision%200) {
			t.Errorf("revision %d holds %d keys", rec.Revision, rec.Snapshot.Len())
		}
		w.loads++
		if w.last != nil && older(rec, w.last) && w.wentBack == "" {
			w.wentBack = fmt.Sprintf("the file went back from revision %d confirmed %d to %d confirmed %d",
				w.last.Revision, w.last.ConfirmedAt.UnixNano(), rec.Revision, rec.ConfirmedAt.UnixNano())
		}
		w.last = rec
	}
	return w
}

func older(a, b *Record) bool {
	return a.Revision < b.Revision || a.Revision == b.Revision && a.ConfirmedAt.Before(b.ConfirmedAt)
}

func checkFinal(t *testing.T, d *Dir, w watch, acked int64) {
	t.Helper()
	if w.wentBack != "" {
		t.Error(w.wentBack)
	}
	got := mustLoad(t, d, "shared")
	if w.last != nil && older(got, w.last) {
		t.Fatalf("final file (revision %d) older than one seen before (%d)", got.Revision, w.last.Revision)
	}
	if got.Revision != acked {
		t.Fatalf("final file holds revision %d; newest save that returned nil was %d", got.Revision, acked)
	}
	t.Logf("final revision %d; %d loads while saving", got.Revision, w.loads)
}
