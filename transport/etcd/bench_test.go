package etcd_test

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/holdfast-dev/holdfast/config"
	"github.com/holdfast-dev/holdfast/internal/sdksuite"
	"github.com/holdfast-dev/holdfast/internal/testutil"
	"github.com/holdfast-dev/holdfast/relay"
	"github.com/holdfast-dev/holdfast/transport"
	"github.com/holdfast-dev/holdfast/transport/etcd"
)

// benchClients is 100; HOLDFAST_BENCH_CLIENTS changes it, to see how the
// servers' cost grows with the fleet.
var benchClients = func() int {
	if n, err := strconv.Atoi(os.Getenv("HOLDFAST_BENCH_CLIENTS")); err == nil && n > 0 {
		return n
	}
	return 100
}()

var discard = slog.New(slog.DiscardHandler)

// BenchmarkPropagation100Clients measures publish → OnChange in 100 SDK
// clients, each with a connection of its own, in one run:
//
//   - etcd: the clients watch the 3-member cluster directly;
//   - etcd-grpcproxy: through one `etcd grpc-proxy`, which coalesces their
//     100 watches of the namespace into one watch on the cluster;
//   - http: the reference server (examples/server, built from the root
//     module and run as a process, since internal/fakeserver cannot be
//     imported from this module), over SSE;
//   - relay-etcd: the clients of one holdfast relay (package relay), which
//     follows the cluster through the etcd source over one watch stream;
//   - relay-http: the clients of one relay following the reference server.
//
// The relay runs as a process of its own, so that its CPU is read apart:
// this test binary run again in a relay role (TestMain, relayEnv), with
// the heartbeat (1 s) of the others. Its clients speak HTTP to it as those
// of the reference server do. HOLDFAST_BENCH_RELAY_CPUPROFILE names a file
// for the relay's CPU profile over its life (the clients' opening
// included).
//
// Each op is one publish; p50-ms and p99-ms are over every client's
// callback of every op, timed from the start of the publish call.
// server-cpu-ms/op is the CPU time the servers (the three etcd members, or
// the reference server) spent per op, heartbeats included; proxy-cpu-ms/op
// that of the grpc-proxy or the relay. Set HOLDFAST_BENCH_CLIENTS to change
// the fleet; a figure worth comparing with the relay is at 1,000:
//
//	HOLDFAST_BENCH_CLIENTS=1000 go test -run '^$' -bench Propagation100Clients -benchtime 20x -timeout 30m .
func BenchmarkPropagation100Clients(b *testing.B) {
	b.Run("etcd", func(b *testing.B) {
		cl := startCluster(b)
		pub := newSource(b, cl.endpoints())
		benchEtcd(b, cl, pub, func(i int) []string {
			eps := cl.endpoints()
			return append(eps[i%3:], eps[:i%3]...)
		}, nil)
	})
	b.Run("etcd-grpcproxy", func(b *testing.B) {
		cl := startCluster(b)
		pub := newSource(b, cl.endpoints())
		proxyURL, proxyPID := startGRPCProxy(b, cl)
		benchEtcd(b, cl, pub, func(int) []string { return []string{proxyURL} }, []int{proxyPID})
	})
	b.Run("http", benchHTTP)
	b.Run("relay-etcd", func(b *testing.B) {
		cl := startCluster(b)
		pub := newSource(b, cl.endpoints())
		publish(b, pub, "bench", map[string]any{"v": 0})
		relayURL, relayPID := startRelay(b, relayEnv+"_ETCD="+strings.Join(cl.endpoints(), ","))
		var members []int
		for _, m := range cl.members {
			members = append(members, m.pid())
		}
		measure(b, httpClients(b, relayURL), members, []int{relayPID}, func(i int) {
			publish(b, pub, "bench", map[string]any{"v": i})
		})
	})
	b.Run("relay-http", func(b *testing.B) {
		base, pid, pub := startReferenceServer(b)
		relayURL, relayPID := startRelay(b, relayEnv+"_HTTP="+base)
		measure(b, httpClients(b, relayURL), []int{pid}, []int{relayPID}, pub)
		http.DefaultClient.CloseIdleConnections()
	})
}

func benchEtcd(b *testing.B, cl *cluster, pub *etcd.Source, endpoints func(int) []string, extraPIDs []int) {
	publish(b, pub, "bench", map[string]any{"v": 0})
	clients := make([]*config.Client, benchClients)
	for i := range clients {
		src := newSource(b, endpoints(i), etcd.WithHeartbeat(time.Second), etcd.WithIdleTimeout(5*time.Second), etcd.WithLogger(discard))
		clients[i] = sdksuite.NewClient(b, sdksuite.Source(src), config.WithLogger(discard))
	}
	var members []int
	for _, m := range cl.members {
		members = append(members, m.pid())
	}
	measure(b, clients, members, extraPIDs, func(i int) {
		publish(b, pub, "bench", map[string]any{"v": i})
	})
}

