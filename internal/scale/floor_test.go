//go:build scale

package scale

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/holdfast-dev/holdfast/internal/testutil"
)

// floorEnv makes a child process the floor benchmark's clients: it dials
// HOLDFAST_SCALE_FLOOR_CONNS connections to the address it names.
const floorEnv = "HOLDFAST_SCALE_FLOOR_ADDR"

const (
	floorChange = 300 // bytes: about a one-key change event
	floorAck    = 200 // bytes: about an ack line
)

// BenchmarkLoopbackFloor is the least any server here can spend per
// client per publish: HOLDFAST_SCALE_CLIENTS (10000) TCP connections from
// HOLDFAST_SCALE_PROCS (2) processes; per publish, every connection's
// writer goroutine wakes on one broadcast and writes one 300-byte change,
// and each client answers with one 200-byte ack, read by its
// connection's reader goroutine. No HTTP, no framing, no JSON: the CPU it
// reports per client per publish (server-cpu-µs/client/publish, as
// BenchmarkFleet's) is the floor under BenchmarkFleet's, on the same
// machine. With HOLDFAST_SCALE_NOACKS=1 the clients do not answer.
//
//	go test -tags scale -run '^$' -bench LoopbackFloor -benchtime 1x ./internal/scale/
func BenchmarkLoopbackFloor(b *testing.B) {
	clients := envInt("HOLDFAST_SCALE_CLIENTS", 10000)
	procs := envInt("HOLDFAST_SCALE_PROCS", 2)
	publishes := envInt("HOLDFAST_SCALE_PUBLISHES", 20)
	acks := os.Getenv("HOLDFAST_SCALE_NOACKS") == ""
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	defer ln.Close()

	// A publish is closed once its next is set: a writer that saw it
	// closed goes on to the next.
	type publication struct {
		done chan struct{}
		next *publication
	}
	head := &publication{done: make(chan struct{})}
	stop := make(chan struct{})
	var acked, wrote atomic.Int64
	var wg sync.WaitGroup
	var conns []net.Conn
	accepted := make(chan struct{})
	go func() {
		defer close(accepted)
		for range clients {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			conns = append(conns, c)
			wg.Add(2)
			go func(pub *publication) { // the writer: a stream's handler
				defer wg.Done()
				change := make([]byte, floorChange)
				for ; ; pub = pub.next {
					select {
					case <-pub.done:
					case <-stop:
						return
					}
					if _, err := c.Write(change); err != nil {
						return
					}
					wrote.Add(1)
				}
			}(head)
			go func() { // the reader: the connection's frames
				defer wg.Done()
				buf := make([]byte, floorAck)
				for {
					if _, err := io.ReadFull(c, buf); err != nil {
						return
					}
					acked.Add(1)
				}
			}()
		}
	}()
	var kids []*childProc
	for i := range procs {
		n := clients / procs
		if i < clients%procs {
			n++
		}
		noacks := "HOLDFAST_SCALE_NOACKS="
		if !acks {
			noacks += "1"
		}
		kids = append(kids, startProc(b, floorEnv+"="+ln.Addr().String(), "HOLDFAST_SCALE_FLOOR_CONNS="+strconv.Itoa(n), noacks))
	}
	for _, k := range kids {
		expect(b, k, "connected", 2*time.Minute)
	}
	<-accepted
	b.ResetTimer()
	cpu0 := cpuTime(b)
	start := time.Now()
	for p := 1; p <= publishes; p++ {
		head.next = &publication{done: make(chan struct{})}
		close(head.done)
		head = head.next
		want := int64(p * clients)
		if !testutil.Wait(time.Minute, func() bool { return wrote.Load() >= want && (!acks || acked.Load() >= want) }) {
			b.Fatalf("publish %d: %d written, %d acked of %d", p, wrote.Load(), acked.Load(), want)
		}
	}
	busy := cpuTime(b) - cpu0
	span := time.Since(start)
	b.StopTimer()
	// The same span idle, as BenchmarkFleet subtracts its idle fleet's.
	cpu1 := cpuTime(b)
	time.Sleep(span)
	idle := cpuTime(b) - cpu1
	b.ReportMetric(float64((busy-idle).Microseconds())/float64(clients*publishes), "server-cpu-µs/client/publish")
	b.Logf("%d clients, %d publishes (acks %v): CPU %v over %v, %v idle over the same span", clients, publishes, acks, busy, span, idle)
	for _, k := range kids {
		k.stop()
	}
	close(stop)
	for _, c := range conns {
		_ = c.Close()
	}
	wg.Wait()
}

// floorChild dials n connections to addr, answers every change with an
// ack (unless HOLDFAST_SCALE_NOACKS is set), says "connected" and runs
// until its stdin closes.
func floorChild(addr string, n int, in io.Reader, out io.Writer) error {
	acks := os.Getenv("HOLDFAST_SCALE_NOACKS") == ""
	var conns []net.Conn
	for range n {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			return err
		}
		conns = append(conns, c)
		go func() {
			change, ack := make([]byte, floorChange), make([]byte, floorAck)
			for {
				if _, err := io.ReadFull(c, change); err != nil {
					return
				}
				if acks {
					if _, err := c.Write(ack); err != nil {
						return
					}
				}
			}
		}()
	}
	fmt.Fprintln(out, "connected")
	_, _ = io.Copy(io.Discard, bufio.NewReader(in))
	for _, c := range conns {
		_ = c.Close()
	}
	return nil
}
