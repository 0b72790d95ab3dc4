package cachedir

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/holdfast-dev/holdfast/internal/snapshot"
)

const (
	crashDirEnv   = "HOLDFAST_CACHE_CRASH_DIR"
	crashStartEnv = "HOLDFAST_CACHE_CRASH_START"
)

// crashRecord is the record the crash child writes at rev: its size varies
// with rev, and every value names rev, so a file mixing two writes, or cut
// short, cannot pass for a whole one.
func crashRecord(tb testing.TB, rev int64) *Record {
	tb.Helper()
	n := 50 + int(rev%200)
	raw := make(map[string]json.RawMessage, n)
	for i := 0; i < n; i++ {
		raw["k"+strconv.Itoa(i)] = json.RawMessage(fmt.Sprintf(`{"rev":%d,"i":%d,"pad":%q}`, rev, i, strings.Repeat("p", int(rev%97))))
	}
	s, err := snapshot.Build("crash", "store", rev, raw)
	if err != nil {
		tb.Fatal(err)
	}
	return &Record{Namespace: "crash", StoreID: "store", Revision: rev, Cursor: rev, ConfirmedAt: time.Unix(0, rev), Snapshot: s}
}

func checkCrashRecord(tb testing.TB, rec *Record) {
	tb.Helper()
	rev := rec.Revision
	if want := 50 + int(rev%200); rec.Snapshot.Len() != want {
		tb.Fatalf("revision %d holds %d keys, want %d", rev, rec.Snapshot.Len(), want)
	}
	if rec.Cursor != rev || rec.ConfirmedAt.UnixNano() != rev {
		tb.Fatalf("revision %d: header %+v", rev, rec)
	}
	rec.Snapshot.Range(func(k string, v snapshot.Value) bool {
		var got struct{ Rev int64 }
		if err := v.Decode(&got); err != nil || got.Rev != rev {
			tb.Fatalf("revision %d: key %s holds %s", rev, k, v.Raw())
		}
		return true
	})
}

// TestCrashChild is the child process of TestCrashSafety: it saves records of
// growing revisions in a loop and prints each revision once its Save has
// returned, until it is killed.
func TestCrashChild(t *testing.T) {
	dir := os.Getenv(crashDirEnv)
	if dir == "" {
		t.Skip("helper process of TestCrashSafety")
	}
	start, err := strconv.ParseInt(os.Getenv(crashStartEnv), 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	d, err := OpenDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for rev := start; rev < start+1_000_000; rev++ {
		if err := d.Save(crashRecord(t, rev)); err != nil {
			t.Fatal(err)
		}
		// A write error (the parent is gone) ends the child.
		if _, err := fmt.Printf("saved %d\n", rev); err != nil {
			return
		}
	}
}

// TestCrashSafety kills a child process with SIGKILL at random moments while
// it saves in a loop; each time, the file must load as one whole record, no
// older than the last save the child reported done.
func TestCrashSafety(t *testing.T) {
	if testing.Short() {
		t.Skip("spawns processes")
	}
	dir := t.TempDir()
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 1))
	var acked int64 // last revision whose Save returned in a child
	var landed int  // rounds in which the save in flight at the kill landed
	for round := 0; round < 20; round++ {
		cmd := exec.Command(os.Args[0], "-test.run=^TestCrashChild$", "-test.count=1")
		cmd.Env = append(os.Environ(), crashDirEnv+"="+dir, crashStartEnv+"="+strconv.FormatInt(acked+1, 10))
		out, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		var stderr strings.Builder
		cmd.Stderr = &stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		// Let the child report 1 to 30 saves, then kill it somewhere
		// inside a later one. The optional pause only moves the moment of
		// the kill; nothing waits on it.
		want := 1 + rng.IntN(30)
		sc := bufio.NewScanner(out)
		var other strings.Builder
		got := 0
		for got < want && sc.Scan() {
			if rev, ok := strings.CutPrefix(sc.Text(), "saved "); ok {
				if acked, err = strconv.ParseInt(rev, 10, 64); err != nil {
					t.Fatal(err)
				}
				got++
			} else {
				other.WriteString(sc.Text() + "\n")
			}
		}
		if got < want {
			cmd.Wait()
			t.Fatalf("round %d: child stopped after %d saves (%v):\n%s%s", round, got, sc.Err(), other.String(), stderr.String())
		}
		if rng.IntN(2) == 0 {
			time.Sleep(time.Duration(rng.IntN(3000)) * time.Microsecond)
		}
		if err := cmd.Process.Kill(); err != nil {
			t.Fatal(err)
		}
		// Saves the child finished after the ones counted above are still
		// in the pipe: read them, up to its end at the child's death.
		for sc.Scan() {
			if rev, ok := strings.CutPrefix(sc.Text(), "saved "); ok {
				if acked, err = strconv.ParseInt(rev, 10, 64); err != nil {
					t.Fatal(err)
				}
			}
		}
		err = cmd.Wait()
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.Exited() {
			t.Fatalf("round %d: child ended by itself (%v) before it was killed:\n%s", round, err, stderr.String())
		}

		d, err := OpenDir(dir)
		if err != nil {
			t.Fatal(err)
		}
		rec, err := d.Load("crash")
		if errors.Is(err, fs.ErrNotExist) && acked == 0 {
			continue
		}
		if err != nil {
			t.Fatalf("round %d (acked %d): %v", round, acked, err)
		}
		checkCrashRecord(t, rec)
		// The save in flight at the kill may or may not have landed.
		if rec.Revision != acked && rec.Revision != acked+1 {
			t.Fatalf("round %d: loaded revision %d, last acked %d", round, rec.Revision, acked)
		}
		if rec.Revision == acked+1 {
			landed++
		}
		acked = rec.Revision
	}
	ents, _ := os.ReadDir(dir)
	temps := 0
	for _, e := range ents {
		if isTempName(e.Name()) {
			temps++
		}
	}
	t.Logf("20 kills, last revision %d; the save in flight landed in %d rounds; %d temporary files left for a later sweep", acked, landed, temps)
}
