//go:build scale

package scale

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/holdfast-dev/holdfast/cache"
	"github.com/holdfast-dev/holdfast/internal/acks"
	"github.com/holdfast-dev/holdfast/internal/listen"
	"github.com/holdfast-dev/holdfast/internal/testutil"
	"github.com/holdfast-dev/holdfast/relay"
	"github.com/holdfast-dev/holdfast/transport"
)

// relayEnv runs the test binary as a relay following the URL it holds
// (relayChild), listening on HOLDFAST_SCALE_RELAY_ADDR (default a free
// loopback port), with its last goods in HOLDFAST_SCALE_RELAY_CACHE if set.
const relayEnv = "HOLDFAST_SCALE_RELAY_UPSTREAM"

// BenchmarkRelayStorm restarts the relay under a fleet: HOLDFAST_SCALE_CLIENTS
// (default 10000) clients in HOLDFAST_SCALE_PROCS (2) processes behind one
// relay, one namespace of HOLDFAST_SCALE_KEYS (1000) keys. Once every
// client is at seq 1 and the relay's last-good file holds it, the relay
// process is killed (SIGKILL), seq 2 is published at the origin, and the
// relay is started again on the same port with the same cache directory,
// at once or after HOLDFAST_SCALE_OUTAGE (a duration, default 0: a crash
// and an immediate restart by its supervisor).
//
//	go test -tags scale -run '^$' -bench RelayStorm -benchtime 1x -timeout 30m ./internal/scale/
//
// current-s is the time from the new relay listening until every client
// has seq 2 (target: 30 s), reconnected-s until it holds a stream of every
// client again, outage-s from the kill to the new relay listening; p50-ms
// and p99-ms are publish → OnChange of seq 2, the outage included. What
// the new relay served meanwhile: snapshots-200 (whole snapshots),
// snapshots-304, snapshots-503 (shed by its admission bound), streams
// (watch streams opened, each from the client's cursor) and conns;
// peak-relay-MiB is the new relay's peak RSS (VmHWM), steady-relay-MiB the
// old one's RSS with every client connected. relay-cpu-s and clients-cpu-s
// are the CPU the new relay and the client processes took until every
// client was current, cpu-floor-s their sum over the machine's cores: the
// clients share the relay's cores here, so no relay makes the storm
// shorter than that. HOLDFAST_SCALE_RELAY_CPUPROFILE
// names a file for the new relay's CPU profile, until every client is
// current.
func BenchmarkRelayStorm(b *testing.B) {
	clients := envInt("HOLDFAST_SCALE_CLIENTS", 10000)
	procs := envInt("HOLDFAST_SCALE_PROCS", 2)
	keys := envInt("HOLDFAST_SCALE_KEYS", 1000)
	var outage time.Duration
	if v := os.Getenv("HOLDFAST_SCALE_OUTAGE"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil {
			b.Fatalf("HOLDFAST_SCALE_OUTAGE: %v", err)
		}
		outage = d
	}
	for range b.N {
		runStorm(b, clients, procs, keys, outage)
	}
}

