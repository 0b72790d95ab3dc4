package relay_test

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"net/url"
	"os"
	"runtime/pprof"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/holdfast-dev/holdfast/holdfasttest"
	"github.com/holdfast-dev/holdfast/internal/memstat"
	"github.com/holdfast-dev/holdfast/internal/testutil"
	"github.com/holdfast-dev/holdfast/relay"
	"github.com/holdfast-dev/holdfast/transport"
)

// BenchmarkRelayIdleStreamMemory measures what one idle downstream watch
// stream costs the relay in memory (target: at most 32 KiB):
//
//	go test -run '^$' -bench RelayIdleStreamMemory -benchtime 1x ./relay/
//
// It opens HOLDFAST_BENCH_STREAMS (default 2000) streams of one namespace
// to a relay following an in-process origin, and reads the process's
// memory before and after, once the relay counts them all open:
// relay-B/stream is the Go heap live after a GC plus the goroutine
// stacks in use (runtime/metrics), rss-B/stream the resident set after a
// GC that returned freed memory to the OS. The clients are raw sockets
// (syscalls: no Go object, no goroutine, their buffers in the kernel) that
// write one request and never read, so that what grows is the relay's
// alone; the origin's share is one stream whatever N. Sub-benchmarks:
// h2c-stream is what the SDK opens (GET /sdk/stream over HTTP/2 with prior
// knowledge, a connection of its own), http1-stream and http1-watch the
// same stream and the single-namespace SSE watch over HTTP/1.1.
// HOLDFAST_BENCH_HEAPPROFILE names a file for the heap profile taken with
// the streams open (go tool pprof -sample_index inuse_space -top).
func BenchmarkRelayIdleStreamMemory(b *testing.B) {
	n := 2000
	if v, err := strconv.Atoi(os.Getenv("HOLDFAST_BENCH_STREAMS")); err == nil && v > 0 {
		n = v
	}
	for _, mode := range []string{"h2c-stream", "http1-stream", "http1-watch"} {
		b.Run(mode, func(b *testing.B) {
			b.ReportAllocs()
			origin := holdfasttest.NewServer(b)
			mustPublish(b, origin, "bench", map[string]any{"v": 1})
			r, base := startRelay(b, origin.URL(), relay.WithHeartbeat(relay.DefaultHeartbeat))
			if status, _, _ := getSnapshot(b, base, "bench"); status != 200 {
				b.Fatalf("snapshot through the relay: %d", status)
			}
			var cursor int64
			for _, st := range r.Namespaces() {
				if st.Namespace == "bench" {
					cursor = st.Cursor
				}
			}
			u, err := url.Parse(base)
			if err != nil {
				b.Fatal(err)
			}
			port, _ := strconv.Atoi(u.Port())
			req := idleRequest(mode, u.Host, cursor)
			for range b.N {
				idleStreams(b, r, port, req, n)
			}
		})
	}
}

// idleStreams opens n streams with req, measures, and closes them.
func idleStreams(b *testing.B, r *relay.Relay, port int, req []byte, n int) {
	b.Helper()
	before := memstat.Now()
	fds := make([]int, 0, n)
	defer func() {
		for _, fd := range fds {
			_ = syscall.Close(fd)
		}
		testutil.Eventually(b, waitLimit, func() bool { return r.Stats().OpenStreams == 0 }, "every stream closed")
	}()
	open0 := r.Stats().OpenStreams
	for range n {
		fd, err := rawConn(port, req)
		if err != nil {
			b.Fatal(err)
		}
		fds = append(fds, fd)
	}
	if !testutil.Wait(time.Minute, func() bool { return r.Stats().OpenStreams-open0 >= n }) {
		b.Fatalf("%d of %d streams open", r.Stats().OpenStreams-open0, n)
	}
	after := memstat.Now()
	if path := os.Getenv("HOLDFAST_BENCH_HEAPPROFILE"); path != "" {
		writeHeapProfile(b, path)
	}
	per := func(a, b uint64) float64 { return (float64(a) - float64(b)) / float64(n) }
	b.ReportMetric(per(after.Heap+after.Stacks, before.Heap+before.Stacks), "relay-B/stream")
	b.ReportMetric(per(after.Heap, before.Heap), "heap-B/stream")
	b.ReportMetric(per(after.Stacks, before.Stacks), "stack-B/stream")
	b.ReportMetric(per(after.RSS, before.RSS), "rss-B/stream")
	b.ReportMetric(per(after.Goroutines, before.Goroutines), "goroutines/stream")
}

// writeHeapProfile writes the heap profile now, streams open, to path.
func writeHeapProfile(b *testing.B, path string) {
	f, err := os.Create(path)
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	if err := pprof.Lookup("heap").WriteTo(f, 0); err != nil {
		b.Fatal(err)
	}
}

// rawConn connects to 127.0.0.1:port with a bare socket and writes req.
func rawConn(port int, req []byte) (int, error) {
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		return -1, err
	}
	if err := syscall.Connect(fd, &syscall.SockaddrInet4{Port: port, Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		_ = syscall.Close(fd)
		return -1, err
	}
	for p := req; len(p) > 0; {
		n, err := syscall.Write(fd, p)
		if err != nil {
			_ = syscall.Close(fd)
			return -1, err
		}
		p = p[n:]
	}
	return fd, nil
}

// idleRequest is the bytes a client of mode sends to open its stream of
// "bench" from cursor.
func idleRequest(mode, host string, cursor int64) []byte {
	streamPath := transport.PathStream + "?" + url.Values{"ns": {"bench:" + strconv.FormatInt(cursor, 10)}}.Encode()
	switch mode {
	case "http1-watch":
		return fmt.Appendf(nil, "GET %s?ns=bench&since=%d HTTP/1.1\r\nHost: %s\r\nAccept: text/event-stream\r\n\r\n", transport.PathWatch, cursor, host)
	case "http1-stream":
		return fmt.Appendf(nil, "GET %s HTTP/1.1\r\nHost: %s\r\nAccept: text/event-stream\r\n\r\n", streamPath, host)
	}
	// HTTP/2 with prior knowledge: the preface, an empty SETTINGS, then
	// one HEADERS frame (literal fields, no Huffman, no indexing).
	var block []byte
	for _, f := range [][2]string{{":method", "GET"}, {":scheme", "http"}, {":authority", host}, {":path", streamPath}, {"accept", "text/event-stream"}} {
		block = append(block, 0)
		block = hpackString(block, f[0])
		block = hpackString(block, f[1])
	}
	var out bytes.Buffer
	out.WriteString("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n")
	out.Write(h2Frame(0x4, 0, 0, nil))         // SETTINGS
	out.Write(h2Frame(0x1, 0x1|0x4, 1, block)) // HEADERS, END_STREAM|END_HEADERS
	return out.Bytes()
}

func h2Frame(typ, flags byte, stream uint32, payload []byte) []byte {
	f := []byte{byte(len(payload) >> 16), byte(len(payload) >> 8), byte(len(payload)), typ, flags}
	f = binary.BigEndian.AppendUint32(f, stream)
	return append(f, payload...)
}

// hpackString appends s as an HPACK string literal (RFC 7541 5.2, no
// Huffman) to b.
func hpackString(b []byte, s string) []byte {
	n := len(s)
	if n < 127 {
		b = append(b, byte(n))
	} else {
		b = append(b, 127)
		for n -= 127; n >= 128; n >>= 7 {
			b = append(b, byte(n&0x7f|0x80))
		}
		b = append(b, byte(n))
	}
	return append(b, s...)
}
