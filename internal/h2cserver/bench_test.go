package h2cserver

import (
	"encoding/binary"
	"net"
	"net/http"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/holdfast-dev/holdfast/internal/memstat"
)

// BenchmarkIdleConnMemory holds HOLDFAST_BENCH_CONNS (default 2000) h2c
// connections open, each with one request whose handler waits, and
// reports the server's heap and stacks per connection: net/http's own
// h2c beside a Server.
func BenchmarkIdleConnMemory(b *testing.B) {
	n := 2000
	if v, err := strconv.Atoi(os.Getenv("HOLDFAST_BENCH_CONNS")); err == nil && v > 0 {
		n = v
	}
	for _, mode := range []string{"net-http", "h2cserver"} {
		b.Run(mode, func(b *testing.B) {
			b.ReportAllocs()
			for range b.N {
				idleConns(b, mode, n)
			}
		})
	}
}

func idleConns(b *testing.B, mode string, n int) {
	entered := make(chan struct{}, n)
	hs := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusOK)
		w.(http.Flusher).Flush()
		entered <- struct{}{}
		<-r.Context().Done()
	})}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	var closeServer func() error
	if mode == "net-http" {
		var p http.Protocols
		p.SetHTTP1(true)
		p.SetUnencryptedHTTP2(true)
		hs.Protocols = &p
		go func() { _ = hs.Serve(ln) }()
		closeServer = hs.Close
	} else {
		s := New(hs)
		go func() { _ = s.Serve(ln) }()
		closeServer = s.Close
	}
	defer func() { _ = closeServer() }()

	before := memstat.Now()
	conns := make([]net.Conn, 0, n)
	defer func() {
		for _, c := range conns {
			_ = c.Close()
		}
	}()
	req := rawRequest(ln.Addr().String())
	for range n {
		c, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			b.Fatal(err)
		}
		if _, err := c.Write(req); err != nil {
			b.Fatal(err)
		}
		conns = append(conns, c)
	}
	timeout := time.After(time.Minute)
	for range n {
		select {
		case <-entered:
		case <-timeout:
			b.Fatal("timed out waiting for the handlers")
		}
	}
	// The clients' side is a net.Conn each, which the figures include.
	after := memstat.Now()
	per := func(a, b uint64) float64 { return (float64(a) - float64(b)) / float64(n) }
	b.ReportMetric(per(after.Heap+after.Stacks, before.Heap+before.Stacks), "B/conn")
	b.ReportMetric(per(after.Heap, before.Heap), "heap-B/conn")
	b.ReportMetric(per(after.Stacks, before.Stacks), "stack-B/conn")
	b.ReportMetric(per(after.Goroutines, before.Goroutines), "goroutines/conn")
}

// rawRequest is an h2c client's first bytes: the preface, an empty
// SETTINGS and one GET (literal header fields, no Huffman). The client
// reads nothing, so no goroutine or buffer of this process is the
// client's but the net.Conn.
func rawRequest(host string) []byte {
	var block []byte
	for _, f := range [][2]string{{":method", "GET"}, {":scheme", "http"}, {":authority", host}, {":path", "/"}} {
		block = append(block, 0, byte(len(f[0])))
		block = append(block, f[0]...)
		block = append(block, byte(len(f[1])))
		block = append(block, f[1]...)
	}
	out := []byte(preface)
	out = append(out, frame(0x4, 0, 0, nil)...)
	return append(out, frame(0x1, 0x1|0x4, 1, block)...) // HEADERS, END_STREAM|END_HEADERS
}

func frame(typ, flags byte, stream uint32, payload []byte) []byte {
	f := []byte{byte(len(payload) >> 16), byte(len(payload) >> 8), byte(len(payload)), typ, flags}
	f = binary.BigEndian.AppendUint32(f, stream)
	return append(f, payload...)
}