func runStorm(b *testing.B, clients, procs, keys int, outage time.Duration) {
	if setupTLS(b) {
		b.Log("the relay serves TLS")
	}
	srv := startOrigin(b, keys-1)
	dir := b.TempDir()
	rl := startRelay(b, srv.URL(), "127.0.0.1:0", dir)
	kids := startClients(b, rl.url, clients, procs)
	publishSeq(b, srv, kids, 1)
	head := srv.Head()
	testutil.Eventually(b, time.Minute, func() bool {
		data, err := os.ReadFile(filepath.Join(dir, namespace+".hfc"))
		if err != nil {
			return false
		}
		rec, err := cache.Decode(data)
		return err == nil && rec.Revision == head
	}, "the relay's last-good file at seq 1")
	steady := rl.report(b, true)

	rl.kill()
	killed := time.Now()
	value := fmt.Sprintf("2:%d", time.Now().UnixNano())
	if _, err := srv.Publish(namespace, map[string]any{key: value}); err != nil {
		b.Fatal(err)
	}
	time.Sleep(outage) // the relay stays down this long: the clients back off meanwhile
	kidsAtRestart := kidsCPU(kids)
	rl = startRelay(b, srv.URL(), rl.addr, dir)
	up := time.Now()
	if path := os.Getenv("HOLDFAST_SCALE_RELAY_CPUPROFILE"); path != "" {
		rl.profile(b, path) // the new relay's, until every client is current
	}

	// Every child's "done 2", and the relay's open streams meanwhile.
	var reconnected time.Duration
	pending := slices.Clone(kids)
	deadline := time.Now().Add(5 * time.Minute)
	poll := time.NewTicker(100 * time.Millisecond)
	defer poll.Stop()
	for len(pending) > 0 {
		select {
		case <-poll.C:
		case <-time.After(time.Until(deadline)):
			b.Fatalf("%d of %d client processes not current after %v", len(pending), len(kids), time.Since(up))
		}
		for i := 0; i < len(pending); i++ {
			select {
			case line, ok := <-pending[i].lines:
				switch {
				case !ok:
					b.Fatal("child exited")
				case line != "done 2":
					b.Fatalf("child said %q, want %q", line, "done 2")
				}
				pending = slices.Delete(pending, i, i+1)
				i--
			default:
			}
		}
		if reconnected == 0 && rl.report(b, false).Stats.OpenStreams >= clients {
			reconnected = time.Since(up)
		}
	}
	current := time.Since(up)
	// The CPU the storm took, the new relay's and its clients', which
	// share this machine's cores: spread over all of them it is the
	// shortest the storm could be here (cpu-floor-s).
	relayCPU, kidsStormCPU := rl.report(b, false).CPU, kidsCPU(kids)-kidsAtRestart
	if os.Getenv("HOLDFAST_SCALE_RELAY_CPUPROFILE") != "" {
		rl.profileStop(b)
	}
	if reconnected == 0 && testutil.Wait(time.Until(up.Add(5*time.Minute)), func() bool { return rl.report(b, false).Stats.OpenStreams >= clients }) {
		reconnected = time.Since(up)
	}
	time.Sleep(2 * time.Second) // stragglers' requests, for the counts
	after := rl.report(b, false)

	seq2 := stormDelays(b, kids)
	b.ReportMetric(current.Seconds(), "current-s")
	b.ReportMetric(reconnected.Seconds(), "reconnected-s")
	b.ReportMetric(up.Sub(killed).Seconds(), "outage-s")
	b.ReportMetric(float64(seq2[len(seq2)/2].Milliseconds()), "p50-ms")
	b.ReportMetric(float64(seq2[len(seq2)*99/100].Milliseconds()), "p99-ms")
	s := after.Stats
	b.ReportMetric(float64(s.Snapshots-s.NotModified-s.Shed), "snapshots-200")
	b.ReportMetric(float64(s.NotModified), "snapshots-304")
	b.ReportMetric(float64(s.Shed), "snapshots-503")
	b.ReportMetric(float64(s.Streams), "streams")
	b.ReportMetric(float64(s.Conns), "conns")
	b.ReportMetric(relayCPU.Seconds(), "relay-cpu-s")
	b.ReportMetric(kidsStormCPU.Seconds(), "clients-cpu-s")
	b.ReportMetric((relayCPU+kidsStormCPU).Seconds()/float64(runtime.NumCPU()), "cpu-floor-s")
	b.ReportMetric(float64(after.HWM)/(1<<20), "peak-relay-MiB")
	b.ReportMetric(float64(steady.RSS)/(1<<20), "steady-relay-MiB")
	b.Logf("storm: outage %v, every client current %v after the relay listened again, all %d streams back after %v; new relay served %+v; peak RSS %d MiB (the old one: %d MiB steady, peak %d MiB)",
		up.Sub(killed).Round(time.Millisecond), current.Round(time.Millisecond), clients, reconnected.Round(time.Millisecond),
		s, after.HWM>>20, steady.RSS>>20, steady.HWM>>20)
}

// stormDelays asks the children for their delays and keeps those of seq
// 2 (the report's second line: one line per seq, in order).
func stormDelays(b *testing.B, kids []*childProc) []time.Duration {
	b.Helper()
	var out []time.Duration
	for _, k := range kids {
		fmt.Fprintln(k.stdin, "report")
		for n := 0; ; n++ {
			line := next(b, k, time.Minute)
			if line == "end" {
				break
			}
			if n != 1 {
				continue
			}
			for _, f := range strings.Fields(line) {
				us, err := strconv.ParseInt(f, 10, 64)
				if err != nil {
					b.Fatalf("child report %q: %v", line, err)
				}
				out = append(out, time.Duration(us)*time.Microsecond)
			}
		}
	}
	if len(out) == 0 {
		b.Fatal("no delay of seq 2")
	}
	slices.Sort(out)
	return out
}

