package instrument

import (
	"sync"
	"testing"

	"github.com/holdfast-dev/holdfast/telemetry"
)

// TestAddOptsBuiltOnceAtFirstCount: a known value's options are built at
// its first get, not before, and every later or racing get returns the
// same ones; a value past maxExtraValues counts as telemetry.ValueOther.
func TestAddOptsBuiltOnceAtFirstCount(t *testing.T) {
	a := newAddOpts(telemetry.AttrNamespace.String("ns"), telemetry.AttrReason, knownReconnect)
	for i := range a.known {
		if a.known[i].opts.Load() != nil {
			t.Fatalf("%q built before its first count", a.known[i].value)
		}
	}

	const racers = 8
	got := make([][]any, racers)
	var wg sync.WaitGroup
	for r := range racers {
		wg.Go(func() {
			for _, v := range knownReconnect {
				got[r] = append(got[r], &a.get(v)[0])
			}
		})
	}
	wg.Wait()
	for r := 1; r < racers; r++ {
		for i := range got[0] {
			if got[r][i] != got[0][i] {
				t.Fatalf("racer %d got other options for %q than racer 0", r, knownReconnect[i])
			}
		}
	}

	for i := range maxExtraValues {
		a.get("extra-" + string(rune('a'+i)))
	}
	other := a.get(telemetry.ValueOther)
	if got := a.get("one-too-many"); &got[0] != &other[0] {
		t.Error("a value past maxExtraValues does not count as ValueOther")
	}
}
