package main

import (
	"bytes"
	"context"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestQuickstart runs the tour and checks the lines a newcomer relies on.
func TestQuickstart(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var out bytes.Buffer
	start := time.Now()
	if err := run(ctx, &out); err != nil {
		t.Fatalf("run: %v\n%s", err, out.String())
	}
	t.Logf("took %v\n%s", time.Since(start), out.String())
	for _, want := range []string{
		"Opened payments.prod: revision 1, state Fresh, from network.",
		`Int("retry-timeout-ms")   = 50`,
		`Duration("poll-interval") = 250ms`,
		`Int("max-retries")        = 3 (absent: the default)`,
		"OnChange: retry-timeout-ms 50 -> 75 at revision 2; Int now returns 75.",
		"state=Stale staleness=",
		"Opened without the network (in under 0.5s): revision 2, state Stale, from disk.",
		"Converged: revision 3, state Fresh, from network.",
		`Int("retry-timeout-ms") = 100, Int("max-retries") = 5.`,
		"Done:",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q", want)
		}
	}
	// Staleness grows while the server is down.
	var stale []float64
	for _, m := range regexp.MustCompile(`state=Stale staleness=([0-9.]+)s`).FindAllStringSubmatch(out.String(), -1) {
		f, _ := strconv.ParseFloat(m[1], 64)
		stale = append(stale, f)
	}
	if len(stale) != 3 || !(stale[0] < stale[1] && stale[1] < stale[2]) {
		t.Errorf("staleness samples %v; want 3, growing", stale)
	}
}
