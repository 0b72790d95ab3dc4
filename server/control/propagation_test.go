package control

import (
	"context"
	"testing"
	"time"

	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/metric/embedded"

	"github.com/holdfast-dev/holdfast/internal/wire"
	"github.com/holdfast-dev/holdfast/transport"
)

// TestPropagation: the monitor times the 50%, 95% and 100% marks of a
// publish over the clients the ack table knew at the publish (none: it
// does not watch the publish), counts a
// later revision's ack, ignores nacks, rollout reports and clients that
// came after, and records the marks a publish never reached when its
// watch expires.
func TestPropagation(t *testing.T) {
	hist := &sumHistogram{}
	now := time.Unix(1000, 0)
	a := NewAcks(100)
	a.now = func() time.Time { return now }
	a.prop.measure(hist)
	ack := func(client string, rev int64, status, rollout string) {
		_ = a.AckBatch(context.Background(), []transport.Ack{{ClientID: client, Namespace: "ns", Revision: rev, Status: status, Rollout: rollout}})
	}
	a.published("ns", 3) // no client known: not watched
	if st := a.prop.status("ns", 3); st != nil {
		t.Errorf("a publish with no client known: %+v", st)
	}
	for _, c := range []string{"a", "b", "c", "d"} {
		ack(c, 1, wire.AckApplied, "")
	}
	a.published("ns", 5)
	published := now

	now = published.Add(time.Second)
	ack("a", 5, wire.AckApplied, "")
	ack("b", 5, wire.AckRejected, "")  // a nack: not counted
	ack("c", 6, wire.AckApplied, "r1") // a rollout's report: not counted
	ack("e", 5, wire.AckApplied, "")   // not known at the publish
	st := a.prop.status("ns", 5)
	if st == nil || st.Clients != 4 || st.Acked != 1 || st.P50 != nil {
		t.Fatalf("after one ack: %+v", st)
	}
	now = published.Add(2 * time.Second)
	ack("b", 6, wire.AckApplied, "") // a later revision counts
	st = a.prop.status("ns", 5)
	if st.Acked != 2 || st.P50 == nil || *st.P50 != 2 || st.P95 != nil {
		t.Fatalf("after two acks: %+v", st)
	}
	now = published.Add(3 * time.Second)
	ack("c", 5, wire.AckApplied, "")
	ack("d", 5, wire.AckApplied, "")
	st = a.prop.status("ns", 5)
	if st.Acked != 4 || *st.P95 != 3 || *st.P100 != 3 {
		t.Fatalf("after every ack: %+v", st)
	}
	if got := recorded(hist); got != [3]float64{2, 3, 3} {
		t.Fatalf("recorded %v, want the marks 2 s, 3 s, 3 s", got)
	}

	// A publish that one of five clients (e is known now) never acks:
	// its 95% and 100% marks are recorded at the watch's expiry.
	a.published("ns", 7)
	published = now
	now = published.Add(time.Second)
	for _, c := range []string{"a", "b", "c", "d"} {
		ack(c, 7, wire.AckApplied, "")
	}
	now = published.Add(propagationWatchTTL + time.Second)
	a.prop.expire(now)
	ttl := propagationWatchTTL.Seconds()
	if got := recorded(hist); got != [3]float64{2 + 1, 3 + ttl, 3 + ttl} {
		t.Fatalf("recorded %v after the expiry", got)
	}
	if st := a.prop.status("ns", 7); st != nil {
		t.Errorf("an expired watch's status: %+v", st)
	}
}

// sumHistogram is a histogram that sums what it records by share.
type sumHistogram struct {
	embedded.Float64Histogram
	sums [3]float64
}

func (h *sumHistogram) Record(_ context.Context, v float64, opts ...metric.RecordOption) {
	attrs := metric.NewRecordConfig(opts).Attributes()
	share, _ := attrs.Value("share")
	for i, s := range []string{"0.5", "0.95", "1"} {
		if share.AsString() == s {
			h.sums[i] += v
		}
	}
}

func (h *sumHistogram) Enabled(context.Context) bool { return true }

// recorded returns the sums of the shares 0.5, 0.95 and 1.
func recorded(h *sumHistogram) [3]float64 { return h.sums }
