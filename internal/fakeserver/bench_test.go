package fakeserver

import (
	"bufio"
	"bytes"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/holdfast-dev/holdfast/internal/dataplane"
	"github.com/holdfast-dev/holdfast/internal/testutil"
	"github.com/holdfast-dev/holdfast/transport"
)

// Run with: go test -run '^$' -bench . -benchtime 20x ./internal/fakeserver/

const benchWatchers = 1000

// needFDs skips a benchmark when the process may not open n more files
// (each loopback connection costs two: client and server).
func needFDs(b *testing.B, n uint64) {
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err == nil && lim.Cur < n+256 {
		b.Skipf("needs %d open files, ulimit -n is %d", n+256, lim.Cur)
	}
}

// dialSSE opens a raw HTTP/1.1 stream and returns the connection and a
// reader of the (de-chunked) body. hdr is more header lines, each ending
// in "\r\n".
func dialSSE(b *testing.B, addr, path string, hdr ...string) (net.Conn, *bufio.Reader) {
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		b.Fatal(err)
	}
	if _, err := io.WriteString(conn, "GET "+path+" HTTP/1.1\r\nHost: bench\r\n"+strings.Join(hdr, "")+"\r\n"); err != nil {
		b.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReaderSize(conn, 512), nil)
	if err != nil || resp.StatusCode != http.StatusOK {
		b.Fatalf("watch: %v %v", resp, err)
	}
	return conn, bufio.NewReaderSize(resp.Body, 4096)
}

// readers runs one goroutine per stream that calls onChange for every
// change event it reads, until its connection is closed.
type readers struct {
	conns []net.Conn
	wg    sync.WaitGroup
	hdr   string // more header lines for each request (see dialSSE)
}

func (r *readers) start(b *testing.B, n int, addr, path string, onChange func()) {
	for range n {
		conn, br := dialSSE(b, addr, path, r.hdr)
		r.conns = append(r.conns, conn)
		r.wg.Add(1)
		go func() {
			defer r.wg.Done()
			change := false
			for {
				line, err := br.ReadSlice('\n')
				if err != nil {
					return
				}
				switch {
				case len(line) == 1:
					if change {
						onChange()
					}
					change = false
				case bytes.HasPrefix(line, []byte("event: change")):
					change = true
				}
			}
		}()
	}
}

func (r *readers) close() {
	for _, c := range r.conns {
		c.Close()
	}
	r.wg.Wait()
}

// rig is one broadcaster with benchWatchers readers; measure sends one
// event and returns the time until every reader has read it.
type rig struct {
	remaining atomic.Int64
	all       chan struct{}
	rd        *readers
	send      func(i int)
	stop      func()
}

func (g *rig) onChange() {
	if g.remaining.Add(-1) == 0 {
		g.all <- struct{}{}
	}
}

func (g *rig) measure(b *testing.B, i int) time.Duration {
	g.remaining.Store(benchWatchers)
	t0 := time.Now()
	g.send(i)
	select {
	case <-g.all:
	case <-time.After(30 * time.Second):
		b.Fatalf("broadcast %d: %d readers still waiting", i, g.remaining.Load())
	}
	return time.Since(t0)
}

func (g *rig) close() {
	g.rd.close()
	g.stop()
}

func waitReady(b *testing.B, ready func() bool) {
	b.Helper()
	testutil.Eventually(b, 30*time.Second, ready, "the watchers to connect")
}

// serverRig is the reference server with 1,000 watch streams on one namespace.
func serverRig(b *testing.B) *rig {
	s, err := Start(WithHeartbeat(time.Hour))
	if err != nil {
		b.Fatal(err)
	}
	rev, _ := s.Publish("bench", map[string]any{"k": 0})
	g := &rig{all: make(chan struct{}, 1), rd: &readers{}, stop: func() { s.Close() }}
	g.rd.start(b, benchWatchers, s.Addr(), "/sdk/watch?ns=bench&since="+strconv.FormatInt(rev, 10), g.onChange)
	waitReady(b, func() bool { return s.OpenStreams() == benchWatchers })
	g.send = func(i int) {
		if _, err := s.Publish("bench", map[string]any{"retry-timeout-ms": i}); err != nil {
			b.Fatal(err)
		}
	}
	return g
}

