package transport_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/holdfast-dev/holdfast/internal/fakeserver"
	"github.com/holdfast-dev/holdfast/internal/testutil"
	"github.com/holdfast-dev/holdfast/internal/wire"
	"github.com/holdfast-dev/holdfast/transport"
)

// TestAckStream: over h2c, a relay's batches and a client's own go as
// lines of one POST /sdk/ack/stream, and the server records each; a
// server without the capability gets one POST /sdk/ack per batch; Close
// ends the stream and waits for its goroutine.
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
			if !testutil.Wait(10*time.Second, func() bool { return recorded(srv) >= batches }) {
				t.Fatalf("%d of %d acks recorded; stats %+v", recorded(srv), batches, srv.Stats())
			}
			if st := srv.Stats(); st.AckStreams != tc.streams || st.Acks != batches {
				t.Errorf("stats %+v: want %d ack streams, %d acks", st, tc.streams, batches)
			}
			// A client's own batches: on the same stream.
			for i := range batches {
				ack := transport.Ack{ClientID: "c2", Namespace: nsName(i), Revision: int64(i + 1), Status: transport.AckApplied}
				if err := src.AckBatch(ctx, []transport.Ack{ack}); err != nil {
					t.Fatalf("own batch %d: %v", i, err)
				}
			}
			testutil.Wait(10*time.Second, func() bool { return srv.Stats().Acks >= 2*batches })
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

// TestAckStreamStaysOpen: the ack stream carries batches however far
// apart (a client reports once per publish, and streams opened again for
// each publish's acks cost its server more than the stream held open).
func TestAckStreamStaysOpen(t *testing.T) {
	leakCheck(t)
	srv, src, ctx := ackSource(t)
	// Past the 2 s after which it once closed.
	for i, pause := range []time.Duration{0, 2500 * time.Millisecond, 0} {
		time.Sleep(pause)
		ack := transport.Ack{ClientID: "c1", Namespace: nsName(0), Revision: int64(i + 1), Status: transport.AckApplied}
		if err := src.AckBatch(ctx, []transport.Ack{ack}); err != nil {
			t.Fatal(err)
		}
		if !testutil.Wait(5*time.Second, func() bool { return srv.Stats().Acks >= int64(i+1) }) {
			t.Fatalf("stats %+v: want %d acks", srv.Stats(), i+1)
		}
		if st := srv.Stats(); st.AckStreams != 1 {
			t.Fatalf("batch %d: %d ack streams opened, want 1", i, st.AckStreams)
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

// TestAckStreamCloseWithAStalledServer: Close returns within about the
// drain bound even when the server stopped reading the ack stream with
// its flow-control window full (a black-holed or stalled server, when a
// failover is likely): the request is cut, its goroutine ends.
func TestAckStreamCloseWithAStalledServer(t *testing.T) {
	fs := startAppServer(t)
	unblock := make(chan struct{})
	defer close(unblock)
	url := ackStreamServer(t, fs, 65536, func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusOK) // then reads nothing
		http.NewResponseController(w).Flush()
		select {
		case <-unblock:
		case <-r.Context().Done():
		}
	})
	src, err := transport.NewHTTPSource(url)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if _, err := src.Snapshot(ctx, transport.SnapshotRequest{Namespace: "app"}); err != nil {
		t.Fatal(err) // learns h2c and ack-stream
	}
	// Lines past the stream's window: the transport then waits for a
	// window update that never comes.
	for sent := 0; sent <= 65536; {
		var acks []transport.Ack
		for i := range 8 {
			acks = append(acks, transport.Ack{ClientID: "c" + strconv.Itoa(sent) + "-" + strconv.Itoa(i), Namespace: "app", Revision: 1, Status: transport.AckApplied})
		}
		line, _ := json.Marshal(wire.AckBatch{ClientID: "relay-1", Acks: acks})
		sent += len(line) + 1
		wctx, wcancel := context.WithTimeout(ctx, time.Second)
		_ = src.AckRelayed(wctx, "relay-1", acks) // the last may stall: its ctx cuts it
		wcancel()
	}
	closed := make(chan struct{})
	start := time.Now()
	go func() { _ = src.Close(); close(closed) }()
	select {
	case <-closed:
		if took := time.Since(start); took > 4*time.Second {
			t.Errorf("Close took %v", took)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Close still waiting after 10 s for a stalled ack stream")
	}
}

// TestAckStreamRefusedFallsBackToPosts: a server that answers the ack
// stream with an error status (a fault, a refused token) may have taken
// its lines without recording them; later batches go as POSTs, whose
// failures the caller retries, rather than into one refused stream after
// another.
func TestAckStreamRefusedFallsBackToPosts(t *testing.T) {
	fs := startAppServer(t)
	var streams atomic.Int32
	url := ackStreamServer(t, fs, 0, func(w http.ResponseWriter, r *http.Request) {
		streams.Add(1)
		_, _ = io.Copy(io.Discard, io.LimitReader(r.Body, 1)) // takes a line's first byte, records nothing
		http.Error(w, `{"error":"unavailable"}`, http.StatusServiceUnavailable)
	})
	src, err := transport.NewHTTPSource(url)
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if _, err := src.Snapshot(ctx, transport.SnapshotRequest{Namespace: "app"}); err != nil {
		t.Fatal(err)
	}
	acked := func() map[string]bool {
		got := map[string]bool{}
		for _, c := range fs.Clients() {
			got[c.ClientID] = c.AckedRevision == 1
		}
		return got
	}
	// The first batches go into the stream, until its refusal comes back:
	// they may be lost. Probes until one is recorded, which it is once the
	// client knows of the refusal and posts.
	probes := 0
	testutil.EventuallyNil(t, 10*time.Second, func() error {
		id := "probe" + strconv.Itoa(probes)
		probes++
		ack := transport.Ack{ClientID: id, Namespace: "app", Revision: 1, Status: transport.AckApplied}
		if err := src.AckBatch(ctx, []transport.Ack{ack}); err != nil {
			return err
		}
		if !acked()[id] {
			return fmt.Errorf("%s not recorded", id)
		}
		return nil
	}, "a batch recorded after the stream was refused")
	// Every later batch goes as a POST, none into a refused stream.
	const batches = 10
	for i := range batches {
		ack := transport.Ack{ClientID: "c" + strconv.Itoa(i), Namespace: "app", Revision: 1, Status: transport.AckApplied}
		if err := src.AckBatch(ctx, []transport.Ack{ack}); err != nil {
			t.Fatalf("batch %d: %v", i, err)
		}
	}
	got := acked()
	for i := range batches {
		if !got["c"+strconv.Itoa(i)] {
			t.Errorf("batch %d not recorded; recorded %v", i, got)
		}
	}
	if n := streams.Load(); n != 1 {
		t.Errorf("%d ack streams opened; want 1, then POSTs", n)
	}
}

// ackStreamServer serves fs over HTTP/1.1 and h2c (a stream's receive
// buffer of window bytes, unless 0), but POST /sdk/ack/stream with
// ackStream; it returns the base URL and stops at the test's end.
func ackStreamServer(t *testing.T, fs *fakeserver.Server, window int, ackStream http.HandlerFunc) string {
	t.Helper()
	h := fs.Handler()
	var protos http.Protocols
	protos.SetHTTP1(true)
	protos.SetUnencryptedHTTP2(true)
	srv := &http.Server{Protocols: &protos, HTTP2: &http.HTTP2Config{MaxReceiveBufferPerStream: window},
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path == transport.PathAckStream {
				ackStream(w, r)
				return
			}
			h.ServeHTTP(w, r)
		})}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	return "http://" + ln.Addr().String()
}