// BenchmarkRelayWire counts the bytes a one-key change costs on the wire
// to each client behind a relay, against a whole snapshot of the
// namespace: HOLDFAST_SCALE_CLIENTS (10000) clients, one namespace of
// HOLDFAST_SCALE_KEYS (1000) keys, HOLDFAST_SCALE_PUBLISHES (20)
// publishes of one key.
//
//	go test -tags scale -run '^$' -bench RelayWire -benchtime 1x -timeout 30m ./internal/scale/
//
// Bytes are counted at the relay's listener (a net.Listener wrapper that
// counts what its connections read and write: HTTP/1.1 and HTTP/2 frames,
// not TCP/IP headers), over the publishes minus the same span idle (the
// heartbeats): change-out-B/client/publish is what the relay sent each
// client per change, change-in-B/client/publish what it read from it (the
// acks). snapshot-gzip-B and snapshot-identity-B are one GET /sdk/snapshot
// reply of the namespace from the relay, headers included (gzip is what
// the SDK asks for), counted at the requester's connection;
// join-out-B/client is what the relay sent each client to open (snapshot,
// stream and the rest).
func BenchmarkRelayWire(b *testing.B) {
	clients := envInt("HOLDFAST_SCALE_CLIENTS", 10000)
	procs := envInt("HOLDFAST_SCALE_PROCS", 2)
	keys := envInt("HOLDFAST_SCALE_KEYS", 1000)
	publishes := envInt("HOLDFAST_SCALE_PUBLISHES", 20)
	for range b.N {
		runWire(b, clients, procs, keys, publishes)
	}
}

func runWire(b *testing.B, clients, procs, keys, publishes int) {
	srv := startOrigin(b, keys-1)
	rl := startRelay(b, srv.URL(), "127.0.0.1:0", "")
	gz, identity := snapshotBytes(b, rl.url, true), snapshotBytes(b, rl.url, false)
	join0 := rl.report(b, false)
	kids := startClients(b, rl.url, clients, procs)
	join1 := rl.report(b, false)
	time.Sleep(3 * time.Second) // quiet: the clients' ack streams of the opening close after 2 s

	r0 := rl.report(b, false)
	t0 := time.Now()
	for i := 1; i <= publishes; i++ {
		publishSeq(b, srv, kids, i)
		time.Sleep(acks.AckDelayPlainMax + 500*time.Millisecond) // the acks of this publish
	}
	time.Sleep(3 * time.Second) // the last acks, and their streams' close
	busy := time.Since(t0)
	r1 := rl.report(b, false)
	time.Sleep(busy)
	r2 := rl.report(b, false)

	n := float64(clients * publishes)
	out := float64((r1.Out-r0.Out)-(r2.Out-r1.Out)) / n
	in := float64((r1.In-r0.In)-(r2.In-r1.In)) / n
	b.ReportMetric(out, "change-out-B/client/publish")
	b.ReportMetric(in, "change-in-B/client/publish")
	b.ReportMetric(float64(gz), "snapshot-gzip-B")
	b.ReportMetric(float64(identity), "snapshot-identity-B")
	b.ReportMetric(float64(join1.Out-join0.Out)/float64(clients), "join-out-B/client")
	b.ReportMetric(float64(gz)/out, "snapshot-gzip/change")
	b.Logf("relay bytes: %d out, %d in over %d publishes to %d clients (%v); %d out, %d in over the same span idle; snapshot %d B gzip, %d B identity",
		r1.Out-r0.Out, r1.In-r0.In, publishes, clients, busy.Round(time.Millisecond), r2.Out-r1.Out, r2.In-r1.In, gz, identity)
}