func benchHTTP(b *testing.B) {
	base, pid, pub := startReferenceServer(b)
	measure(b, httpClients(b, base), []int{pid}, nil, pub)
	http.DefaultClient.CloseIdleConnections()
}

// httpClients returns benchClients clients of the HTTP data plane at base,
// over SSE.
func httpClients(b *testing.B, base string) []*config.Client {
	clients := make([]*config.Client, benchClients)
	for i := range clients {
		clients[i] = sdksuite.NewDefaultClient(b, sdksuite.Endpoint(base), config.WithWatchMode(transport.WatchSSE), config.WithLogger(discard))
	}
	return clients
}

// startReferenceServer builds and runs examples/server with a 1 s
// heartbeat, and returns its URL, its pid and a publish of {"v": i} to
// namespace "bench" (which it has published once, v=0).
func startReferenceServer(b *testing.B) (string, int, func(i int)) {
	bin := filepath.Join(b.TempDir(), "server")
	build := exec.Command("go", "build", "-o", bin, "./examples/server")
	build.Dir = "../.."
	build.Env = append(os.Environ(), "GOFLAGS=-mod=readonly")
	if out, err := build.CombinedOutput(); err != nil {
		b.Fatalf("build the reference server: %v\n%s", err, out)
	}
	addr := fmt.Sprintf("127.0.0.1:%d", freePorts(b, 1)[0])
	cmd := exec.Command(bin, "-addr", addr, "-heartbeat", "1s")
	var log syncBuffer
	cmd.Stdout, cmd.Stderr = &log, &log
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	base := "http://" + addr
	pub := func(i int) {
		body := fmt.Sprintf(`{"puts":{"v":%d}}`, i)
		resp, err := http.Post(base+"/control/namespaces/bench/publish", "application/json", strings.NewReader(body))
		if err != nil {
			b.Fatal(err)
		}
		_ = resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			b.Fatalf("publish: %s", resp.Status)
		}
	}
	var err error
	if !testutil.Wait(waitLimit, func() bool {
		var resp *http.Response
		if resp, err = http.Post(base+"/control/namespaces/bench/publish", "application/json", strings.NewReader(`{"puts":{"v":0}}`)); err != nil {
			return false
		}
		_ = resp.Body.Close()
		return true
	}) {
		b.Fatalf("reference server not up: %v\n%s", err, log.String())
	}
	return base, cmd.Process.Pid, pub
}

// measure opens "bench" in every client, then publishes b.N times, each
// time waiting for all clients' callbacks, and reports the percentiles of
// publish → callback and the servers' CPU per op.
func measure(b *testing.B, clients []*config.Client, servers, proxies []int, publishOne func(i int)) {
	type receipt struct {
		v  int
		at time.Time
	}
	recv := make(chan receipt, len(clients)*4)
	for _, c := range clients {
		ns := sdksuite.Open(b, c, "bench")
		ns.OnChange("v", func(ch config.Change) {
			v, _ := strconv.Atoi(ch.New.String())
			recv <- receipt{v, time.Now()}
		})
	}
	var lat []time.Duration
	b.ReportAllocs()
	cpu0, proxy0 := cpuTime(servers), cpuTime(proxies)
	b.ResetTimer()
	for i := 1; i <= b.N; i++ {
		start := time.Now()
		publishOne(i)
		for got := 0; got < len(clients); {
			select {
			case r := <-recv:
				if r.v == i {
					lat = append(lat, r.at.Sub(start))
					got++
				}
			case <-time.After(waitLimit):
				b.Fatalf("op %d: %d of %d clients called back", i, got, len(clients))
			}
		}
	}
	b.StopTimer()
	cpu, proxyCPU := cpuTime(servers)-cpu0, cpuTime(proxies)-proxy0
	slices.Sort(lat)
	pct := func(p float64) float64 {
		return float64(lat[int(p*float64(len(lat)-1))].Microseconds()) / 1000
	}
	b.ReportMetric(pct(0.50), "p50-ms")
	b.ReportMetric(pct(0.99), "p99-ms")
	b.ReportMetric(float64(cpu.Microseconds())/1000/float64(b.N), "server-cpu-ms/op")
	if proxies != nil {
		b.ReportMetric(float64(proxyCPU.Microseconds())/1000/float64(b.N), "proxy-cpu-ms/op")
	}
}

// cpuTime adds the user and system CPU time of processes, from /proc.
func cpuTime(pids []int) time.Duration {
	var total time.Duration
	for _, pid := range pids {
		raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			continue
		}
		// Fields after the command name, which is in parentheses.
		f := strings.Fields(string(raw[bytes.LastIndexByte(raw, ')')+1:]))
		if len(f) < 13 {
			continue
		}
		ut, _ := strconv.ParseInt(f[11], 10, 64)
		st, _ := strconv.ParseInt(f[12], 10, 64)
		total += time.Duration(ut+st) * time.Second / 100 // USER_HZ
	}
	return total
}

