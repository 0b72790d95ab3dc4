package fakeserver

import (
	"bytes"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// Run with: go test -run '^$' -bench 'Ack' -benchmem ./internal/fakeserver/
//
// The handler alone (no network): what the server spends per ack request.

// nopWriter is a ResponseWriter that keeps nothing, so that the benchmark
// measures the handler, not a recorder.
type nopWriter struct{ h http.Header }

func (w *nopWriter) Header() http.Header         { return w.h }
func (w *nopWriter) Write(b []byte) (int, error) { return len(b), nil }
func (w *nopWriter) WriteHeader(int)             {}

func benchAck(b *testing.B, body string, wantAcks int64) {
	s := start(b)
	for i := range 10 {
		if _, err := s.Publish(fmt.Sprintf("ns-%d", i), map[string]any{"k": i}); err != nil {
			b.Fatal(err)
		}
	}
	h := s.routes()
	req := httptest.NewRequest(http.MethodPost, "/sdk/ack", nil)
	w := &nopWriter{h: make(http.Header)}
	rd := strings.NewReader(body)
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		rd.Reset(body)
		req.Body = http.NoBody
		req.Body = readCloser{rd}
		req.ContentLength = int64(len(body))
		clear(w.h)
		h.ServeHTTP(w, req)
	}
	b.StopTimer()
	if got := s.Stats().Acks; got < int64(b.N) {
		b.Fatalf("acks counted %d, want %d", got, b.N)
	}
	_ = wantAcks
}

type readCloser struct{ *strings.Reader }

func (readCloser) Close() error { return nil }

// BenchmarkAckSingle is one POST /sdk/ack of one Ack.
func BenchmarkAckSingle(b *testing.B) {
	benchAck(b, `{"client_id":"bench-client-1","ns":"ns-3","revision":4,"status":"ack"}`, 1)
}

// BenchmarkAckBatch is one POST /sdk/ack of an AckBatch of 10 acks
// (ns/op is per request; divide by 10 for per ack).
func BenchmarkAckBatch(b *testing.B) {
	var buf bytes.Buffer
	buf.WriteString(`{"client_id":"bench-client-1","acks":[`)
	for i := range 10 {
		if i > 0 {
			buf.WriteByte(',')
		}
		fmt.Fprintf(&buf, `{"ns":"ns-%d","revision":%d,"status":"ack"}`, i, i+1)
	}
	buf.WriteString(`]}`)
	benchAck(b, buf.String(), 10)
}
