package config

import (
	"testing"
	"time"

	"github.com/holdfast-dev/holdfast/internal/snapshot"
)

// TestDerive covers every combination that decides what a namespace serves
// and its State: data or none, a rejected first snapshot, age (fresh, past
// the fresh window, past MaxStaleness, unknown), connection health, the
// upstream's confirmation, and the policy.
func TestDerive(t *testing.T) {
	now := time.Now()
	data, err := snapshot.Build("ns", "s1", 3, nil)
	if err != nil {
		t.Fatal(err)
	}
	defaults, err := snapshot.Build("ns", "", 0, nil)
	if err != nil {
		t.Fatal(err)
	}
	const window, maxStale = 15 * time.Second, time.Minute
	type in struct {
		applied       bool
		firstRejected bool
		age           time.Duration // since the last confirmation
		ageUnknown    bool
		healthy       bool
		unconfirmed   bool // the server's upstream is not confirming its data
		maxStaleness  time.Duration
		failClosed    bool
	}
	tests := []struct {
		name  string
		in    in
		serve *snapshot.Snapshot
		state State
	}{
		{"nothing yet", in{}, nil, StateSyncing},
		{"nothing yet, fail-closed", in{failClosed: true, maxStaleness: maxStale}, nil, StateSyncing},
		{"first snapshot rejected, fail-open: Defaults", in{firstRejected: true}, defaults, StateStale},
		{"first snapshot rejected, fail-closed: does not open", in{firstRejected: true, failClosed: true, maxStaleness: maxStale}, nil, StateSyncing},
		{"healthy, just confirmed", in{applied: true, healthy: true, age: time.Second}, data, StateFresh},
		{"healthy, no confirmation for the window", in{applied: true, healthy: true, age: window + time.Millisecond}, data, StateStale},
		{"unhealthy, just confirmed", in{applied: true, age: time.Second}, data, StateStale},
		{"healthy, age unknown", in{applied: true, healthy: true, ageUnknown: true}, data, StateStale},
		{"no policy, very old", in{applied: true, age: 24 * time.Hour}, data, StateStale},
		{"within MaxStaleness, unhealthy", in{applied: true, age: maxStale - time.Second, maxStaleness: maxStale}, data, StateStale},
		{"past MaxStaleness, fail-open", in{applied: true, age: maxStale + time.Second, maxStaleness: maxStale}, data, StateBreached},
		{"past MaxStaleness, healthy, fail-open", in{applied: true, healthy: true, age: maxStale + time.Second, maxStaleness: maxStale}, data, StateBreached},
		{"past MaxStaleness, fail-closed: Defaults", in{applied: true, age: maxStale + time.Second, maxStaleness: maxStale, failClosed: true}, defaults, StateFailedClosed},
		{"age unknown, fail-open", in{applied: true, ageUnknown: true, maxStaleness: maxStale}, data, StateBreached},
		{"age unknown, fail-closed: Defaults", in{applied: true, ageUnknown: true, maxStaleness: maxStale, failClosed: true}, defaults, StateFailedClosed},
		{"age unknown, fail-closed, no MaxStaleness", in{applied: true, ageUnknown: true, failClosed: true}, data, StateStale},
		{"fail-closed, fresh", in{applied: true, healthy: true, age: time.Second, maxStaleness: maxStale, failClosed: true}, data, StateFresh},
		{"data after a rejected first snapshot", in{applied: true, firstRejected: true, healthy: true}, data, StateFresh},
		{"healthy, just confirmed, unconfirmed upstream", in{applied: true, healthy: true, unconfirmed: true, age: time.Second}, data, StateStale},
		{"unconfirmed upstream, past MaxStaleness", in{applied: true, healthy: true, unconfirmed: true, age: maxStale + time.Second, maxStaleness: maxStale}, data, StateBreached},
		{"unconfirmed upstream, fail-closed, within MaxStaleness", in{applied: true, healthy: true, unconfirmed: true, age: time.Second, maxStaleness: maxStale, failClosed: true}, data, StateStale},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := facts{
				appliedOrigin: OriginNetwork, defaults: defaults, firstRejected: tt.in.firstRejected,
				ageKnown: !tt.in.ageUnknown, healthy: tt.in.healthy, unconfirmed: tt.in.unconfirmed, now: now,
				maxStaleness: tt.in.maxStaleness, failClosed: tt.in.failClosed, freshWindow: window,
			}
			if tt.in.applied {
				f.applied = data
			}
			if !tt.in.ageUnknown {
				f.confirmed = now.Add(-tt.in.age)
			}
			got := derive(f)
			if got.snap != tt.serve || got.state != tt.state {
				t.Errorf("derive = serve %v, %v; want %v, %v", name(got.snap, data, defaults), got.state, name(tt.serve, data, defaults), tt.state)
			}
			wantOrigin := map[*snapshot.Snapshot]Origin{nil: OriginNone, data: OriginNetwork, defaults: OriginDefaults}[tt.serve]
			if got.origin != wantOrigin {
				t.Errorf("origin = %v; want %v", got.origin, wantOrigin)
			}
		})
	}
}

func name(s, data, defaults *snapshot.Snapshot) string {
	switch s {
	case nil:
		return "nothing"
	case data:
		return "data"
	case defaults:
		return "defaults"
	}
	return "?"
}

// TestNextChange: the clock wakes when Fresh data passes the fresh window
// or data passes MaxStaleness, whichever is first, and not for a state time
// cannot change.
func TestNextChange(t *testing.T) {
	now := time.Now()
	data, _ := snapshot.Build("ns", "s1", 3, nil)
	f := facts{applied: data, confirmed: now, ageKnown: true, freshWindow: 15 * time.Second}
	if got := nextChange(f, StateFresh); !got.Equal(now.Add(15 * time.Second)) {
		t.Errorf("fresh, no policy: %v; want the window's end", got.Sub(now))
	}
	if got := nextChange(f, StateStale); !got.IsZero() {
		t.Errorf("stale, no policy: %v; want never", got.Sub(now))
	}
	f.maxStaleness = 10 * time.Second
	if got := nextChange(f, StateFresh); !got.Equal(now.Add(10 * time.Second)) {
		t.Errorf("fresh, MaxStaleness first: %v", got.Sub(now))
	}
	if got := nextChange(f, StateBreached); !got.IsZero() {
		t.Errorf("breached: %v; want never (only a confirmation ends it)", got.Sub(now))
	}
	f.ageKnown = false
	if got := nextChange(f, StateStale); !got.IsZero() {
		t.Errorf("age unknown: %v; want never", got.Sub(now))
	}
}
