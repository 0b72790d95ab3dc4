// Command target serves the relay that the relay's attack suite
// (relay/attack_test.go) attacks, as `holdfast relay` serves it: relay.New
// behind internal/listen's defaults, on loopback. The test builds it
// without the race detector and runs it as a child process, so that the
// suite measures what an attack costs the relay as it is built for
// production. Under -race every new HTTP/2 stream's goroutine costs the
// race detector's bookkeeping, many times the stream's own work: a rapid
// reset then measured the instrumentation, not the relay.
//
// It prints "listening ADDR" once serving, then "heap N" (the Go heap in
// use, in bytes) every 100 ms, and shuts down when its standard input
// closes.
//
// Usage: target -upstream URL [-max-conns N]
package main

import (
	"flag"
	"fmt"
	"io"
	"os"
	"runtime"
	"time"

	"github.com/holdfast-dev/holdfast/internal/listen"
	"github.com/holdfast-dev/holdfast/relay"
	"github.com/holdfast-dev/holdfast/transport"
)

func main() {
	upstream := flag.String("upstream", "", "the `URL` of the relay's upstream")
	maxConns := flag.Int("max-conns", 0, "the listener's connection cap, as holdfast relay's -max-conns (0: its default)")
	flag.Parse()
	if err := run(*upstream, *maxConns); err != nil {
		fmt.Fprintln(os.Stderr, "target:", err)
		os.Exit(1)
	}
}

func run(upstream string, maxConns int) error {
	src, err := transport.NewHTTPSource(upstream)
	if err != nil {
		return err
	}
	defer src.Close()
	// The attack suite's relay options: a fast heartbeat, so that the
	// healthy clients' latencies are not heartbeat-bound, and the default
	// snapshot slots with a short retry window.
	r, err := relay.New(src,
		relay.WithHeartbeat(200*time.Millisecond),
		relay.WithMaxSnapshotsInFlight(relay.DefaultMaxSnapshotsInFlight, 5*time.Second))
	if err != nil {
		return err
	}
	defer r.Close()
	lc := listen.Config{Addr: "127.0.0.1:0", MaxConns: maxConns}
	ln, err := listen.Listen(lc)
	if err != nil {
		return err
	}
	srv := listen.NewServer(r.Handler(), lc)
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	defer srv.Close()
	fmt.Println("listening", ln.Addr())

	stdin := make(chan struct{})
	go func() {
		_, _ = io.Copy(io.Discard, os.Stdin) // the parent closes it, or dies
		close(stdin)
	}()
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	var ms runtime.MemStats
	for {
		select {
		case <-stdin:
			return nil
		case err := <-served:
			return err
		case <-tick.C:
			runtime.ReadMemStats(&ms)
			fmt.Println("heap", ms.HeapInuse)
		}
	}
}
