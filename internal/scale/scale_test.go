//go:build scale

// Package scale measures a fleet: thousands of config clients of one
// namespace against one reference server, directly or through one relay,
// the clients split over child processes (one process's descriptor limit
// holds fewer). It is behind the build tag scale, out of the default test
// run:
//
//	go test -tags scale -run '^$' -bench Fleet -benchtime 1x -timeout 60m ./internal/scale/
//
// runs BenchmarkFleet (10,000 clients on the origin directly) and
// BenchmarkFleetRelay (1,000 and 10,000 behind one relay) in one run;
// relay_test.go has the relay's reconnect storm and bytes on the wire.
//
// HOLDFAST_SCALE_CLIENTS (default 10000), HOLDFAST_SCALE_PROCS (2) and
// HOLDFAST_SCALE_PUBLISHES (20) change the shape; HOLDFAST_SCALE_RELAY=1
// puts BenchmarkFleet's clients behind a relay too;
// HOLDFAST_SCALE_CPUPROFILE names a file for the origin's CPU profile over
// the publishes, HOLDFAST_SCALE_RELAY_CPUPROFILE one for the relay's,
// HOLDFAST_SCALE_RELAY_HEAPPROFILE one for the relay's live heap once the
// clients are connected (with its memory classes in the log),
// HOLDFAST_SCALE_HEAPPROFILE one for the origin's heap once the clients
// are connected, HOLDFAST_SCALE_CHILD_CPUPROFILE a prefix for each client process's
// (from ready to its end; PREFIX.<pid>);
// HOLDFAST_SCALE_WITHOUT="h2c stream ack-batch" makes the origin an older
// server (the clients then fall back: HTTP/1.1, one watch per namespace,
// single acks); HOLDFAST_SCALE_RELAY_WITHOUT=ack-stream (with
// HOLDFAST_SCALE_TLS=1) has the relay not advertise its ack stream, so
// that its clients ack with a POST a batch;
// HOLDFAST_SCALE_NOACKS=1 runs the clients without acks;
// HOLDFAST_SCALE_ORIGIN_HEARTBEAT (a duration) sets the origin's heartbeat.
// The origin runs in the benchmark's own process, so its RSS and CPU are
// read from /proc/self and getrusage; the relay runs in a child process of
// its own (this test binary again, in a relay role: relay_test.go), which
// reports its own CPU (getrusage), RSS and counters when asked.
package scale

import (
	"bufio"
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/holdfast-dev/holdfast/config"
	"github.com/holdfast-dev/holdfast/internal/acks"
	"github.com/holdfast-dev/holdfast/internal/fakeserver"
	"github.com/holdfast-dev/holdfast/internal/listen"
	"github.com/holdfast-dev/holdfast/internal/testutil/certtest"
	"github.com/holdfast-dev/holdfast/transport"
)

const (
	namespace = "fleet.prod"
	key       = "seq"
	childEnv  = "HOLDFAST_SCALE_CHILD_URL"
)

