package transporttest_test

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/holdfast-dev/holdfast/internal/fakeserver"
	"github.com/holdfast-dev/holdfast/transport"
	"github.com/holdfast-dev/holdfast/transport/transporttest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func store(t *testing.T, wrap func(transport.Source) transport.Source) *transporttest.Store {
	srv, err := fakeserver.Start(fakeserver.WithHeartbeat(100 * time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Close() })
	src, err := transport.NewHTTPSource(srv.URL(), transport.WithIdleTimeout(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = src.Close() })
	return &transporttest.Store{
		Source: wrap(src),
		Publish: func(t *testing.T, ns string, puts map[string]json.RawMessage, deletes []string) int64 {
			rev, err := srv.PublishRaw(ns, puts, deletes)
			if err != nil {
				t.Fatal(err)
			}
			return rev
		},
		Compact: func(t *testing.T, rev int64) {
			if _, err := srv.Compact(rev); err != nil {
				t.Fatal(err)
			}
		},
		Reset: func(*testing.T) { srv.ResetStore() },
	}
}

// dropsSecondChange loses the second change set of every watch, as a
// source with an off-by-one in its resume would.
type dropsSecondChange struct{ transport.Source }

func (d dropsSecondChange) Watch(ctx context.Context, req transport.WatchRequest, handle func(transport.Event) error) error {
	n := 0
	return d.Source.Watch(ctx, req, func(ev transport.Event) error {
		if ev.Change != nil {
			if n++; n == 2 {
				return nil
			}
		}
		return handle(ev)
	})
}

const brokenEnv = "TRANSPORTTEST_BROKEN_SOURCE"

// The suite can fail: run against a source that drops an event (in a
// child process, so that its failure is this test's evidence, not its
// failure), the watch cases fail and say why, while the cases the bug
// does not touch still pass.
func TestSuiteFailsABrokenSource(t *testing.T) {
	if os.Getenv(brokenEnv) == "1" {
		transporttest.Run(t, func(t *testing.T) *transporttest.Store {
			return store(t, func(s transport.Source) transport.Source { return dropsSecondChange{s} })
		})
		return
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestSuiteFailsABrokenSource$", "-test.v", "-test.count=1")
	cmd.Env = append(os.Environ(), brokenEnv+"=1")
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	if _, ok := err.(*exec.ExitError); !ok {
		t.Fatalf("the suite against a source that drops an event: %v; want it to fail\n%s", err, out.String())
	}
	for _, want := range []string{
		"--- FAIL: TestSuiteFailsABrokenSource/WatchFromCursor",
		"one is missing",
		"--- FAIL: TestSuiteFailsABrokenSource/Resume",
		"--- PASS: TestSuiteFailsABrokenSource/Snapshot",
		"--- PASS: TestSuiteFailsABrokenSource/CursorAhead",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
}

// The same harness with the source as it is passes.
func TestSuitePassesTheHTTPSource(t *testing.T) {
	transporttest.Run(t, func(t *testing.T) *transporttest.Store {
		return store(t, func(s transport.Source) transport.Source { return s })
	})
}
