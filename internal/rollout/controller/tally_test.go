package controller

import (
	"testing"
	"time"
)

func TestReportMerge(t *testing.T) {
	t0 := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		name string
		a, b Report
		want Report
	}{
		{"highest revisions win", Report{Acked: 5, Nacked: 3, NackError: "old", Seen: t0},
			Report{Acked: 4, Nacked: 6, NackError: "new", Seen: t0.Add(time.Second)},
			Report{Acked: 5, Nacked: 6, NackError: "new", Seen: t0.Add(time.Second)}},
		{"same rollout: served and nacks add up", Report{Rollout: "r1", Served: 5, Seen: t0},
			Report{Rollout: "r1", NackedRollout: true, Would: 7, WouldError: "x", Seen: t0},
			Report{Rollout: "r1", Served: 5, NackedRollout: true, Would: 7, WouldError: "x", Seen: t0}},
		{"a newer rollout replaces", Report{Rollout: "r1", Served: 5, Seen: t0},
			Report{Rollout: "r2", Served: 9, Seen: t0.Add(time.Second)},
			Report{Rollout: "r2", Served: 9, Seen: t0.Add(time.Second)}},
		{"an older other rollout does not", Report{Rollout: "r2", Served: 9, Seen: t0.Add(time.Second)},
			Report{Rollout: "r1", Served: 5, Seen: t0},
			Report{Rollout: "r2", Served: 9, Seen: t0.Add(time.Second)}},
		{"none yet takes it", Report{Acked: 1, Seen: t0},
			Report{Rollout: "r1", Served: 2, Acked: 2, Seen: t0},
			Report{Rollout: "r1", Served: 2, Acked: 2, Seen: t0}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := tc.a
			got.Merge(tc.b)
			if got != tc.want {
				t.Fatalf("merge = %+v, want %+v", got, tc.want)
			}
		})
	}
}