// snapshotBytes is the size of one GET /sdk/snapshot reply of namespace
// from base, headers included, as its connection reads it.
func snapshotBytes(b *testing.B, base string, gzip bool) int64 {
	b.Helper()
	var read atomic.Int64
	tr := &http.Transport{
		DisableCompression: true,
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			c, err := (&net.Dialer{}).DialContext(ctx, network, addr)
			if err != nil {
				return nil, err
			}
			return &countingConn{Conn: c, in: &read, out: new(atomic.Int64)}, nil
		},
	}
	defer tr.CloseIdleConnections()
	req, err := http.NewRequest(http.MethodGet, base+transport.PathSnapshot+"?ns="+namespace, nil)
	if err != nil {
		b.Fatal(err)
	}
	if gzip {
		req.Header.Set("Accept-Encoding", "gzip")
	}
	resp, err := tr.RoundTrip(req)
	if err != nil {
		b.Fatal(err)
	}
	defer resp.Body.Close()
	if _, err := io.Copy(io.Discard, resp.Body); err != nil {
		b.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK {
		b.Fatalf("snapshot from the relay: %s", resp.Status)
	}
	return read.Load()
}

// statsDelta is what a relay served between two of its reports.
func statsDelta(a, b relay.Stats) relay.Stats {
	return relay.Stats{Snapshots: b.Snapshots - a.Snapshots, NotModified: b.NotModified - a.NotModified, Shed: b.Shed - a.Shed,
		Events: b.Events - a.Events, Watches: b.Watches - a.Watches, Streams: b.Streams - a.Streams,
		StreamPolls: b.StreamPolls - a.StreamPolls, Acks: b.Acks - a.Acks, Conns: b.Conns - a.Conns, OpenStreams: b.OpenStreams}
}

// relayProc is a relay child process.
type relayProc struct {
	*childProc
	addr, url string
	dead      bool
}

// relayReport is what a relay child says of itself.
type relayReport struct {
	CPU      time.Duration // user+system (getrusage)
	RSS, HWM int64         // resident set now and at its peak
	In, Out  int64         // bytes read and written by its listener's connections
	H2C, H1  int64         // connections that opened with HTTP/2's preface, and the others
	GCs      uint64        // garbage collections so far
	Alloc    uint64        // bytes allocated so far
	Stats    relay.Stats
}

// startRelay starts a relay child following upstream, listening on addr,
// with its last goods in dir ("": none), and waits until it listens. It is
// stopped at the benchmark's end.
func startRelay(b *testing.B, upstream, addr, dir string) *relayProc {
	b.Helper()
	rl := &relayProc{childProc: startProc(b, relayEnv+"="+upstream, "HOLDFAST_SCALE_RELAY_ADDR="+addr, "HOLDFAST_SCALE_RELAY_CACHE="+dir)}
	b.Cleanup(func() {
		if !rl.dead {
			rl.stop()
		}
	})
	line := next(b, rl.childProc, time.Minute)
	a, ok := strings.CutPrefix(line, "listening ")
	if !ok {
		b.Fatalf("relay said %q", line)
	}
	rl.addr, rl.url = a, "http://"+a
	if os.Getenv(tlsCertEnv) != "" {
		rl.url = "https://" + a
	}
	return rl
}

// report asks the relay for its report, after a GC that returned freed
// memory to the OS when gc is set (for its RSS).
func (rl *relayProc) report(b *testing.B, gc bool) relayReport {
	b.Helper()
	cmd := "stats"
	if gc {
		cmd = "stats gc"
	}
	fmt.Fprintln(rl.stdin, cmd)
	line := next(b, rl.childProc, time.Minute)
	data, ok := strings.CutPrefix(line, "stats ")
	if !ok {
		b.Fatalf("relay said %q", line)
	}
	var r relayReport
	if err := json.Unmarshal([]byte(data), &r); err != nil {
		b.Fatal(err)
	}
	return r
}

// profile starts the relay's CPU profile into path; profileStop ends it.
func (rl *relayProc) profile(b *testing.B, path string) {
	b.Helper()
	fmt.Fprintln(rl.stdin, "profile "+path)
	expect(b, rl.childProc, "profiling", time.Minute)
}

func (rl *relayProc) profileStop(b *testing.B) {
	b.Helper()
	fmt.Fprintln(rl.stdin, "profile-stop")
	expect(b, rl.childProc, "profiled", time.Minute)
}