func TestMain(m *testing.M) {
	if url := os.Getenv(childEnv); url != "" {
		n, _ := strconv.Atoi(os.Getenv("HOLDFAST_SCALE_CHILD_CLIENTS"))
		if err := child(url, n, os.Stdin, os.Stdout); err != nil {
			fmt.Fprintln(os.Stderr, "child:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	if addr := os.Getenv(floorEnv); addr != "" {
		n, _ := strconv.Atoi(os.Getenv("HOLDFAST_SCALE_FLOOR_CONNS"))
		if err := floorChild(addr, n, os.Stdin, os.Stdout); err != nil {
			fmt.Fprintln(os.Stderr, "floor:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	if url := os.Getenv(tlsFloorEnv); url != "" {
		n, _ := strconv.Atoi(os.Getenv("HOLDFAST_SCALE_TLSFLOOR_CONNS"))
		if err := tlsFloorChild(url, n, os.Stdin, os.Stdout); err != nil {
			fmt.Fprintln(os.Stderr, "tls floor:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	if upstream := os.Getenv(relayEnv); upstream != "" {
		if err := relayChild(upstream, os.Stdin, os.Stdout); err != nil {
			fmt.Fprintln(os.Stderr, "relay:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

func envInt(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil && v > 0 {
		return v
	}
	return def
}

// BenchmarkFleet: publish → every client's OnChange, p50 and p99 over
// every client of every publish; server RSS per connected client; server
// CPU per client per publish (acks included: measured until the acks of
// the last publish are in, minus the same span of an idle fleet). The
// server is the origin, with every client on it (behind a relay with
// HOLDFAST_SCALE_RELAY=1). Of the client processes: their CPU per
// publish (clients-cpu-ms/publish), the bytes their clients allocate per
// client per publish (clients-alloc-B/client/publish, idle span
// subtracted too) and their GCs during the publishes
// (clients-gcs-during-publishes): each slows every client of its process
// at once, so a publish it falls on is the slowest of a run.
func BenchmarkFleet(b *testing.B) {
	clients := envInt("HOLDFAST_SCALE_CLIENTS", 10000)
	procs := envInt("HOLDFAST_SCALE_PROCS", 2)
	publishes := envInt("HOLDFAST_SCALE_PUBLISHES", 20)
	relayed := os.Getenv("HOLDFAST_SCALE_RELAY") != ""
	for range b.N {
		runFleet(b, clients, procs, publishes, relayed)
	}
}

// BenchmarkFleetRelay is BenchmarkFleet with the clients behind one relay
// (a process of its own) at each size of HOLDFAST_SCALE_RELAY_CLIENTS
// (default "1000 10000"): the origin holds one watch stream (streams),
// and its CPU per publish (origin-cpu-ms/publish) should not grow with
// the clients; the relay's is relay-cpu-ms/publish. Beside BenchmarkFleet
// in one run:
//
//	go test -tags scale -run '^$' -bench Fleet -benchtime 1x -timeout 60m ./internal/scale/
func BenchmarkFleetRelay(b *testing.B) {
	procs := envInt("HOLDFAST_SCALE_PROCS", 2)
	publishes := envInt("HOLDFAST_SCALE_PUBLISHES", 20)
	sizes := strings.Fields(os.Getenv("HOLDFAST_SCALE_RELAY_CLIENTS"))
	if len(sizes) == 0 {
		sizes = []string{"1000", "10000"}
	}
	for _, size := range sizes {
		clients, err := strconv.Atoi(size)
		if err != nil || clients < 1 {
			b.Fatalf("HOLDFAST_SCALE_RELAY_CLIENTS: %q", size)
		}
		b.Run(fmt.Sprintf("clients=%d", clients), func(b *testing.B) {
			for range b.N {
				runFleet(b, clients, procs, publishes, true)
			}
		})
	}
}

type childProc struct {
	cmd   *exec.Cmd
	stdin io.WriteCloser
	lines chan string
}

// startProc runs this test binary again with env added, its stdout read
// line by line.
func startProc(b *testing.B, env ...string) *childProc {
	b.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), env...)
	cmd.Stderr = os.Stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	stdin, err := cmd.StdinPipe()
	if err != nil {
		b.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		b.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	k := &childProc{cmd: cmd, stdin: stdin, lines: make(chan string, 64)}
	go func() {
		sc := bufio.NewScanner(stdout)
		sc.Buffer(make([]byte, 1<<20), 64<<20)
		for sc.Scan() {
			k.lines <- sc.Text()
		}
		close(k.lines)
	}()
	return k
}

// stop closes the child's stdin (it then exits) and waits for it.
func (k *childProc) stop() {
	_ = k.stdin.Close()
	_ = k.cmd.Wait()
}

// startOrigin starts the reference server with namespace published once:
// seq "0:0" and filler keys k0000, k0001, ... (a 1,000-key namespace is
// filler 999).
func startOrigin(b *testing.B, filler int) *fakeserver.Server {
	b.Helper()
	opts := []fakeserver.Option{fakeserver.WithWatcherBuffer(64)}
	if d, err := time.ParseDuration(os.Getenv("HOLDFAST_SCALE_ORIGIN_HEARTBEAT")); err == nil {
		opts = append(opts, fakeserver.WithHeartbeat(d))
	}
	for _, c := range strings.Fields(os.Getenv("HOLDFAST_SCALE_WITHOUT")) {
		opts = append(opts, fakeserver.WithoutCapability(c))
	}
	srv, err := fakeserver.Start(opts...)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = srv.Close() })
	puts := map[string]any{key: "0:0"}
	for i := range filler {
		puts[fmt.Sprintf("k%04d", i)] = fmt.Sprintf("value of key %d, a setting", i)
	}
	if _, err := srv.Publish(namespace, puts); err != nil {
		b.Fatal(err)
	}
	return srv
}

// startClients starts clients config clients of namespace at url in procs
// child processes and waits until each says ready. They stop at the
// benchmark's end.
func startClients(b *testing.B, url string, clients, procs int) []*childProc {
	b.Helper()
	var kids []*childProc
	b.Cleanup(func() {
		for _, k := range kids {
			k.stop()
		}
	})
	start := time.Now()
	for i := range procs {
		n := clients / procs
		if i < clients%procs {
			n++
		}
		kids = append(kids, startProc(b, childEnv+"="+url, "HOLDFAST_SCALE_CHILD_CLIENTS="+strconv.Itoa(n)))
	}
	for _, k := range kids {
		expect(b, k, "ready", 10*time.Minute)
	}
	b.Logf("%d clients in %d processes connected in %v", clients, procs, time.Since(start).Round(time.Millisecond))
	return kids
}

// publishSeq publishes seq i (with the time, for the clients' delays) and
// waits until every child says all its clients saw it.
func publishSeq(b *testing.B, srv *fakeserver.Server, kids []*childProc, i int) time.Duration {
	b.Helper()
	return publishSeqWith(b, func(puts map[string]any) error { _, err := srv.Publish(namespace, puts); return err }, kids, i)
}

// publishSeqWith is publishSeq through publish.
func publishSeqWith(b *testing.B, publish func(puts map[string]any) error, kids []*childProc, i int) time.Duration {
	b.Helper()
	pubStart := time.Now()
	value := fmt.Sprintf("%d:%d", i, pubStart.UnixNano())
	if err := publish(map[string]any{key: value}); err != nil {
		b.Fatal(err)
	}
	want := "done " + strconv.Itoa(i)
	for _, k := range kids {
		select {
		case line, ok := <-k.lines:
			if !ok || line != want {
				b.Fatalf("child said %q (open: %v), want %q", line, ok, want)
			}
		case <-time.After(time.Minute):
			logStatus(b, kids)
			b.Fatalf("publish %d: a child's clients not all there after a minute", i)
		}
	}
	return time.Since(pubStart)
}

// logStatus logs what each child's clients have: how many at each seq and
// state, and their last errors.
func logStatus(b *testing.B, kids []*childProc) {
	b.Helper()
	for i, k := range kids {
		fmt.Fprintln(k.stdin, "status")
		select {
		case line := <-k.lines:
			b.Logf("child %d: %s", i, line)
		case <-time.After(time.Minute):
			b.Logf("child %d: no status", i)
		}
	}
}

// delaysByPublish is every client's delay of each publish, in publish
// order (each child reports one line per publish, in order).
func delaysByPublish(b *testing.B, kids []*childProc) [][]time.Duration {
	b.Helper()
	var out [][]time.Duration
	for _, k := range kids {
		fmt.Fprintln(k.stdin, "report")
		for i := 0; ; i++ {
			line := next(b, k, time.Minute)
			if line == "end" {
				break
			}
			if i == len(out) {
				out = append(out, nil)
			}
			for _, f := range strings.Fields(line) {
				us, err := strconv.ParseInt(f, 10, 64)
				if err != nil {
					b.Fatalf("child report %q: %v", line, err)
				}
				out[i] = append(out[i], time.Duration(us)*time.Microsecond)
			}
		}
	}
	return out
}

func runFleet(b *testing.B, clients, procs, publishes int, relayed bool) {
	if relayed && setupTLS(b) {
		b.Log("the relay serves TLS")
	}
	srv := startOrigin(b, 0)
	rssBase := rss(b)
	url := srv.URL()
	var rl *relayProc
	var relayBase relayReport
	if relayed {
		rl = startRelay(b, srv.URL(), "127.0.0.1:0", "")
		url = rl.url
		relayBase = rl.report(b, true)
	}

	kids := startClients(b, url, clients, procs)
	rssConnected := rss(b)
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	b.Logf("origin with %d clients: per client %.1f KiB heap in use, %.1f KiB of stacks, %.2f goroutines",
		clients, float64(ms.HeapInuse)/float64(clients)/1024, float64(ms.StackInuse)/float64(clients)/1024,
		float64(runtime.NumGoroutine())/float64(clients))
	if path := os.Getenv("HOLDFAST_SCALE_HEAPPROFILE"); path != "" {
		f, err := os.Create(path)
		if err != nil {
			b.Fatal(err)
		}
		if err := pprof.Lookup("heap").WriteTo(f, 0); err != nil {
			b.Fatal(err)
		}
		f.Close()
	}
	streams := srv.OpenStreams()
	var relayConnected relayReport
	if rl != nil {
		relayConnected = rl.report(b, true)
		if path := os.Getenv("HOLDFAST_SCALE_RELAY_HEAPPROFILE"); path != "" {
			fmt.Fprintln(rl.stdin, "heap "+path)
			b.Logf("relay with %d clients: %s", clients, next(b, rl.childProc, time.Minute))
		}
	}

	// An idle span first, as long as the publishes will take, for the
	// heartbeats' CPU; then the publishes.
	settle := acks.AckDelayPlainMax + time.Second
	var spans []time.Duration
	if path := os.Getenv("HOLDFAST_SCALE_CPUPROFILE"); path != "" {
		f, err := os.Create(path)
		if err != nil {
			b.Fatal(err)
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			b.Fatal(err)
		}
		defer func() { pprof.StopCPUProfile(); f.Close() }()
	}
	if path := os.Getenv("HOLDFAST_SCALE_RELAY_CPUPROFILE"); path != "" && rl != nil {
		rl.profile(b, path)
	}
	origin0 := srv.Stats()
	conns0 := origin0.Conns
	kidsAlloc0, kidsGC0 := kidsMem(b, kids)
	kids0 := kidsCPU(kids)
	cpu0 := cpuTime(b)
	var relay0 relayReport
	if rl != nil {
		relay0 = rl.report(b, false)
	}
	t0 := time.Now()
	for i := 1; i <= publishes; i++ {
		spans = append(spans, publishSeq(b, srv, kids, i))
		time.Sleep(acks.AckDelayPlainMax + 500*time.Millisecond) // let the acks of this publish land before the next
	}
	time.Sleep(settle)
	busy := time.Since(t0)
	cpuPublish := cpuTime(b) - cpu0
	kidsPublish := kidsCPU(kids) - kids0
	kidsAlloc1, kidsGC1 := kidsMem(b, kids)
	origin1 := srv.Stats()
	newConns := origin1.Conns - conns0
	var relay1 relayReport
	if rl != nil {
		relay1 = rl.report(b, false)
		if os.Getenv("HOLDFAST_SCALE_RELAY_CPUPROFILE") != "" {
			rl.profileStop(b)
		}
	}
	// The same span with nothing published: heartbeats and idle streams.
	cpu1, kids1 := cpuTime(b), kidsCPU(kids)
	time.Sleep(busy)
	cpuIdle, kidsIdle := cpuTime(b)-cpu1, kidsCPU(kids)-kids1
	kidsAlloc2, _ := kidsMem(b, kids)
	var relay2 relayReport
	if rl != nil {
		relay2 = rl.report(b, false)
	}

	byPublish := delaysByPublish(b, kids)
	var all, later []time.Duration // later: every publish but the first
	for i, ds := range byPublish {
		all = append(all, ds...)
		if i > 0 {
			later = append(later, ds...)
		}
	}
	slices.Sort(all)
	slices.Sort(later)
	logErrors(b, kids)
	if len(all) != clients*publishes {
		b.Fatalf("%d delays, want %d", len(all), clients*publishes)
	}
	if len(later) > 0 {
		// The first publish after the fleet connected is the slowest by
		// far: this is the p99 without it.
		b.ReportMetric(float64(later[len(later)*99/100].Milliseconds()), "p99-ms-after-first")
	}
	perClientCPU := (cpuPublish - cpuIdle) / time.Duration(clients*publishes)
	b.ReportMetric(float64(all[len(all)/2].Milliseconds()), "p50-ms")
	b.ReportMetric(float64(all[len(all)*99/100].Milliseconds()), "p99-ms")
	b.ReportMetric(float64(all[len(all)-1].Milliseconds()), "max-ms")
	b.ReportMetric(float64(rssConnected-rssBase)/float64(clients)/1024, "server-KiB/client")
	b.ReportMetric(float64(perClientCPU.Nanoseconds())/1000, "server-cpu-µs/client/publish")
	b.ReportMetric(float64((cpuPublish-cpuIdle).Microseconds())/1000/float64(publishes), "origin-cpu-ms/publish")
	b.ReportMetric(float64((kidsPublish-kidsIdle).Microseconds())/1000/float64(publishes), "clients-cpu-ms/publish")
	// The clients' allocations drive their processes' GC, which slows
	// every client of a process at once (5,000 of them at the default
	// size): the publishes' bytes less the same idle span's.
	b.ReportMetric((float64(kidsAlloc1-kidsAlloc0)-float64(kidsAlloc2-kidsAlloc1))/float64(clients*publishes), "clients-alloc-B/client/publish")
	b.ReportMetric(float64(kidsGC1-kidsGC0), "clients-gcs-during-publishes")
	b.ReportMetric(float64(streams), "streams")
	b.ReportMetric(float64(newConns), "conns-during-publishes")
	b.ReportMetric(float64(origin1.Streams-origin0.Streams), "streams-during-publishes")
	if st, err := srv.Status(namespace); err == nil {
		b.ReportMetric(float64(st.Acked), "origin-acked")
		if os.Getenv("HOLDFAST_SCALE_NOACKS") == "" && st.Acked < clients {
			// Whose ack is missing: by how many revisions, and when the
			// origin last heard from them.
			lags := map[string]int{}
			for _, c := range srv.Clients() {
				if c.Namespace == namespace && c.AckedRevision < st.Revision {
					lags[fmt.Sprintf("lag %d, last heard %v before the end", st.Revision-c.AckedRevision,
						time.Since(c.UpdatedAt).Round(time.Second))]++
				}
			}
			b.Logf("origin: %d of %d clients acked revision %d (%d reported); the others: %v", st.Acked, clients, st.Revision, st.Clients, lags)
		}
	}
	b.Logf("origin requests during the publishes: snapshots %d (304: %d), streams %d, watches %d, long-polls %d, acks %d, conns %d",
		origin1.Snapshots-origin0.Snapshots, origin1.NotModified-origin0.NotModified, origin1.Streams-origin0.Streams,
		origin1.Watches-origin0.Watches, origin1.Events-origin0.Events+origin1.StreamPolls-origin0.StreamPolls,
		origin1.Acks-origin0.Acks, newConns)
	b.Logf("origin RSS %d MiB idle, %d MiB with %d clients; CPU %v over %d publishes, %v idle over the same %v; publish spans %v",
		rssBase>>20, rssConnected>>20, clients, cpuPublish, publishes, cpuIdle, busy.Round(time.Millisecond), spans)
	if rl == nil {
		return
	}
	relayPublish, relayIdle := relay1.CPU-relay0.CPU, relay2.CPU-relay1.CPU
	b.ReportMetric(float64((relayPublish-relayIdle).Microseconds())/1000/float64(publishes), "relay-cpu-ms/publish")
	b.ReportMetric(float64((relayPublish-relayIdle).Nanoseconds())/1000/float64(clients*publishes), "relay-cpu-µs/client/publish")
	b.ReportMetric(float64(relayConnected.RSS-relayBase.RSS)/float64(clients)/1024, "relay-KiB/client")
	b.ReportMetric(float64(relay1.GCs-relay0.GCs)/float64(publishes), "relay-gc/publish")
	b.ReportMetric(float64(relay1.Alloc-relay0.Alloc)/float64(clients*publishes), "relay-alloc-B/client/publish")
	b.ReportMetric(float64(relayConnected.Stats.OpenStreams), "relay-streams")
	b.ReportMetric(float64(relay1.Stats.Conns-relay0.Stats.Conns), "relay-conns-during-publishes")
	b.ReportMetric(float64(relay1.Stats.Streams-relay0.Stats.Streams), "relay-streams-during-publishes")
	b.Logf("relay requests during the publishes: %+v; connections opened: %d h2c, %d HTTP/1.1 (%d and %d before)",
		statsDelta(relay0.Stats, relay1.Stats), relay1.H2C-relay0.H2C, relay1.H1-relay0.H1, relay0.H2C, relay0.H1)
	outPublish, outIdle := relay1.Out-relay0.Out, relay2.Out-relay1.Out
	b.ReportMetric(float64(outPublish-outIdle)/float64(clients*publishes), "relay-out-B/client/publish")
	b.Logf("relay RSS %d MiB idle, %d MiB with %d clients (peak %d MiB); CPU %v over the publishes, %v idle over the same span; %d bytes out over the publishes, %d idle",
		relayBase.RSS>>20, relayConnected.RSS>>20, clients, relay2.HWM>>20, relayPublish, relayIdle, outPublish, outIdle)
}

func expect(b *testing.B, k *childProc, want string, limit time.Duration) {
	b.Helper()
	if got := next(b, k, limit); got != want {
		b.Fatalf("child said %q, want %q", got, want)
	}
}

func next(b *testing.B, k *childProc, limit time.Duration) string {
	b.Helper()
	select {
	case line, ok := <-k.lines:
		if !ok {
			b.Fatal("child exited")
		}
		return line
	case <-time.After(limit):
		b.Fatalf("child silent for %v", limit)
	}
	return ""
}

// memLine is a client process's answer to "mem": the bytes it allocated
// and the GC cycles it ran so far.
func memLine() string {
	m := []metrics.Sample{{Name: "/gc/heap/allocs:bytes"}, {Name: "/gc/cycles/total:gc-cycles"}}
	metrics.Read(m)
	return fmt.Sprintf("mem %d %d", m[0].Value.Uint64(), m[1].Value.Uint64())
}

// kidsMem asks every client process for its memLine: the bytes its
// clients allocated and the GCs it ran, summed over the processes.
func kidsMem(b *testing.B, kids []*childProc) (alloc, gcs uint64) {
	b.Helper()
	for _, k := range kids {
		if _, err := io.WriteString(k.stdin, "mem\n"); err != nil {
			b.Fatal(err)
		}
		var a, g uint64
		if line := next(b, k, time.Minute); !scanMem(line, &a, &g) {
			b.Fatalf("child said %q, want mem", line)
		}
		alloc, gcs = alloc+a, gcs+g
	}
	return alloc, gcs
}

func scanMem(line string, alloc, gcs *uint64) bool {
	_, err := fmt.Sscanf(line, "mem %d %d", alloc, gcs)
	return err == nil
}

// kidsCPU is the CPU time of the client processes, from /proc/<pid>/stat
// (10 ms ticks: enough for seconds).
func kidsCPU(kids []*childProc) time.Duration {
	var total time.Duration
	for _, k := range kids {
		data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", k.cmd.Process.Pid))
		if err != nil {
			continue
		}
		f := strings.Fields(string(data[strings.LastIndexByte(string(data), ')')+2:]))
		utime, _ := strconv.ParseInt(f[11], 10, 64)
		stime, _ := strconv.ParseInt(f[12], 10, 64)
		total += time.Duration(utime+stime) * time.Second / 100 // USER_HZ
	}
	return total
}

// rss is the process's resident set after a GC, in bytes.
func rss(b *testing.B) int64 {
	runtime.GC()
	debug.FreeOSMemory()
	data, err := os.ReadFile("/proc/self/status")
	if err != nil {
		b.Fatal(err)
	}
	for _, line := range strings.Split(string(data), "\n") {
		if rest, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			return kb << 10
		}
	}
	b.Fatal("no VmRSS")
	return 0
}

// cpuTime is the process's user+system CPU time (getrusage: exact, where
// /proc/self/stat counts 10 ms ticks).
func cpuTime(b *testing.B) time.Duration {
	d, err := selfCPU()
	if err != nil {
		b.Fatal(err)
	}
	return d
}

func selfCPU() (time.Duration, error) {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0, err
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()), nil
}

// noAcks is the HTTP source without its Acker: the fleet without acks,
// to tell their cost from the fan-out's (HOLDFAST_SCALE_NOACKS=1).
type noAcks struct{ src *transport.HTTPSource }

func (s noAcks) Snapshot(ctx context.Context, req transport.SnapshotRequest) (*transport.Snapshot, error) {
	return s.src.Snapshot(ctx, req)
}

func (s noAcks) Watch(ctx context.Context, req transport.WatchRequest, handle func(transport.Event) error) error {
	return s.src.Watch(ctx, req, handle)
}

func (s noAcks) WatchStream(ctx context.Context, req transport.StreamRequest, handle func(transport.StreamEvent) error) error {
	return s.src.WatchStream(ctx, req, handle)
}

// child opens n clients of namespace, says "ready", then "done <seq>"
// once all n saw publish seq, and on "report" prints every delay in µs,
// one line per publish, then "end".
func child(url string, n int, in io.Reader, out io.Writer) error {
	var mu sync.Mutex
	delays := map[int][]int64{}
	counts := map[int]*atomic.Int64{}
	w := bufio.NewWriter(out)
	say := func(s string) {
		mu.Lock()
		defer mu.Unlock()
		fmt.Fprintln(w, s)
		w.Flush()
	}
	record := func(ch config.Change) {
		s, _ := ch.New.Str()
		seqText, nanos, ok := strings.Cut(s, ":")
		seq, _ := strconv.Atoi(seqText)
		t, _ := strconv.ParseInt(nanos, 10, 64)
		if !ok || seq == 0 {
			return
		}
		d := time.Since(time.Unix(0, t)).Microseconds()
		mu.Lock()
		delays[seq] = append(delays[seq], d)
		c := counts[seq]
		if c == nil {
			c = new(atomic.Int64)
			counts[seq] = c
		}
		mu.Unlock()
		if c.Add(1) == int64(n) {
			say("done " + strconv.Itoa(seq))
		}
	}

	var clients []*config.Client
	var nss []*config.Namespace // under mu
	defer func() {
		for _, c := range clients {
			_ = c.Close()
		}
	}()
	var wg sync.WaitGroup
	var failed atomic.Value
	sem := make(chan struct{}, 100) // opens in flight
	var tlsConf *tls.Config
	if ca := os.Getenv(tlsCAEnv); ca != "" {
		pool, err := listen.LoadCertPool(ca)
		if err != nil {
			return err
		}
		tlsConf = &tls.Config{RootCAs: pool}
	}
	// HOLDFAST_SCALE_CHILD_NACK="PCT:SEED": each client, drawn with SEED,
	// rejects (nacks) any seq other than the base "0:…" with probability
	// PCT% (a schema the change breaks).
	var nackPct float64
	var nackRand *rand.Rand
	if v := os.Getenv("HOLDFAST_SCALE_CHILD_NACK"); v != "" {
		pct, seed, _ := strings.Cut(v, ":")
		nackPct, _ = strconv.ParseFloat(pct, 64)
		sd, _ := strconv.ParseUint(seed, 10, 64)
		nackRand = rand.New(rand.NewPCG(sd, uint64(os.Getpid())))
	}
	rejectChange := []byte(`{"type":"object","properties":{"` + key + `":{"type":"string","pattern":"^0:"}}}`)
	var everServed atomic.Int64 // clients that ever saw a seq other than 0
	for range n {
		var nsOpts []config.NamespaceOption
		if nackRand != nil && nackRand.Float64()*100 < nackPct {
			nsOpts = append(nsOpts, config.Schema(rejectChange))
		}
		opts := []config.Option{config.WithEndpoint(url)}
		if tlsConf != nil {
			// Each client its own session cache, as each process of a
			// fleet has: a reconnect resumes its session.
			conf := tlsConf.Clone()
			conf.ClientSessionCache = tls.NewLRUClientSessionCache(1)
			opts = append(opts, config.WithTLSConfig(conf))
		}
		if os.Getenv("HOLDFAST_SCALE_NOACKS") != "" {
			src, err := transport.NewHTTPSource(url)
			if err != nil {
				return err
			}
			opts = []config.Option{config.WithSource(noAcks{src})}
		}
		c, err := config.New(opts...)
		if err != nil {
			return err
		}
		clients = append(clients, c)
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
			defer cancel()
			ns, err := c.Namespace(ctx, namespace, nsOpts...)
			if err != nil {
				failed.Store(err)
				return
			}
			var served atomic.Bool
			ns.OnChange(key, func(ch config.Change) {
				if s, _ := ch.New.Str(); !strings.HasPrefix(s, "0:") && served.CompareAndSwap(false, true) {
					everServed.Add(1)
				}
				record(ch)
			})
			mu.Lock()
			nss = append(nss, ns)
			mu.Unlock()
		}()
	}
	wg.Wait()
	if err, _ := failed.Load().(error); err != nil {
		return err
	}
	// The garbage of opening n clients is collected now, as testing.B
	// collects before a benchmark: otherwise the collection it brings due
	// falls on the first publishes, whose every client it slows at once.
	// Collections due to the publishes themselves still fall where they
	// fall (clients-gcs-during-publishes counts them).
	runtime.GC()
	say("ready")
	if path := os.Getenv("HOLDFAST_SCALE_CHILD_CPUPROFILE"); path != "" {
		f, err := os.Create(fmt.Sprintf("%s.%d", path, os.Getpid()))
		if err != nil {
			return err
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			return err
		}
		// And what it allocates meanwhile (go tool pprof -base
		// F.allocs-base F.allocs).
		if err := writeAllocs(f.Name() + ".allocs-base"); err != nil {
			return err
		}
		defer func() {
			pprof.StopCPUProfile()
			f.Close()
			_ = writeAllocs(f.Name() + ".allocs")
		}()
	}

	sc := bufio.NewScanner(in)
	for sc.Scan() {
		switch sc.Text() {
		case "errors":
			mu.Lock()
			all := slices.Clone(nss)
			mu.Unlock()
			say(lastErrors(all))
			continue
		case "status":
			mu.Lock()
			all := slices.Clone(nss)
			mu.Unlock()
			say(statusCounts(all))
			continue
		case "mem":
			say(memLine())
			continue
		case "serving":
			// How many clients serve the base seq now, how many another,
			// how many ever served another.
			mu.Lock()
			all := slices.Clone(nss)
			mu.Unlock()
			base := 0
			for _, ns := range all {
				if strings.HasPrefix(ns.String(key, ""), "0:") {
					base++
				}
			}
			say(fmt.Sprintf("serving %d %d %d", base, len(all)-base, everServed.Load()))
			continue
		}
		if sc.Text() != "report" {
			continue
		}
		mu.Lock()
		seqs := make([]int, 0, len(delays))
		for s := range delays {
			seqs = append(seqs, s)
		}
		slices.Sort(seqs)
		for _, s := range seqs {
			parts := make([]string, len(delays[s]))
			for i, d := range delays[s] {
				parts[i] = strconv.FormatInt(d, 10)
			}
			fmt.Fprintln(w, strings.Join(parts, " "))
		}
		fmt.Fprintln(w, "end")
		w.Flush()
		mu.Unlock()
	}
	return nil
}

// lastErrors counts the clients' last errors by kind and message (what
// made them reconnect, if they did), on one line.
func lastErrors(nss []*config.Namespace) string {
	counts := map[string]int{}
	for _, ns := range nss {
		e := ns.Status().LastError
		if e.Message == "" {
			continue
		}
		msg := e.Message
		if len(msg) > 120 {
			msg = msg[:120]
		}
		counts[fmt.Sprintf("%v: %s", e.Kind, msg)]++
	}
	var out []string
	for m, n := range counts {
		out = append(out, fmt.Sprintf("%d× %s", n, m))
	}
	slices.Sort(out)
	return "errors " + strings.Join(out, " | ")
}

// statusCounts counts the clients by the seq they hold and their state,
// with their last errors, on one line.
func statusCounts(nss []*config.Namespace) string {
	counts := map[string]int{}
	for _, ns := range nss {
		v, _ := ns.Get(key)
		s, _ := v.Str()
		seq, _, _ := strings.Cut(s, ":")
		st := ns.Status()
		counts[fmt.Sprintf("seq %s %v rev %d", seq, st.State, st.Revision)]++
	}
	var out []string
	for m, n := range counts {
		out = append(out, fmt.Sprintf("%d× %s", n, m))
	}
	slices.Sort(out)
	return "status " + strings.Join(out, ", ") + "; " + lastErrors(nss)
}

// logErrors logs each child's count of its clients' last errors.
func logErrors(b *testing.B, kids []*childProc) {
	b.Helper()
	for i, k := range kids {
		fmt.Fprintln(k.stdin, "errors")
		b.Logf("clients of child %d, last errors: %s", i, strings.TrimPrefix(next(b, k, time.Minute), "errors "))
	}
}

// With HOLDFAST_SCALE_TLS=1 the relays of these benchmarks serve TLS
// (internal/listen's, as holdfast relay -tls-cert does) and their clients
// trust a CA made for the run: the environment below carries the files
// to the child processes.
const (
	tlsCAEnv   = "HOLDFAST_SCALE_TLS_CA"
	tlsCertEnv = "HOLDFAST_SCALE_TLS_CERT"
	tlsKeyEnv  = "HOLDFAST_SCALE_TLS_KEY"
)

// setupTLS makes the run's CA and the relay's certificate (ECDSA P-256)
// when HOLDFAST_SCALE_TLS is set, and reports whether it did.
func setupTLS(b *testing.B) bool {
	if os.Getenv("HOLDFAST_SCALE_TLS") == "" {
		return false
	}
	ca := certtest.NewCA(b, "holdfast scale CA")
	pair := ca.Server(b, "relay")
	b.Setenv(tlsCAEnv, ca.File)
	b.Setenv(tlsCertEnv, pair.CertFile)
	b.Setenv(tlsKeyEnv, pair.KeyFile)
	return true
}
