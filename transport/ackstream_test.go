package transport_test

import (
	"context"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/holdfast-dev/holdfast/internal/fakeserver"
	"github.com/holdfast-dev/holdfast/transport"
)

// TestAckStream: over h2c, a relay's batches after the first (which finds
// no stream open and none recent: a POST) go as lines of one POST
// /sdk/ack/stream, and the server records each; a server without the
// capability gets one POST /sdk/ack per batch; Close ends the stream and
// waits for its goroutine. A client's own batches always post.
func TestAckStream(t *testing.T) {
	for _, tc := range []struct {
		name    string
		without []fakeserver.Option
		streams int64
	}{
		{"offered", nil, 1},
		{"not offered", []fakeserver.Option{fakeserver.WithoutCapability(transport.CapabilityAckStream)}, 0},
		{"no h2c", []fakeserver.Option{fakeserver.WithoutCapability(transport.CapabilityH2C)}, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
			srv, err := fakeserver.Start(tc.without...)
			if err != nil {
				t.Fatal(err)
			}
			defer srv.Close()
			const batches = 5
			for i := range batches {
				if _, err := srv.Publish(nsName(i), map[string]any{"k": i}); err != nil {
					t.Fatal(err)
				}
			}
			src, err := transport.NewHTTPSource(srv.URL())
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			if _, err := src.Snapshot(ctx, transport.SnapshotRequest{Namespace: nsName(0)}); err != nil {
				t.Fatal(err) // learns the capabilities (and switches to h2c)
			}
			for i := range batches {
				ack := transport.Ack{ClientID: "c1", Namespace: nsName(i), Revision: int64(i + 1), Status: transport.AckApplied}
				if err := src.AckRelayed(ctx, "relay-1", []transport.Ack{ack}); err != nil {
					t.Fatalf("batch %d: %v", i, err)
				}
			}
			deadline := time.Now().Add(10 * time.Second)
			for recorded(srv) < batches {
				if time.Now().After(deadline) {
					t.Fatalf("%d of %d acks recorded; stats %+v", recorded(srv), batches, srv.Stats())
				}
				time.Sleep(5 * time.Millisecond)
			}
			if st := srv.Stats(); st.AckStreams != tc.streams || st.Acks != batches {
				t.Errorf("stats %+v: want %d ack streams, %d acks", st, tc.streams, batches)
			}
			// A client's own batches, however close together: POSTs.
			for i := range batches {
				ack := transport.Ack{ClientID: "c2", Namespace: nsName(i), Revision: int64(i + 1), Status: transport.AckApplied}
				if err := src.AckBatch(ctx, []transport.Ack{ack}); err != nil {
					t.Fatalf("own batch %d: %v", i, err)
				}
			}
			if st := srv.Stats(); st.AckStreams != tc.streams || st.Acks != 2*batches {
				t.Errorf("stats %+v after a client's own batches: want %d ack streams, %d acks", st, tc.streams, 2*batches)
			}
			_ = src.Close()
			if err := src.AckRelayed(ctx, "relay-1", []transport.Ack{{ClientID: "c1", Namespace: nsName(0), Revision: 1, Status: transport.AckApplied}}); err != nil {
				t.Errorf("a batch after Close (a request again): %v", err)
			}
			_ = src.Close()
		})
	}
}

// TestAckStreamOnlyForFrequentBatches: a relay's batch after a quiet
// spell goes as one POST (it opens no stream to hold); batches closer
// together than the stream's idle time go on one stream, which closes
// once they stop.
func TestAckStreamOnlyForFrequentBatches(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	srv, err := fakeserver.Start()
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	if _, err := srv.Publish(nsName(0), map[string]any{"k": 0}); err != nil {
		t.Fatal(err)
	}
	src, err := transport.NewHTTPSource(srv.URL())
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	const idle = time.Second
	transport.SetAckStreamIdle(src, idle)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := src.Snapshot(ctx, transport.SnapshotRequest{Namespace: nsName(0)}); err != nil {
		t.Fatal(err)
	}
	send := func(rev int64) {
		t.Helper()
		ack := transport.Ack{ClientID: "c1", Namespace: nsName(0), Revision: rev, Status: transport.AckApplied}
		if err := src.AckRelayed(ctx, "relay-1", []transport.Ack{ack}); err != nil {
			t.Fatal(err)
		}
	}
	waitAcks := func(n int64) {
		t.Helper()
		deadline := time.Now().Add(5 * time.Second)
		for srv.Stats().Acks < n {
			if time.Now().After(deadline) {
				t.Fatalf("stats %+v: want %d acks", srv.Stats(), n)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	for i, step := range []struct {
		pause   time.Duration // before the batch
		streams int64         // ack streams opened so far, after it
	}{
		{0, 0},         // the first: a POST
		{0, 1},         // close behind it: the stream opens
		{0, 1},         // and carries the next
		{2 * idle, 1},  // after a quiet spell (the stream closed): a POST
		{2 * idle, 1},  // again
		{idle / 10, 2}, // close behind: a stream again
	} {
		time.Sleep(step.pause)
		send(int64(i + 1))
		waitAcks(int64(i + 1))
		if st := srv.Stats(); st.AckStreams != step.streams {
			t.Fatalf("batch %d: %d ack streams opened, want %d", i, st.AckStreams, step.streams)
		}
	}
}

func nsName(i int) string { return "ack" + string(rune('a'+i)) }

// recorded counts the namespaces whose ack the server holds.
func recorded(srv *fakeserver.Server) int {
	n := 0
	for _, c := range srv.Clients() {
		if c.AckedRevision > 0 {
			n++
		}
	}
	return n
}

// TestAckStreamSlowServerLosesNothing: a relay's ack stream that ends for
// idleness while the server has not read it yet (a busy server: here one
// that answers 3.5 s late, past the stream's 2 s idle time) still has
// every line recorded: the request is not cut a second after its body
// ended.
func TestAckStreamSlowServerLosesNothing(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	srv, err := fakeserver.Start()
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	if _, err := srv.Publish(nsName(0), map[string]any{"k": 0}); err != nil {
		t.Fatal(err)
	}
	src, err := transport.NewHTTPSource(srv.URL())
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	transport.SetAckStreamIdle(src, 2*time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if _, err := src.Snapshot(ctx, transport.SnapshotRequest{Namespace: nsName(0)}); err != nil {
		t.Fatal(err)
	}
	ack := transport.Ack{ClientID: "c1", Namespace: nsName(0), Revision: 1, Status: transport.AckApplied}
	if err := src.AckRelayed(ctx, "relay-1", []transport.Ack{ack}); err != nil { // a POST: the stream opens with the next
		t.Fatal(err)
	}
	srv.SetLatency(3500 * time.Millisecond)
	ack.ClientID = "c2"
	if err := src.AckRelayed(ctx, "relay-1", []transport.Ack{ack}); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(15 * time.Second)
	for recorded(srv) < 2 {
		if time.Now().After(deadline) {
			t.Fatalf("%d of 2 acks recorded; stats %+v", recorded(srv), srv.Stats())
		}
		time.Sleep(10 * time.Millisecond)
	}
	srv.SetLatency(0)
}