// kill ends the relay at once, as a crash does.
func (rl *relayProc) kill() {
	rl.dead = true
	_ = rl.cmd.Process.Kill()
	_ = rl.cmd.Wait()
	_ = rl.stdin.Close()
}

// relayChild is the relay role: a relay following upstream over HTTP,
// serving on its listener (counted) until its stdin closes. It answers
// "stats" and "stats gc" with "stats <relayReport JSON>", and "profile
// PATH" / "profile-stop" with "profiling" / "profiled".
func relayChild(upstream string, in io.Reader, out io.Writer) error {
	src, err := transport.NewHTTPSource(upstream)
	if err != nil {
		return err
	}
	defer src.Close()
	var opts []relay.Option
	if dir := os.Getenv("HOLDFAST_SCALE_RELAY_CACHE"); dir != "" {
		opts = append(opts, relay.WithCacheDir(dir))
	}
	r, err := relay.New(src, opts...)
	if err != nil {
		return err
	}
	addr := os.Getenv("HOLDFAST_SCALE_RELAY_ADDR")
	if addr == "" {
		addr = "127.0.0.1:0"
	}
	l, err := net.Listen("tcp", addr)
	if err != nil {
		_ = r.Close()
		return err
	}
	cl := &countingListener{Listener: l}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	served := make(chan error, 1)
	if cert := os.Getenv(tlsCertEnv); cert != "" {
		// As holdfast relay -tls-cert serves: internal/listen's server,
		// HTTP/2 through ALPN.
		t, err := listen.NewTLS(cert, os.Getenv(tlsKeyEnv), "", slog.New(slog.DiscardHandler))
		if err != nil {
			_ = r.Close()
			return err
		}
		h := r.Handler()
		if name := os.Getenv("HOLDFAST_SCALE_RELAY_WITHOUT"); name != "" {
			h = withoutCapability(h, name)
		}
		srv := listen.NewServer(h, listen.Config{Addr: l.Addr().String(), TLS: t})
		go func() {
			err := srv.Serve(cl)
			_ = r.Close()
			served <- err
		}()
		go func() { <-ctx.Done(); _ = srv.Close() }()
	} else {
		if os.Getenv("HOLDFAST_SCALE_RELAY_WITHOUT") != "" {
			_ = r.Close()
			return errors.New("HOLDFAST_SCALE_RELAY_WITHOUT needs HOLDFAST_SCALE_TLS=1")
		}
		go func() { served <- r.Serve(ctx, cl) }()
	}

	w := bufio.NewWriter(out)
	say := func(s string) { fmt.Fprintln(w, s); w.Flush() }
	say("listening " + l.Addr().String())
	var prof *os.File
	sc := bufio.NewScanner(in)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) == 0 {
			continue
		}
		switch f[0] {
		case "stats":
			if len(f) > 1 && f[1] == "gc" {
				runtime.GC()
				debug.FreeOSMemory()
			}
			cpu, _ := selfCPU()
			rss, hwm := procMem()
			gc := []metrics.Sample{{Name: "/gc/cycles/total:gc-cycles"}, {Name: "/gc/heap/allocs:bytes"}}
			metrics.Read(gc)
			data, _ := json.Marshal(relayReport{CPU: cpu, RSS: rss, HWM: hwm, In: cl.in.Load(), Out: cl.out.Load(),
				H2C: cl.h2c.Load(), H1: cl.h1.Load(), GCs: gc[0].Value.Uint64(), Alloc: gc[1].Value.Uint64(), Stats: r.Stats()})
			say("stats " + string(data))
		case "profile":
			if prof, err = os.Create(f[1]); err != nil {
				return err
			}
			if err := pprof.StartCPUProfile(prof); err != nil {
				return err
			}
			// And what it allocates meanwhile: the difference of two
			// allocation profiles (go tool pprof -base F.allocs-base F.allocs).
			if err := writeAllocs(f[1] + ".allocs-base"); err != nil {
				return err
			}
			say("profiling")
		case "heap":
			// The live heap after a GC (go tool pprof -sample_index
			// inuse_space F), and the runtime's memory classes beside it.
			runtime.GC()
			hf, err := os.Create(f[1])
			if err != nil {
				return err
			}
			if err := pprof.Lookup("heap").WriteTo(hf, 0); err != nil {
				_ = hf.Close()
				return err
			}
			_ = hf.Close()
			classes := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}, {Name: "/memory/classes/heap/stacks:bytes"},
				{Name: "/memory/classes/heap/free:bytes"}, {Name: "/memory/classes/heap/unused:bytes"}, {Name: "/sched/goroutines:goroutines"}}
			metrics.Read(classes)
			// Stacks shrink by half at a GC that finds one less than a
			// quarter used: what three more GCs leave is the settled size.
			settled := make([]string, 3)
			for i := range settled {
				runtime.GC()
				st := []metrics.Sample{{Name: "/memory/classes/heap/stacks:bytes"}}
				metrics.Read(st)
				settled[i] = strconv.FormatUint(st[0].Value.Uint64(), 10)
			}
			say(fmt.Sprintf("heap objects %d stacks %d free %d unused %d goroutines %d; stacks after 3 more GCs %s", classes[0].Value.Uint64(), classes[1].Value.Uint64(),
				classes[2].Value.Uint64(), classes[3].Value.Uint64(), classes[4].Value.Uint64(), strings.Join(settled, " ")))
		case "profile-stop":
			pprof.StopCPUProfile()
			_ = prof.Close()
			if err := writeAllocs(prof.Name() + ".allocs"); err != nil {
				return err
			}
			say("profiled")
		}
	}
	cancel()
	return <-served
}

