package testutil

import (
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// fatalRecorder is a testing.TB whose Fatalf records its message instead of
// ending the test.
type fatalRecorder struct {
	testing.TB
	msg string
}

func (r *fatalRecorder) Helper() {}

func (r *fatalRecorder) Fatalf(format string, args ...any) { r.msg = fmt.Sprintf(format, args...) }

func TestEventuallyReturnsOnceTheConditionHolds(t *testing.T) {
	var calls atomic.Int32
	r := &fatalRecorder{TB: t}
	Eventually(r, 10*time.Second, func() bool { return calls.Add(1) == 3 }, "the third call")
	if r.msg != "" {
		t.Fatalf("failed: %s", r.msg)
	}
	if n := calls.Load(); n != 3 {
		t.Fatalf("cond called %d times, want 3", n)
	}
}

func TestEventuallyFailsWithTheMessageAfterTheTimeout(t *testing.T) {
	r := &fatalRecorder{TB: t}
	start := time.Now()
	Eventually(r, 30*time.Millisecond, func() bool { return false }, "revision %d", 7)
	if took := time.Since(start); took < 30*time.Millisecond {
		t.Fatalf("gave up after %v, before the timeout", took)
	}
	if want := "timed out after 30ms waiting for revision 7"; r.msg != want {
		t.Fatalf("message %q, want %q", r.msg, want)
	}
	r.msg = ""
	Eventually(r, time.Millisecond, func() bool { return false })
	if !strings.HasSuffix(r.msg, "waiting for the condition") {
		t.Fatalf("message without msgAndArgs: %q", r.msg)
	}
}

func TestEventuallyNilReportsTheLastError(t *testing.T) {
	r := &fatalRecorder{TB: t}
	var calls atomic.Int32
	EventuallyNil(r, 20*time.Millisecond, func() error {
		return fmt.Errorf("attempt %d", calls.Add(1))
	}, "the store")
	if want := fmt.Sprintf("timed out after 20ms waiting for the store: attempt %d", calls.Load()); r.msg != want {
		t.Fatalf("message %q, want %q", r.msg, want)
	}
	r.msg = ""
	calls.Store(0)
	EventuallyNil(r, 10*time.Second, func() error {
		if calls.Add(1) < 2 {
			return errors.New("not yet")
		}
		return nil
	})
	if r.msg != "" {
		t.Fatalf("failed: %s", r.msg)
	}
}

func TestWaitChecksOnceMoreAtTheDeadline(t *testing.T) {
	if Wait(0, func() bool { return false }) {
		t.Fatal("Wait reported a condition that never held")
	}
	if !Wait(0, func() bool { return true }) {
		t.Fatal("Wait(0) did not check the condition once")
	}
}

func TestConsistentlyChecksForTheWholeWindow(t *testing.T) {
	r := &fatalRecorder{TB: t}
	var calls atomic.Int32
	start := time.Now()
	Consistently(r, 50*time.Millisecond, func() error { calls.Add(1); return nil }, "nothing")
	if r.msg != "" {
		t.Fatalf("failed: %s", r.msg)
	}
	if took := time.Since(start); took < 50*time.Millisecond || calls.Load() < 2 {
		t.Fatalf("checked %d times in %v, want several over 50ms", calls.Load(), took)
	}
	Consistently(r, 10*time.Second, func() error {
		if calls.Add(1) > 5 {
			return errors.New("went back")
		}
		return nil
	}, "the revision %s", "held")
	if want := "the revision held: went back"; r.msg != want {
		t.Fatalf("message %q, want %q", r.msg, want)
	}
}
