package transport_test

import (
	"context"
	"io"
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/holdfast-dev/holdfast/transport"
)

// Through a hop that does not carry the ack stream to the server (an h2c
// front that speaks HTTP/1.1 to it, which refuses the stream; one that
// buffers request bodies, which never answers), no batch is lost: a line
// counts as sent only once the stream was answered, else the batch goes
// as a POST.
func TestAckStreamThroughAHopThatDoesNotCarryIt(t *testing.T) {
	for name, handler := range map[string]http.HandlerFunc{
		"refused": func(w http.ResponseWriter, r *http.Request) {
			http.Error(w, `{"error":"bad_request","message":"the ack stream needs HTTP/2"}`, http.StatusBadRequest)
		},
		"buffered": func(w http.ResponseWriter, r *http.Request) {
			_, _ = io.Copy(io.Discard, r.Body) // until the body ends: never answered while the stream is up
		},
	} {
		t.Run(name, func(t *testing.T) {
			fs := startAppServer(t)
			src, err := transport.NewHTTPSource(ackStreamServer(t, fs, 0, handler))
			if err != nil {
				t.Fatal(err)
			}
			defer src.Close()
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			if _, err := src.Snapshot(ctx, transport.SnapshotRequest{Namespace: "app"}); err != nil {
				t.Fatal(err)
			}
			const batches = 5
			for i := range batches {
				ack := transport.Ack{ClientID: "c" + strconv.Itoa(i), Namespace: "app", Revision: 1, Status: transport.AckApplied}
				if err := src.AckBatch(ctx, []transport.Ack{ack}); err != nil {
					t.Fatalf("batch %d: %v", i, err)
				}
			}
			got := map[string]bool{}
			for _, c := range fs.Clients() {
				got[c.ClientID] = c.AckedRevision == 1
			}
			for i := range batches {
				if !got["c"+strconv.Itoa(i)] {
					t.Errorf("batch %d not recorded; recorded %v", i, got)
				}
			}
		})
	}
}