// withoutCapability strips capability name from what h's replies
// advertise, so that the relay's clients do without it
// (HOLDFAST_SCALE_RELAY_WITHOUT=ack-stream: what the ack stream costs and
// saves).
func withoutCapability(h http.Handler, name string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h.ServeHTTP(&capStripper{ResponseWriter: w, name: name}, r)
	})
}

type capStripper struct {
	http.ResponseWriter
	name     string
	stripped bool
}

func (c *capStripper) strip() {
	if c.stripped {
		return
	}
	c.stripped = true
	h := c.Header()
	if v := h.Get(transport.HeaderCapabilities); v != "" {
		caps := slices.DeleteFunc(strings.Split(v, ","), func(s string) bool { return strings.TrimSpace(s) == c.name })
		h.Set(transport.HeaderCapabilities, strings.Join(caps, ","))
	}
}

func (c *capStripper) WriteHeader(code int) { c.strip(); c.ResponseWriter.WriteHeader(code) }

func (c *capStripper) Write(p []byte) (int, error) { c.strip(); return c.ResponseWriter.Write(p) }

func (c *capStripper) Unwrap() http.ResponseWriter { return c.ResponseWriter }

// writeAllocs writes the process's allocation profile to path, after a
// GC: the profile stands as of the last one (so a profile's relay-gc
// counts two more).
func writeAllocs(path string) error {
	runtime.GC()
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := pprof.Lookup("allocs").WriteTo(f, 0); err != nil {
		_ = f.Close()
		return err
	}
	return f.Close()
}

// procMem is the process's VmRSS and VmHWM, in bytes.
func procMem() (rss, hwm int64) {
	data, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0, 0
	}
	for line := range strings.Lines(string(data)) {
		name, rest, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		kb, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
		switch name {
		case "VmRSS":
			rss = kb << 10
		case "VmHWM":
			hwm = kb << 10
		}
	}
	return rss, hwm
}

// countingListener counts the bytes its connections read and write, and
// the connections that open with the HTTP/2 preface (h2c) or not.
type countingListener struct {
	net.Listener
	in, out atomic.Int64
	h2c, h1 atomic.Int64
}

func (l *countingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &countingConn{Conn: c, in: &l.in, out: &l.out, l: l}, nil
}

type countingConn struct {
	net.Conn
	in, out *atomic.Int64
	l       *countingListener // nil: no protocol count
	seen    bool              // its first bytes were counted
}

func (c *countingConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	c.in.Add(int64(n))
	if n > 0 && !c.seen && c.l != nil {
		c.seen = true
		if bytes.HasPrefix(p[:n], []byte("PRI * HTTP/2.0")) {
			c.l.h2c.Add(1)
		} else {
			c.l.h1.Add(1)
		}
	}
	return n, err
}

func (c *countingConn) Write(p []byte) (int, error) {
	n, err := c.Conn.Write(p)
	c.out.Add(int64(n))
	return n, err
}
