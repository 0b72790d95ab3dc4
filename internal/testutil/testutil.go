// Package testutil holds the helpers the project's tests share, so that no
// package writes its own: waiting on a condition with a deadline, instead of
// sleeping and hoping.
//
// It is for tests only. Examples (example_test.go files of public packages
// and the programs under examples/) do not import it: users copy them, and
// cannot import an internal package.
package testutil

import (
	"fmt"
	"testing"
	"time"

	"github.com/holdfast-dev/holdfast/internal/portkeep"
)

// The interval between two checks of a condition starts at minPoll and
// doubles up to maxPoll: a condition that holds soon is seen soon, and one
// that takes seconds is not checked thousands of times on a busy machine.
const (
	minPoll = time.Millisecond
	maxPoll = 20 * time.Millisecond
)

// Eventually checks cond until it returns true, and fails tb (Fatal) if it
// has not within timeout. msgAndArgs, if given, says what was awaited: a
// format string and its arguments, as for fmt.Sprintf.
//
// cond runs on the calling goroutine; it must not call tb.Fatal.
func Eventually(tb testing.TB, timeout time.Duration, cond func() bool, msgAndArgs ...any) {
	tb.Helper()
	if !Wait(timeout, cond) {
		tb.Fatalf("timed out after %v waiting for %s", timeout, describe(msgAndArgs))
	}
}

// EventuallyNil checks cond until it returns nil, and fails tb (Fatal) with
// the last error it returned if it has not within timeout. Use it where the
// failure should say why the condition did not hold, not only that it did
// not.
func EventuallyNil(tb testing.TB, timeout time.Duration, cond func() error, msgAndArgs ...any) {
	tb.Helper()
	var last error
	if !Wait(timeout, func() bool { last = cond(); return last == nil }) {
		tb.Fatalf("timed out after %v waiting for %s: %v", timeout, describe(msgAndArgs), last)
	}
}

// Consistently checks cond for the whole of window and fails tb (Fatal)
// with the first error cond returns: for what must keep holding while time
// passes (a client that must not go back, a file that must not be
// rewritten), where the passing of time is what the test is about.
func Consistently(tb testing.TB, window time.Duration, cond func() error, msgAndArgs ...any) {
	tb.Helper()
	deadline := time.Now().Add(window)
	for {
		if err := cond(); err != nil {
			tb.Fatalf("%s: %v", describe(msgAndArgs), err)
			return
		}
		if !time.Now().Before(deadline) {
			return
		}
		time.Sleep(min(maxPoll, time.Until(deadline)))
	}
}

// Wait checks cond until it returns true or timeout passes, and reports
// whether it held. It fails nothing: use it where a test goes on to assert
// with its own message, or where not holding is itself a result.
func Wait(timeout time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(timeout)
	for pause := minPoll; ; pause = min(2*pause, maxPoll) {
		if cond() {
			return true
		}
		if !time.Now().Before(deadline) {
			return false
		}
		time.Sleep(pause)
	}
}

func describe(msgAndArgs []any) string {
	if len(msgAndArgs) == 0 {
		return "the condition"
	}
	if format, ok := msgAndArgs[0].(string); ok {
		return fmt.Sprintf(format, msgAndArgs[1:]...)
	}
	return fmt.Sprint(msgAndArgs...)
}

// LoopbackPort returns a port of 127.0.0.1 kept for tb (portkeep) until
// it ends: a server or process the test starts on it, kills and starts
// again finds it free each time, and a dial while none runs is refused.
func LoopbackPort(tb testing.TB) int {
	tb.Helper()
	port, release, err := portkeep.Loopback()
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(release)
	return port
}
