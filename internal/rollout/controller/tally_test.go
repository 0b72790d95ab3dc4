package controller

import (
	"testing"
	"time"

	"github.com/holdfast-dev/holdfast/transport"
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
		{"the later report's SDK version", Report{Acked: 1, SDKVersion: "0.1.0", Seen: t0},
			Report{Acked: 2, SDKVersion: "0.2.0", Seen: t0.Add(time.Second)},
			Report{Acked: 2, SDKVersion: "0.2.0", Seen: t0.Add(time.Second)}},
		{"an earlier report's SDK version does not replace", Report{Acked: 2, SDKVersion: "0.2.0", Seen: t0.Add(time.Second)},
			Report{Acked: 1, SDKVersion: "0.1.0", Seen: t0},
			Report{Acked: 2, SDKVersion: "0.2.0", Seen: t0.Add(time.Second)}},
		{"an SDK version said beats none", Report{Acked: 2, Seen: t0.Add(time.Second)},
			Report{Acked: 1, SDKVersion: "0.1.0", Seen: t0},
			Report{Acked: 2, SDKVersion: "0.1.0", Seen: t0.Add(time.Second)}},
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

func TestReportObserveKeepsTheSDKVersion(t *testing.T) {
	var r Report
	t0 := time.Now()
	r.Observe(&transport.Ack{ClientID: "c", Revision: 1, Status: transport.AckApplied, SDKVersion: "0.1.0"}, t0, 64)
	r.Observe(&transport.Ack{ClientID: "c", Revision: 2, Status: transport.AckApplied}, t0, 64)
	if r.SDKVersion != "0.1.0" {
		t.Fatalf("after a report without one: %q, want the one said", r.SDKVersion)
	}
	r.Observe(&transport.Ack{ClientID: "c", Revision: 3, Status: transport.AckRejected, Error: "x", SDKVersion: "0.2.0"}, t0, 64)
	if r.SDKVersion != "0.2.0" {
		t.Fatalf("after an upgrade: %q", r.SDKVersion)
	}
}