// startGRPCProxy runs `etcd grpc-proxy start` in front of the cluster.
func startGRPCProxy(b testing.TB, cl *cluster) (url string, pid int) {
	addr := fmt.Sprintf("127.0.0.1:%d", freePorts(b, 1)[0])
	eps := make([]string, 0, len(cl.members))
	for _, m := range cl.members {
		eps = append(eps, strings.TrimPrefix(m.clientURL, "http://"))
	}
	cmd := exec.Command(cl.bin, "grpc-proxy", "start", "--endpoints", strings.Join(eps, ","),
		"--listen-addr", addr, "--data-dir", filepath.Join(b.TempDir(), "proxy"))
	var log syncBuffer
	cmd.Stdout, cmd.Stderr = &log, &log
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	var once sync.Once
	b.Cleanup(func() {
		once.Do(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
		if b.Failed() {
			b.Logf("grpc-proxy log:\n%s", log.String())
		}
	})
	src := newSource(b, []string{"http://" + addr})
	var err error
	if !testutil.Wait(waitLimit, func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		_, err = src.Client().Get(ctx, "health")
		return err == nil
	}) {
		b.Fatalf("grpc-proxy not up: %v\n%s", err, log.String())
	}
	return "http://" + addr, cmd.Process.Pid
}

// relayEnv, suffixed _ETCD (comma-separated member URLs) or _HTTP (the
// base URL of a holdfast server), runs the test binary as a relay of
// namespace "bench" instead of the tests: see relayMain.
const relayEnv = "HOLDFAST_BENCH_RELAY"

// startRelay runs this test binary in its relay role with the upstream
// env, and returns the relay's URL once it serves "bench", and its pid.
// It is stopped (stdin closed) at the benchmark's end.
func startRelay(b *testing.B, env string) (string, int) {
	b.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), env)
	var log syncBuffer
	cmd.Stderr = &log
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
	b.Cleanup(func() {
		_ = stdin.Close()
		done := make(chan struct{})
		go func() { _ = cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(waitLimit):
			_ = cmd.Process.Kill()
			<-done
		}
		if b.Failed() {
			b.Logf("relay log:\n%s", log.String())
		}
	})
	addr := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if a, ok := strings.CutPrefix(sc.Text(), "listening "); ok {
				addr <- a
			}
		}
	}()
	var base string
	select {
	case a := <-addr:
		base = "http://" + a
	case <-time.After(waitLimit):
		b.Fatalf("relay did not start:\n%s", log.String())
	}
	if !testutil.Wait(waitLimit, func() bool {
		var resp *http.Response
		if resp, err = http.Get(base + transport.PathSnapshot + "?ns=bench"); err != nil {
			return false
		}
		_ = resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	}) {
		b.Fatalf("relay does not serve bench: %v\n%s", err, log.String())
	}
	http.DefaultClient.CloseIdleConnections()
	return base, cmd.Process.Pid
}

// relayMain is the relay role: it follows the upstream of relayEnv,
// serves on a free loopback port (printed as "listening ADDR"), and stops
// when its stdin closes.
func relayMain() int {
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	var src transport.Source
	if eps := os.Getenv(relayEnv + "_ETCD"); eps != "" {
		s, err := etcd.New(etcd.WithEndpoints(strings.Split(eps, ",")...), etcd.WithHeartbeat(time.Second),
			etcd.WithIdleTimeout(5*time.Second), etcd.WithLogger(logger))
		if err != nil {
			fmt.Fprintln(os.Stderr, "relay:", err)
			return 1
		}
		defer s.Close()
		src = s
	} else {
		s, err := transport.NewHTTPSource(os.Getenv(relayEnv + "_HTTP"))
		if err != nil {
			fmt.Fprintln(os.Stderr, "relay:", err)
			return 1
		}
		defer s.Close()
		src = s
	}
	r, err := relay.New(src, relay.WithHeartbeat(time.Second), relay.WithNamespaces("bench"), relay.WithLogger(logger))
	if err != nil {
		fmt.Fprintln(os.Stderr, "relay:", err)
		return 1
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fmt.Fprintln(os.Stderr, "relay:", err)
		_ = r.Close()
		return 1
	}
	if path := os.Getenv(relayEnv + "_CPUPROFILE"); path != "" {
		f, err := os.Create(path)
		if err != nil {
			fmt.Fprintln(os.Stderr, "relay:", err)
			_ = r.Close()
			return 1
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			fmt.Fprintln(os.Stderr, "relay:", err)
			_ = r.Close()
			return 1
		}
		defer pprof.StopCPUProfile()
	}
	fmt.Println("listening", l.Addr())
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		_, _ = io.Copy(io.Discard, os.Stdin)
		cancel()
	}()
	if err := r.Serve(ctx, l); err != nil {
		fmt.Fprintln(os.Stderr, "relay:", err)
		return 1
	}
	return 0
}
