package control

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/holdfast-dev/holdfast/internal/presence"
	"github.com/holdfast-dev/holdfast/internal/rollout/controller"
	"github.com/holdfast-dev/holdfast/transport"
)

// TestAcksTableIsBounded: a full table makes room by dropping the pair
// heard from longest ago (an ack moves its pair to the front), a nack's
// error is kept to maxNackError bytes, and the newest report of a pair
// wins.
func TestAcksTableIsBounded(t *testing.T) {
	a := NewAcks(3)
	ack := func(client string, rev int64, status, msg string) transport.Ack {
		return transport.Ack{ClientID: client, Namespace: "ns", Revision: rev, Status: status, Error: msg}
	}
	ctx := context.Background()
	_ = a.AckBatch(ctx, []transport.Ack{ack("a", 1, transport.AckApplied, ""), ack("b", 1, transport.AckApplied, ""), ack("c", 1, transport.AckApplied, "")})
	_ = a.Ack(ctx, ack("a", 2, transport.AckApplied, ""))                        // a is the most recent now
	_ = a.Ack(ctx, ack("d", 2, transport.AckRejected, strings.Repeat("é", 500))) // b, the oldest, makes room
	reps := a.Of("ns")
	slices.SortFunc(reps, func(x, y controller.Report) int { return strings.Compare(x.ClientID, y.ClientID) })
	var got []string
	for _, r := range reps {
		got = append(got, fmt.Sprintf("%s:%d/%d", r.ClientID, r.Acked, r.Nacked))
		if r.ClientID == "d" && (len(r.NackError) > maxNackError || !strings.HasPrefix(r.NackError, "é")) {
			t.Errorf("the nack's error: %d bytes, want at most %d, cut at a rune", len(r.NackError), maxNackError)
		}
	}
	if fmt.Sprint(got) != "[a:2/0 c:1/0 d:0/2]" {
		t.Errorf("table %v, want [a:2/0 c:1/0 d:0/2] (b evicted)", got)
	}
}

// BenchmarkAcksFullTable: a batch of 1,000 new pairs on a full table of
// the default size: each makes room in constant time.
//
//	go test -run '^$' -bench AcksFullTable ./server/control/
func BenchmarkAcksFullTable(b *testing.B) {
	a := NewAcks(DefaultMaxAckEntries)
	batch := make([]transport.Ack, 0, 1000)
	for i := range DefaultMaxAckEntries {
		batch = append(batch, transport.Ack{ClientID: fmt.Sprint("c", i), Namespace: "ns", Revision: 1, Status: transport.AckApplied})
		if len(batch) == cap(batch) {
			_ = a.AckBatch(context.Background(), batch)
			batch = batch[:0]
		}
	}
	b.ReportAllocs()
	b.ResetTimer()
	for n := range b.N {
		batch = batch[:0]
		for i := range 1000 {
			batch = append(batch, transport.Ack{ClientID: fmt.Sprint("new", n, "-", i), Namespace: "ns", Revision: 1, Status: transport.AckApplied})
		}
		_ = a.AckBatch(context.Background(), batch)
	}
}

// TestAcksExpire: a pair unheard past runningAckExpiry leaves the table
// when its namespace has a rollout running (its client, connected, would
// have reported again), and stays until idleAckExpiry otherwise; a pair
// heard again is kept.
func TestAcksExpire(t *testing.T) {
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	tests := []struct {
		name      string
		age       time.Duration
		running   bool
		connected bool // the old client's presence is live
		kept      bool
	}{
		{"running, heard recently", runningAckExpiry, true, false, true},
		{"running, unheard past its expiry", runningAckExpiry + time.Second, true, false, false},
		{"running, unheard past its expiry, connected", runningAckExpiry + time.Second, true, true, true},
		{"idle, unheard past the running expiry", runningAckExpiry + time.Second, false, false, true},
		{"idle, unheard past its expiry", idleAckExpiry + time.Second, false, false, false},
		{"running, unheard past the idle expiry", idleAckExpiry + time.Second, true, false, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a := NewAcks(10)
			now := start
			a.now = func() time.Time { return now }
			if tt.connected {
				a.live = presence.NewTable(time.Hour, 0, nil)
				defer a.live.Open("old", true).Close()
			}
			ctx := context.Background()
			_ = a.Ack(ctx, transport.Ack{ClientID: "old", Namespace: "ns", Revision: 1, Status: transport.AckApplied})
			now = start.Add(tt.age)
			_ = a.Ack(ctx, transport.Ack{ClientID: "new", Namespace: "ns", Revision: 1, Status: transport.AckApplied})
			_ = a.Ack(ctx, transport.Ack{ClientID: "other", Namespace: "other", Revision: 1, Status: transport.AckApplied})
			dropped := a.expire(now, func(ns string) bool { return tt.running && ns == "ns" })
			var got []string
			for _, r := range a.Of("ns") {
				got = append(got, r.ClientID)
			}
			slices.Sort(got)
			want := "[new old]"
			if !tt.kept {
				want = "[new]"
			}
			if fmt.Sprint(got) != want || (dropped == 1) == tt.kept {
				t.Errorf("table %v (dropped %d), want %s", got, dropped, want)
			}
			if len(a.Of("other")) != 1 {
				t.Error("another namespace's pair heard now dropped")
			}
		})
	}
}
