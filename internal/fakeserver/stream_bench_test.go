package fakeserver

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/holdfast-dev/holdfast/internal/rollout"
	"github.com/holdfast-dev/holdfast/transport"
)

// Run with:
//
//	go test -run '^$' -bench 'StreamCPU' -benchtime 20x ./internal/fakeserver/
//
// CPU per publish per watching stream: N /sdk/stream readers of one
// namespace in this process (raw connections that read and discard
// frames), a publish, and the process's CPU time (getrusage: server and
// readers together, so an upper bound for the server's) until every reader
// has read the change. "other" publishes to a namespace no stream carries
// (prompt progress, coalesced per 250 ms); "acks" has every reader POST an
// AckBatch for each change, on its own kept-alive connection. The readers
// list no capabilities (clients that predate rollouts) unless
// "rollout-aware"; "reserved" puts the reserved key with every change,
// so that each has a base view, built once for all the readers.

func cpuNow() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func benchStreamCPU(b *testing.B, n int, acks bool) { benchStreamCPUWith(b, n, acks, false, false) }

func benchStreamCPUWith(b *testing.B, n int, acks, aware, reserved bool) {
	fds := uint64(2 * n)
	if acks {
		fds *= 2
	}
	needFDs(b, fds)
	s, err := Start(WithHeartbeat(time.Hour))
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	rev, _ := s.Publish("bench", map[string]any{"k": 0})
	s.Publish("elsewhere", map[string]any{"k": 0})
	var remaining atomic.Int64
	all := make(chan struct{}, 1)
	done := func() {
		if remaining.Add(-1) == 0 {
			all <- struct{}{}
		}
	}
	rd := &readers{}
	if aware {
		rd.hdr = transport.HeaderCapabilities + ": " + transport.CapabilityRollout + "\r\n"
	}
	path := "/sdk/stream?ns=bench:" + strconv.FormatInt(rev, 10)
	var ackConns []net.Conn
	for i := range n {
		onChange := done
		if acks {
			conn, err := net.Dial("tcp", s.Addr())
			if err != nil {
				b.Fatal(err)
			}
			ackConns = append(ackConns, conn)
			br := bufio.NewReaderSize(conn, 512)
			body := fmt.Sprintf(`{"client_id":"bench-%d","acks":[{"ns":"bench","revision":1,"status":"ack"}]}`, i)
			req := []byte(fmt.Sprintf("POST /sdk/ack HTTP/1.1\r\nHost: bench\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", len(body), body))
			onChange = func() {
				if _, err := conn.Write(req); err != nil {
					return
				}
				resp, err := http.ReadResponse(br, nil)
				if err != nil {
					return
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				done()
			}
		}
		rd.start(b, 1, s.Addr(), path, onChange)
	}
	defer func() {
		for _, c := range ackConns {
			c.Close()
		}
		rd.close()
	}()
	waitReady(b, func() bool { return s.OpenStreams() == n })
	time.Sleep(300 * time.Millisecond) // let the first progress ticks pass: not synchronisation, calm before measuring

	b.ResetTimer()
	cpu0, t0 := cpuNow(), time.Now()
	for i := range b.N {
		remaining.Store(int64(n))
		if reserved {
			publishReserved(b, s, "bench", map[string]json.RawMessage{"retry-timeout-ms": json.RawMessage(strconv.Itoa(i)),
				rollout.Key: json.RawMessage(`{"id":"r` + strconv.Itoa(i) + `"}`)})
		} else if _, err := s.Publish("bench", map[string]any{"retry-timeout-ms": i}); err != nil {
			b.Fatal(err)
		}
		select {
		case <-all:
		case <-time.After(60 * time.Second):
			b.Fatalf("publish %d: %d readers still waiting", i, remaining.Load())
		}
	}
	cpu, wall := cpuNow()-cpu0, time.Since(t0)
	b.StopTimer()
	b.ReportMetric(float64(cpu.Nanoseconds())/float64(b.N*n), "cpu-ns/publish/stream")
	b.ReportMetric(float64(wall.Microseconds())/float64(b.N), "wall-µs/publish")
}

func BenchmarkStreamCPU(b *testing.B) {
	for _, n := range []int{1000, 8000} {
		b.Run(fmt.Sprintf("streams=%d", n), func(b *testing.B) { benchStreamCPU(b, n, false) })
	}
	for _, n := range []int{1000, 4000} {
		b.Run(fmt.Sprintf("streams=%d/acks", n), func(b *testing.B) { benchStreamCPU(b, n, true) })
	}
	b.Run("streams=1000/rollout-aware", func(b *testing.B) { benchStreamCPUWith(b, 1000, false, true, false) })
	b.Run("streams=1000/reserved", func(b *testing.B) { benchStreamCPUWith(b, 1000, false, false, true) })
	b.Run("streams=1000/rollout-aware/reserved", func(b *testing.B) { benchStreamCPUWith(b, 1000, false, true, true) })
}

// BenchmarkStreamCPUOther publishes to a namespace that none of the N
// streams carries: the cost is the prompt progress, at most one wake-up
// per stream per 250 ms however many publishes. Publishes are paced at
// one per 50 ms; the figure is CPU per publish per stream.
func BenchmarkStreamCPUOther(b *testing.B) {
	const n = 8000
	needFDs(b, 2*n)
	s, err := Start(WithHeartbeat(time.Hour))
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	rev, _ := s.Publish("bench", map[string]any{"k": 0})
	rd := &readers{}
	rd.start(b, n, s.Addr(), "/sdk/stream?ns=bench:"+strconv.FormatInt(rev, 10), func() {})
	defer rd.close()
	waitReady(b, func() bool { return s.OpenStreams() == n })
	time.Sleep(300 * time.Millisecond)
	b.ResetTimer()
	cpu0 := cpuNow()
	for i := range b.N {
		if _, err := s.Publish("elsewhere", map[string]any{"k": i}); err != nil {
			b.Fatal(err)
		}
		time.Sleep(50 * time.Millisecond) // the publish rate, not synchronisation
	}
	time.Sleep(300 * time.Millisecond) // the last tick
	cpu := cpuNow() - cpu0
	b.StopTimer()
	b.ReportMetric(float64(cpu.Nanoseconds())/float64(b.N*n), "cpu-ns/publish/stream")
}
