package dataplane

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// Run with: go test -run '^$' -bench 'Ack' -benchmem ./internal/dataplane/
//
// The handler alone (no network): what the server spends per ack request.

// nopWriter is a ResponseWriter that keeps nothing, so that the benchmark
// measures the handler, not a recorder.
type nopWriter struct{ h http.Header }

func (w *nopWriter) Header() http.Header         { return w.h }
func (w *nopWriter) Write(b []byte) (int, error) { return len(b), nil }
func (w *nopWriter) WriteHeader(int)             {}

func benchAck(b *testing.B, body string, wantAcks int64) {
	s := benchPlane(b)
	h := s.mux
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

// benchPlane is an origin's data plane over namespaces ns-0..ns-9.
func benchPlane(b *testing.B) *Server {
	be := newMemBackend()
	s := be.start(b)
	for i := range 10 {
		be.publish(fmt.Sprintf("ns-%d", i), map[string]any{"k": i})
	}
	return s
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

// batchLine is an AckBatch of n acks as transport sends it on the ack
// stream: each ack's client_id empty, left to the batch's.
func batchLine(n int) []byte {
	var buf bytes.Buffer
	buf.WriteString(`{"client_id":"bench-client-1","acks":[`)
	for i := range n {
		if i > 0 {
			buf.WriteByte(',')
		}
		fmt.Fprintf(&buf, `{"client_id":"","ns":"ns-%d","revision":%d,"status":"ack"}`, i, i+1)
	}
	buf.WriteString(`]}`)
	return buf.Bytes()
}

// BenchmarkAckParse is the decoding and checking of one body alone:
// encoding/json (the baseline, as before ackDecoder), ackDecoder as POST
// /sdk/ack uses it, and as a stream's, which interns its strings and
// reuses its slice of acks; then the same for a relay, which keeps
// unknown fields (relay-json: encoding/json alone, as before).
func BenchmarkAckParse(b *testing.B) {
	bodies := []struct {
		name string
		data []byte
	}{
		{"single", []byte(`{"client_id":"bench-client-1","ns":"ns-3","revision":4,"status":"ack"}`)},
		{"batch1", batchLine(1)},
		{"batch10", batchLine(10)},
	}
	for _, body := range bodies {
		b.Run(body.name+"/json", func(b *testing.B) {
			b.ReportAllocs()
			for range b.N {
				if _, _, err := parseAckBodyJSON(body.data, false); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(body.name+"/decoder", func(b *testing.B) {
			b.ReportAllocs()
			for range b.N {
				if _, _, err := parseAckBody(body.data, false, false); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(body.name+"/stream", func(b *testing.B) {
			dec := ackDecoder{intern: true, reuse: true}
			b.ReportAllocs()
			for range b.N {
				if _, _, err := dec.parse(body.data, false, false); err != nil {
					b.Fatal(err)
				}
			}
		})
		// A relay's downstream: the baseline is encoding/json, as the relay
		// decoded every body before; then the stream's decoder in a relay.
		b.Run(body.name+"/relay-json", func(b *testing.B) {
			b.ReportAllocs()
			for range b.N {
				if _, _, err := parseRelayedAckBody(body.data, false); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(body.name+"/relay-stream", func(b *testing.B) {
			dec := ackDecoder{intern: true, reuse: true}
			b.ReportAllocs()
			for range b.N {
				if _, _, err := dec.parse(body.data, false, true); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// lines repeats line n times, each with its newline.
type lines struct {
	line []byte
	n    int
	off  int
}

func (l *lines) Read(p []byte) (int, error) {
	total := 0
	for len(p) > 0 && l.n > 0 {
		if l.off == len(l.line) {
			copy(p, "\n")
			p, total, l.off, l.n = p[1:], total+1, 0, l.n-1
			continue
		}
		c := copy(p, l.line[l.off:])
		p, total, l.off = p[c:], total+c, l.off+c
	}
	if total == 0 {
		return 0, io.EOF
	}
	return total, nil
}

func (*lines) Close() error { return nil }

// BenchmarkAckStream is what POST /sdk/ack/stream spends per line, one
// AckBatch of one ack (a client's report of one change) or of 10:
// decoding, the namespaces' check, recording (ns/op is per line).
func BenchmarkAckStream(b *testing.B) {
	for _, n := range []int{1, 10} {
		b.Run(fmt.Sprintf("batch%d", n), func(b *testing.B) {
			s := benchPlane(b)
			h := s.mux
			req := httptest.NewRequest(http.MethodPost, "/sdk/ack/stream", nil)
			req.ProtoMajor, req.ProtoMinor = 2, 0
			req.Body = &lines{line: batchLine(n), n: b.N}
			w := &nopWriter{h: make(http.Header)}
			b.ReportAllocs()
			b.ResetTimer()
			h.ServeHTTP(w, req)
			b.StopTimer()
			if got := s.Stats().Acks; got < int64(b.N) {
				b.Fatalf("acks counted %d, want %d", got, b.N)
			}
		})
	}
}
