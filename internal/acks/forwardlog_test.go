package acks

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"slices"
	"testing"
	"time"

	"github.com/holdfast-dev/holdfast/internal/syncer"
	"github.com/holdfast-dev/holdfast/internal/testutil"
	"github.com/holdfast-dev/holdfast/transport"
)

// A relay's debug log names each ack it forwarded, once delivered, with
// when its send began; a refused ack is not among them, and a client's
// own queue (no relay id) logs nothing of the kind.
func TestQueueLogsForwardedAcksAtDebug(t *testing.T) {
	for _, relayID := range []string{"relay-1", ""} {
		// Read once the queue's goroutine has returned (q.Wait).
		var logs bytes.Buffer
		up := &picky{}
		q := New(up, slog.New(slog.NewJSONHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug})), relayID)
		ctx, cancel := context.WithCancel(context.Background())
		q.Start(ctx, syncer.Backoff{Initial: time.Millisecond, Max: 10 * time.Millisecond})
		before := time.Now()
		q.Add(transport.Ack{ClientID: "c 1", Namespace: "app", Revision: 7, Status: transport.AckApplied, Rollout: "r1"})
		q.Add(transport.Ack{ClientID: "bad", Namespace: "app", Revision: 7, Status: transport.AckApplied, Rollout: "r1"})
		q.Add(transport.Ack{ClientID: "c2", Namespace: "app", Revision: 6, Status: transport.AckRejected})
		ok := testutil.Wait(5*time.Second, func() bool { return len(up.clients()) == 2 })
		cancel()
		q.Wait()
		if !ok {
			t.Fatalf("relay %q: delivered %v", relayID, up.clients())
		}
		var got []string
		for line := range bytes.Lines(logs.Bytes()) {
			var rec struct {
				Msg  string    `json:"msg"`
				Sent time.Time `json:"sent"`
				N    int       `json:"n"`
				Acks []string  `json:"acks"`
			}
			if err := json.Unmarshal(line, &rec); err != nil {
				t.Fatalf("log line %q: %v", line, err)
			}
			if rec.Msg != "acks forwarded" {
				continue
			}
			if rec.Sent.Before(before) || rec.Sent.After(time.Now()) || rec.N != len(rec.Acks) {
				t.Errorf("relay %q: %+v sent outside the test, or n not the acks'", relayID, rec)
			}
			got = append(got, rec.Acks...)
		}
		slices.Sort(got)
		want := []string{"app 6 nack - c2", "app 7 ack r1 c 1"}
		if relayID == "" {
			want = nil
		}
		if !slices.Equal(got, want) {
			t.Errorf("relay %q: logged %q, want %q", relayID, got, want)
		}
	}
}
