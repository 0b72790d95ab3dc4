package config_test

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/holdfast-dev/holdfast/config"
	"github.com/holdfast-dev/holdfast/internal/fakeserver"
)

// BenchmarkClientNamespaces measures one client with 1, 10 and 100 open
// namespaces against the reference server, at steady state (every
// namespace opened and a publish applied to each): the client's TCP
// connections to the server (from /proc/net/tcp), the client's goroutines
// (the server runs in the same process: its goroutines are told apart by
// their stacks) and the heap the client and the server's side of it hold.
//
//	go test -run '^$' -bench ClientNamespaces -benchtime 1x ./config/
func BenchmarkClientNamespaces(b *testing.B) {
	for _, n := range []int{1, 10, 100} {
		b.Run(strconv.Itoa(n), func(b *testing.B) {
			for range b.N {
				conns, goroutines, heap := clientFootprint(b, n)
				b.ReportMetric(float64(conns), "conns")
				b.ReportMetric(float64(goroutines), "goroutines")
				b.ReportMetric(float64(goroutines)/float64(n), "goroutines/ns")
				b.ReportMetric(float64(heap)/1024, "heap-KiB")
			}
		})
	}
}

func clientFootprint(b *testing.B, n int) (conns, goroutines int, heap uint64) {
	srv, err := fakeserver.Start()
	if err != nil {
		b.Fatal(err)
	}
	defer srv.Close()
	names := make([]string, n)
	for i := range names {
		names[i] = fmt.Sprintf("ns%03d", i)
		if _, err := srv.Publish(names[i], map[string]any{"k": 0}); err != nil {
			b.Fatal(err)
		}
	}
	baseG := clientGoroutines()
	baseHeap := heapInUse()

	c, err := config.New(config.WithEndpoint(srv.URL()))
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	opened := make([]*config.Namespace, n)
	for i, name := range names {
		if opened[i], err = c.Namespace(ctx, name); err != nil {
			b.Fatal(err)
		}
	}
	for i, name := range names {
		rev, err := srv.Publish(name, map[string]any{"k": 1})
		if err != nil {
			b.Fatal(err)
		}
		if err := opened[i].WaitForRevision(ctx, rev); err != nil {
			b.Fatal(err)
		}
	}
	// Steady: the last acks sent (they wait up to 250 ms), idle
	// connections settled.
	time.Sleep(500 * time.Millisecond)
	port := srv.Addr()[strings.LastIndexByte(srv.Addr(), ':')+1:]
	p, _ := strconv.Atoi(port)
	return connsTo(b, p), clientGoroutines() - baseG, heapInUse() - baseHeap
}

// clientGoroutines counts the goroutines that are not the reference
// server's (nor the test framework's, which are there before and after).
func clientGoroutines() int {
	buf := make([]byte, 16<<20)
	buf = buf[:runtime.Stack(buf, true)]
	n := 0
	for _, g := range strings.Split(string(buf), "\n\n") {
		switch {
		case strings.Contains(g, "internal/fakeserver"),
			strings.Contains(g, "net/http.(*conn).serve"),
			strings.Contains(g, "net/http.(*http2serverConn)"),
			strings.Contains(g, "net/http.(*connReader).backgroundRead"),
			strings.Contains(g, "net/http.(*Server).Serve"):
		default:
			n++
		}
	}
	return n
}

func heapInUse() uint64 {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapInuse
}

// connsTo counts the established TCP sockets of this process whose remote
// port is port: the client's ends of its connections to the server.
func connsTo(b *testing.B, port int) int {
	n := 0
	for _, f := range []string{"/proc/net/tcp", "/proc/net/tcp6"} {
		data, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(data), "\n")[1:] {
			fields := strings.Fields(line)
			if len(fields) < 4 || fields[3] != "01" { // ESTABLISHED
				continue
			}
			remote := fields[2]
			hexPort := remote[strings.LastIndexByte(remote, ':')+1:]
			if rp, err := strconv.ParseInt(hexPort, 16, 32); err == nil && int(rp) == port {
				n++
			}
		}
	}
	if n == 0 {
		b.Fatal("no connection to the server in /proc/net/tcp")
	}
	return n
}