// startAppServer starts a reference server with namespace "app" published
// once, closed when the test ends, and checks then that the test leaked no
// goroutine.
func startAppServer(t *testing.T) *fakeserver.Server {
	t.Helper()
	ignore := goleak.IgnoreCurrent()
	t.Cleanup(func() { goleak.VerifyNone(t, ignore) }) // runs after the server's Close
	fs, err := fakeserver.Start()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = fs.Close() })
	if _, err := fs.Publish("app", map[string]any{"k": 1}); err != nil {
		t.Fatal(err)
	}
	return fs
}

// TestAckRelayedLines: a relay's batches, a long one then a short one on
// the reused line buffer, reach the server whole and in order; a long
// error is cut to MaxAckErrorBytes on the wire, and the caller's acks are
// left as they were.
func TestAckRelayedLines(t *testing.T) {
	leakCheck(t)
	got := make(chan []transport.Ack, 4)
	_, src, ctx := ackSource(t, fakeserver.WithAckSink(func(acks []transport.Ack, _ bool) {
		got <- append([]transport.Ack(nil), acks...) // the slice is the server's
	}))
	long := make([]byte, transport.MaxAckErrorBytes+100)
	for i := range long {
		long[i] = 'e'
	}
	var many []transport.Ack
	for i := range 50 {
		many = append(many, transport.Ack{ClientID: "client-" + strconv.Itoa(i), Namespace: nsName(0), Revision: 1, Status: transport.AckRejected, Error: string(long)})
	}
	short := []transport.Ack{{ClientID: "c", Namespace: nsName(0), Revision: 1, Status: transport.AckApplied}}
	for _, batch := range [][]transport.Ack{many, short} {
		if err := src.AckRelayed(ctx, "relay-1", batch); err != nil {
			t.Fatal(err)
		}
		var recv []transport.Ack
		for len(recv) < len(batch) {
			select {
			case acks := <-got:
				recv = append(recv, acks...)
			case <-ctx.Done():
				t.Fatalf("%d of %d acks arrived", len(recv), len(batch))
			}
		}
		for i, a := range recv {
			want := batch[i]
			if len(want.Error) > transport.MaxAckErrorBytes {
				want.Error = want.Error[:transport.MaxAckErrorBytes]
			}
			if a.ClientID != want.ClientID || a.Error != want.Error || a.Status != want.Status {
				t.Fatalf("ack %d: got %+v, want %+v", i, a, want)
			}
		}
	}
	if many[0].Error != string(long) {
		t.Fatal("AckRelayed changed the caller's acks")
	}
}

// leakCheck checks, once the test and its cleanups are done, that
// it left no goroutine behind (a defer would check before the cleanups),
// as the internal tests' leakCheck does.
func leakCheck(t *testing.T) {
	ignore := goleak.IgnoreCurrent()
	t.Cleanup(func() { goleak.VerifyNone(t, ignore) })
}

// ackSource starts a reference server with opts and one namespace, and
// returns it with a source that has taken a snapshot of it (so knows the
// server's capabilities and speaks h2c) and a context for the test; the
// test's cleanup closes both.
func ackSource(t *testing.T, opts ...fakeserver.Option) (*fakeserver.Server, *transport.HTTPSource, context.Context) {
	t.Helper()
	srv, err := fakeserver.Start(opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Close() })
	if _, err := srv.Publish(nsName(0), map[string]any{"k": 0}); err != nil {
		t.Fatal(err)
	}
	src, err := transport.NewHTTPSource(srv.URL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = src.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	if _, err := src.Snapshot(ctx, transport.SnapshotRequest{Namespace: nsName(0)}); err != nil {
		t.Fatal(err)
	}
	return srv, src, ctx
}
