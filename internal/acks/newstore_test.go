package acks

import (
	"log/slog"
	"testing"

	"github.com/holdfast-dev/holdfast/transport"
)

// An outcome of the old history that failed to go and waits again (the
// server was down while its store was reset) does not hide the outcome of
// a lower revision that follows it, of the new history: the server drops
// the first (above its head) and must record the second.
func TestQueueOutcomeOfANewHistoryReplacesAHigherRevision(t *testing.T) {
	for _, relayID := range []string{"", "relay-1"} {
		q := New(&flaky{}, slog.New(slog.DiscardHandler), relayID)
		q.requeue([]transport.Ack{{ClientID: "c1", Namespace: "app", Revision: 23, Status: transport.AckApplied}})
		if relayID == "" {
			q.Report("c1", "app", 1, "", false, nil)
		} else {
			q.Forward(transport.Ack{ClientID: "c1", Namespace: "app", Revision: 1, Status: transport.AckApplied}, false)
		}
		if got := q.take(); len(got) != 1 || got[0].Revision != 1 {
			t.Errorf("relay %q: waiting %+v; want revision 1 alone", relayID, got)
		}
	}
}