// baselineRig is the least an SSE broadcast can do, with 1,000 readers.
func baselineRig(b *testing.B) *rig {
	bl := &baseline{subs: make(map[chan []byte]struct{})}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	srv := &http.Server{Handler: bl}
	served := make(chan struct{})
	go func() {
		defer close(served)
		_ = srv.Serve(ln)
	}()
	g := &rig{all: make(chan struct{}, 1), rd: &readers{}, stop: func() { srv.Close(); <-served }}
	g.rd.start(b, benchWatchers, ln.Addr().String(), "/", g.onChange)
	waitReady(b, func() bool { return bl.len() == benchWatchers })
	g.send = func(i int) {
		// Encoded per broadcast, as the server encodes each change once.
		cs := transport.ChangeSet{Namespace: "bench", Revision: int64(i + 2), PrevRevision: int64(i + 1),
			StoreID: "0123456789abcdef", CommittedAt: time.Now().UTC(),
			Puts: map[string]json.RawMessage{"retry-timeout-ms": json.RawMessage(strconv.Itoa(i))}}
		bl.broadcast((&dataplane.Change{CS: cs}).Frame())
	}
	return g
}

// percentile returns the p-th percentile of lat (sorted in place), in µs.
func percentile(lat []time.Duration, p float64) float64 {
	slices.Sort(lat)
	i := int(float64(len(lat))*p+0.999999) - 1
	return float64(lat[max(i, 0)].Microseconds())
}

func runFanout(b *testing.B, g *rig) {
	defer g.close()
	lat := make([]time.Duration, 0, b.N)
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		lat = append(lat, g.measure(b, i))
	}
	b.StopTimer()
	b.ReportMetric(percentile(lat, 0.50), "p50-µs")
	b.ReportMetric(percentile(lat, 0.99), "p99-µs")
}

// BenchmarkFanout1000 publishes to a namespace watched by 1,000 SSE streams
// and measures the time until every watcher has read the change.
func BenchmarkFanout1000(b *testing.B) {
	needFDs(b, 2*benchWatchers)
	runFanout(b, serverRig(b))
}

// BenchmarkFanout1000Baseline is BenchmarkFanout1000's yardstick: a
// minimal hand-written SSE broadcast of a change event of the same size to
// 1,000 readers.
func BenchmarkFanout1000Baseline(b *testing.B) {
	needFDs(b, 2*benchWatchers)
	runFanout(b, baselineRig(b))
}

// BenchmarkFanout1000VsBaseline alternates one publish to the server and
// one baseline broadcast, so that both see the same machine load, and
// reports the ratios of their percentiles (server / baseline).
func BenchmarkFanout1000VsBaseline(b *testing.B) {
	needFDs(b, 4*benchWatchers)
	srv, base := serverRig(b), baselineRig(b)
	defer srv.close()
	defer base.close()
	var ls, lb []time.Duration
	b.ResetTimer()
	for i := range b.N {
		ls = append(ls, srv.measure(b, i))
		lb = append(lb, base.measure(b, i))
	}
	b.StopTimer()
	s50, s99 := percentile(ls, 0.50), percentile(ls, 0.99)
	b50, b99 := percentile(lb, 0.50), percentile(lb, 0.99)
	b.ReportMetric(s50, "server-p50-µs")
	b.ReportMetric(s99, "server-p99-µs")
	b.ReportMetric(b50, "baseline-p50-µs")
	b.ReportMetric(b99, "baseline-p99-µs")
	b.ReportMetric(s50/b50, "p50-ratio")
	b.ReportMetric(s99/b99, "p99-ratio")
}

// baseline is the least an SSE broadcast can do: one goroutine per
// subscriber with a channel, a write and a flush per message.
type baseline struct {
	mu   sync.Mutex
	subs map[chan []byte]struct{}
}

func (bl *baseline) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	ch := make(chan []byte, 64)
	bl.mu.Lock()
	bl.subs[ch] = struct{}{}
	bl.mu.Unlock()
	defer func() {
		bl.mu.Lock()
		delete(bl.subs, ch)
		bl.mu.Unlock()
	}()
	w.Header().Set("Content-Type", "text/event-stream")
	w.WriteHeader(http.StatusOK)
	w.(http.Flusher).Flush()
	for {
		select {
		case msg := <-ch:
			if _, err := w.Write(msg); err != nil {
				return
			}
			w.(http.Flusher).Flush()
		case <-r.Context().Done():
			return
		}
	}
}

func (bl *baseline) broadcast(msg []byte) {
	bl.mu.Lock()
	defer bl.mu.Unlock()
	for ch := range bl.subs {
		ch <- msg
	}
}

func (bl *baseline) len() int {
	bl.mu.Lock()
	defer bl.mu.Unlock()
	return len(bl.subs)
}

// BenchmarkIdleWatcherMemory reports the heap and stack held per idle watch
// stream, and goroutines per stream. The figure includes the benchmark's
// own side of each connection (a net.Conn and a 512-byte reader).
func BenchmarkIdleWatcherMemory(b *testing.B) {
	needFDs(b, 2*benchWatchers)
	s, err := Start(WithHeartbeat(time.Hour))
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	s.Publish("bench", map[string]any{"k": 0})
	b.ReportAllocs()
	for range b.N {
		before, g0 := memInUse()
		conns := make([]net.Conn, 0, benchWatchers)
		for range benchWatchers {
			conn, _ := dialSSE(b, s.Addr(), "/sdk/watch?ns=bench")
			conns = append(conns, conn)
		}
		testutil.Eventually(b, waitLimit, func() bool { return s.OpenStreams() == benchWatchers }, "%d streams", benchWatchers)
		after, g1 := memInUse()
		b.ReportMetric(float64(after-before)/benchWatchers, "bytes/watcher")
		b.ReportMetric(float64(g1-g0)/benchWatchers, "goroutines/watcher")
		for _, c := range conns {
			c.Close()
		}
		testutil.Eventually(b, waitLimit, func() bool { return s.OpenStreams() == 0 }, "no stream")
	}
}

func memInUse() (int64, int) {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return int64(m.HeapInuse + m.StackInuse), runtime.NumGoroutine()
}

// BenchmarkPublish measures publishes per second with no watchers and with
// 1,000 (fan-out is off the publish path, so the two should be close).
func BenchmarkPublish(b *testing.B) {
	for _, n := range []int{0, benchWatchers} {
		b.Run("watchers="+strconv.Itoa(n), func(b *testing.B) {
			needFDs(b, uint64(2*n))
			s, err := Start(WithHeartbeat(time.Hour))
			if err != nil {
				b.Fatal(err)
			}
			defer s.Close()
			s.Publish("bench", map[string]any{"k": 0})
			rd := &readers{}
			defer rd.close()
			rd.start(b, n, s.Addr(), "/sdk/watch?ns=bench", func() {})
			testutil.Eventually(b, waitLimit, func() bool { return s.OpenStreams() == n }, "%d streams", n)
			value := json.RawMessage(`{"host":"db-1.internal","port":5432,"pool":{"max":20}}`)
			b.ReportAllocs()
			b.ResetTimer()
			for i := range b.N {
				if _, err := s.PublishRaw("bench", map[string]json.RawMessage{"db/primary": value, "retry-ms": json.RawMessage(strconv.Itoa(i))}, nil); err != nil {
					b.Fatal(err)
				}
			}
			b.StopTimer()
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "publishes/s")
			// Watchers that fell more than a buffer behind were disconnected.
			b.ReportMetric(float64(n-s.OpenStreams()), "disconnected")
		})
	}
}
