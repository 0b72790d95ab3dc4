//go:build scale

package scale

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/holdfast-dev/holdfast/controlapi"
	"github.com/holdfast-dev/holdfast/internal/testutil"
)

// BenchmarkServerRollout stages one change over 1%, 10% and 100% of a
// fleet with a 5 s bake, on the production shape: HOLDFAST_SCALE_CLIENTS
// (default 10,000) clients in two processes, each process behind its own
// `holdfast relay`, both relays following both of two `holdfast server`
// processes over one etcd (Debian's, one member), each relay preferring
// its own server (the first of its upstreams) and failing over to the
// other. It reports each stage's time (from its start to the next one's;
// the last to the promotion), the total, and for each stage when it began
// to bake (reportedN-s) and how many of its members the controller had
// then counted gone (goneN: silent past the liveness window, so not
// waited for). HOLDFAST_SCALE_TIMELINE=1 writes the record's counts to
// stderr at every read; HOLDFAST_SCALE_PERF names a file for `perf
// record` of the machine over the rollout. The sub-benchmark
// leader-killed kills the leading server (SIGKILL) as the 10% stage
// starts: failover-s is the time from the kill until the other server
// leads, next-s until the rollout's next decision.
//
// The report pipeline's latency, per stage (pipelineN-p50-s, -p99-s,
// -max-s) and over every stage (pipeline-p50-s ...): for each member of a
// stage, from when its report of the stage's revision left its relay to
// when the leader's record of the rollout first counted it (its reported
// count). It measures from outside, whatever way the reports take
// between. The relays run at debug level, whose log names every ack they
// forwarded with when its send began, once delivered: a client's first
// delivered send of the revision counts, not its repeats, and a send that
// failed (to a killed server) counts at its retry. The benchmark reads
// the record from the leader (once it is killed, from the other server)
// every HOLDFAST_SCALE_POLL_MS (50) milliseconds, a read's time being
// when it answered: a latency is known to within the poll. The k-th
// member's report sent is matched with the first read counting k. That
// is exact when the controller counts reports in the order they were
// sent, and an approximation otherwise: here one relay's reports go
// straight to the leader and the other's through the other server, and
// the matching then narrows the spread (its max is at most the true
// max). sentN-s is when the stage's last member's report left its relay,
// from the stage's start (before it: the change's way down, the clients'
// apply and ack delay); countedN-s when the record first counted every
// member (the bake decision, reportedN-s, follows at the controller's
// next step, and not before its settling time).
//
// The steady run also reports etcd's WAL bytes a second over the rollout
// (wal-Bps) and over a quiet 5 s before it, the whole fleet connected
// (quiet-wal-Bps), from etcd's etcd_disk_wal_write_bytes_total.
//
//	go test -tags scale -run '^$' -bench ServerRollout -benchtime 1x -timeout 60m ./internal/scale/
func BenchmarkServerRollout(b *testing.B) {
	clients := envInt("HOLDFAST_SCALE_CLIENTS", 10000)
	for _, kill := range []bool{false, true} {
		name := "steady"
		if kill {
			name = "leader-killed"
		}
		b.Run(name, func(b *testing.B) {
			for range b.N {
				runServerRollout(b, clients, kill)
			}
		})
	}
}

// BenchmarkRolloutNacks: a change that HOLDFAST_SCALE_NACK_PCT (3) percent
// of HOLDFAST_SCALE_CLIENTS (1,000) clients nack, staged over 1%, 10% and
// 100% with a 5 s bake, with and without prevalidate, for each of
// HOLDFAST_SCALE_SEEDS (5) seeds (which clients nack). One `holdfast
// server` (embedded etcd), one `holdfast relay`, the clients in one
// process. Each run logs the stage the rollout stopped at, how many
// clients ever served the change, and the time from the first nack the
// server counted to the last client back on the old content.
//
//	go test -tags scale -run '^$' -bench RolloutNacks -benchtime 1x -timeout 60m ./internal/scale/
func BenchmarkRolloutNacks(b *testing.B) {
	clients := envInt("HOLDFAST_SCALE_CLIENTS", 1000)
	seeds := envInt("HOLDFAST_SCALE_SEEDS", 5)
	pct := envInt("HOLDFAST_SCALE_NACK_PCT", 3)
	for _, prevalidate := range []bool{false, true} {
		b.Run(fmt.Sprintf("prevalidate=%v", prevalidate), func(b *testing.B) {
			for range b.N {
				var served, back []float64
				for seed := 1; seed <= seeds; seed++ {
					s, bk := runRolloutNacks(b, clients, pct, seed, prevalidate)
					served, back = append(served, float64(s)), append(back, bk.Seconds())
				}
				b.ReportMetric(mean(served), "served-clients")
				b.ReportMetric(mean(back), "nack-to-back-s")
			}
		})
	}
}

func mean(xs []float64) float64 {
	sum := 0.0
	for _, x := range xs {
		sum += x
	}
	return sum / float64(len(xs))
}

func runServerRollout(b *testing.B, clients int, killLeader bool) {
	bin := buildHoldfast(b)
	etcd := startEtcdMember(b)
	servers := []*holdfastProc{
		startHoldfast(b, bin, "server", "-etcd", etcd, "-heartbeat", "1s"),
		startHoldfast(b, bin, "server", "-etcd", etcd, "-heartbeat", "1s"),
	}
	publishBase(b, servers[0].url)
	var kids []*childProc
	var relayLogs []string
	for i := range 2 {
		// Relay i prefers server i (the first of its upstreams) and
		// fails over to the other: half the reports reach the leader
		// through the other server, as in a fleet spread over both.
		// At debug level, in JSON: the acks each relay forwarded, and
		// when (forwardedAcks).
		up := servers[i].url + "," + servers[1-i].url
		rl := startHoldfast(b, bin, "relay", "-upstream", up, "-namespaces", namespace, "-v", "-log-format", "json")
		relayLogs = append(relayLogs, rl.log)
		kids = append(kids, startClients(b, rl.url, clients/2, 1)...)
	}
	waitKnown(b, servers, clients)
	if !leads(servers[0].url) && leads(servers[1].url) {
		// The leader first: the record is read from it (the
		// controller's count), the rollout started at the other.
		servers[0], servers[1] = servers[1], servers[0]
	}
	poll := time.Duration(envInt("HOLDFAST_SCALE_POLL_MS", 50)) * time.Millisecond

	quiet0 := walBytes(b, etcd)
	time.Sleep(5 * time.Second)
	quiet := float64(walBytes(b, etcd)-quiet0) / 5
	stopPerf := perfRecord(b)
	timeline := os.Getenv("HOLDFAST_SCALE_TIMELINE") != "" // the record's counts at every read
	wal0 := walBytes(b, etcd)
	id := startRollout(b, servers[1].url, false)
	start := time.Now()
	var killedAt, ledAt time.Time
	var rec controlapi.RolloutRecord
	var samples []countSample
	for {
		var ok bool
		alive := servers
		if !killedAt.IsZero() {
			alive = servers[1:]
		}
		rec, ok = readRolloutRecord(b, alive, id)
		if ok {
			samples = append(samples, countSample{at: time.Now(), rev: rec.StageRevision, reported: rec.Reported, inStage: rec.InStage})
		}
		if ok && rec.State != "running" {
			break
		}
		if ok && timeline {
			// To stderr: a benchmark's log keeps its first lines only.
			fmt.Fprintf(os.Stderr, "+%5.1fs stage %g%%: %d of %d in the stage reported, %d lagging, %d clients known\n",
				time.Since(start).Seconds(), rec.Stage, rec.Reported, rec.InStage, rec.Lagging, rec.Clients)
		}
		if killLeader && killedAt.IsZero() && ok && rec.Stage == 10 {
			// servers[0] leads: it started first; confirm before the kill.
			if !leads(servers[0].url) {
				servers[0], servers[1] = servers[1], servers[0]
			}
			servers[0].kill()
			killedAt = time.Now()
		}
		if !killedAt.IsZero() && ledAt.IsZero() && leads(servers[1].url) {
			ledAt = time.Now()
		}
		if time.Since(start) > 15*time.Minute {
			b.Fatalf("the rollout still at stage %v after 15 minutes", rec.Stage)
		}
		// The pipeline's latency is measured to this loop's reads, to
		// within poll. Not much faster: each read of the record tallies
		// every client; read every 20 ms, the reads took a third of the
		// leader's CPU (HOLDFAST_SCALE_PERF), on the cores the fleet
		// shares. The stages' times come from the decisions' times, not
		// from this loop.
		time.Sleep(poll)
	}
	stopPerf()
	if !killLeader {
		wal := float64(walBytes(b, etcd)-wal0) / time.Since(start).Seconds()
		b.ReportMetric(wal, "wal-Bps")
		b.ReportMetric(quiet, "quiet-wal-Bps")
		b.Logf("etcd's WAL over the rollout: %.0f B/s (a quiet 5 s before it: %.0f B/s)", wal, quiet)
	}
	if rec.State != "promoted" {
		b.Fatalf("the rollout ended %s at stage %v: %s", rec.State, rec.Stage, rec.Reason)
	}
	for _, k := range kids {
		expect(b, k, "done 1", 5*time.Minute)
	}
	done := time.Since(start)

	// Each stage's time from the decisions: a stage runs from its stage
	// (or start) decision to the next stage's, the last to the promotion.
	// Within a stage, its bake decision says when its members had all
	// reported, but for those the controller counted gone (silent past
	// its liveness window): the time before it is the stage's
	// propagation and reports, the rest its bake.
	var marks, bakes []time.Time
	var names []string
	var bakeCounts []*controlapi.RolloutCounts
	for _, d := range rec.Decisions {
		switch d.What {
		case "start", "stage", "promote":
			marks = append(marks, d.At)
			bakes = append(bakes, time.Time{})
			bakeCounts = append(bakeCounts, nil)
			names = append(names, fmt.Sprintf("%g%%", d.Stage))
		case "bake":
			if len(bakes) > 0 && bakes[len(bakes)-1].IsZero() {
				if d.Counts == nil {
					b.Fatalf("the %s stage's bake decision carries no counts: %q", names[len(names)-1], d.Reason)
				}
				bakes[len(bakes)-1] = d.At
				bakeCounts[len(bakeCounts)-1] = d.Counts
			}
		}
	}
	var parts []string
	for i := 0; i+1 < len(marks); i++ {
		d := marks[i+1].Sub(marks[i])
		stage := strings.TrimSuffix(names[i], "%")
		b.ReportMetric(d.Seconds(), "stage"+stage+"-s")
		part := fmt.Sprintf("%s %v", names[i], d.Round(time.Millisecond))
		if !bakes[i].IsZero() {
			r := bakes[i].Sub(marks[i])
			b.ReportMetric(r.Seconds(), "reported"+stage+"-s")
			n := bakeCounts[i]
			b.ReportMetric(float64(n.Gone), "gone"+stage)
			part += fmt.Sprintf(" (baking after %v: %d of %d member(s) reported, %d gone)", r.Round(time.Millisecond), n.Reported, n.InStage, n.Gone)
		}
		parts = append(parts, part)
	}
	total := marks[len(marks)-1].Sub(marks[0])
	b.ReportMetric(total.Seconds(), "total-s")
	b.ReportMetric(done.Seconds(), "done-s")
	msg := fmt.Sprintf("%d clients, 2 relays, 2 servers: %s; promoted %v after the start, every client serving it after %v",
		clients, strings.Join(parts, ", "), total.Round(time.Millisecond), done.Round(time.Millisecond))
	if killLeader {
		var next time.Time
		for _, d := range rec.Decisions {
			if d.At.After(killedAt) {
				next = d.At
				break
			}
		}
		b.ReportMetric(ledAt.Sub(killedAt).Seconds(), "failover-s")
		b.ReportMetric(next.Sub(killedAt).Seconds(), "next-s")
		msg += fmt.Sprintf("; leader killed at stage 10%%, the other server led %v later, the next decision %v later",
			ledAt.Sub(killedAt).Round(time.Millisecond), next.Sub(killedAt).Round(time.Millisecond))
	}
	msg += "; " + reportPipeline(b, relayLogs, id, rec, samples)
	b.Log(msg)
}

// reportPipeline reports the report pipeline's latency of each stage and
// of all together (pipelineLatencies), and returns it in words.
func reportPipeline(b *testing.B, relayLogs []string, id string, rec controlapi.RolloutRecord, samples []countSample) string {
	sends, ok := forwardedAcks(b, relayLogs, namespace, id)
	if !ok {
		return "the relays logged no acks forwarded (a build without it): no pipeline latency"
	}
	var all []time.Duration
	var parts []string
	for _, d := range rec.Decisions {
		if d.What != "start" && d.What != "stage" {
			continue
		}
		lat, uncounted := pipelineLatencies(sends[d.Revision], samples, d.Revision)
		all = append(all, lat...)
		stage := strconv.FormatFloat(d.Stage, 'g', -1, 64)
		part := fmt.Sprintf("%s%% %s", stage, reportLatencies(b, stage, lat))
		if ss := sends[d.Revision]; len(ss) > 0 {
			// Where the rest of a stage's reporting goes: from its
			// start until its last member's report left a relay (the
			// change's way down, the clients' apply and ack delay).
			last := ss[len(ss)-1].Sub(d.At)
			b.ReportMetric(last.Seconds(), "sent"+stage+"-s")
			part += fmt.Sprintf(", the last sent %v after the stage began", last.Round(time.Millisecond))
		}
		if at, ok := allCounted(samples, d.Revision); ok {
			// Every member counted, from the stage's start: what the
			// stage waited for, but for the controller's own pace (its
			// bake decision, reportedN-s, comes at its next step, and
			// not before a settling time).
			all := at.Sub(d.At)
			b.ReportMetric(all.Seconds(), "counted"+stage+"-s")
			part += fmt.Sprintf(", all counted after %v", all.Round(time.Millisecond))
		}
		if uncounted > 0 {
			part += fmt.Sprintf(" (%d sent, never counted in the stage)", uncounted)
		}
		parts = append(parts, part)
	}
	return "report pipeline (an ack leaving its relay → the leader's record counting it): " +
		reportLatencies(b, "", all) + "; by stage: " + strings.Join(parts, ", ")
}

func runRolloutNacks(b *testing.B, clients, pct, seed int, prevalidate bool) (served int, back time.Duration) {
	bin := buildHoldfast(b)
	srv := startHoldfast(b, bin, "server", "-data-dir", filepath.Join(b.TempDir(), "data"), "-heartbeat", "1s")
	publishBase(b, srv.url)
	rl := startHoldfast(b, bin, "relay", "-upstream", srv.url, "-namespaces", namespace)
	k := startProc(b, childEnv+"="+rl.url, "HOLDFAST_SCALE_CHILD_CLIENTS="+strconv.Itoa(clients),
		fmt.Sprintf("HOLDFAST_SCALE_CHILD_NACK=%d:%d", pct, seed))
	defer k.stop()
	expect(b, k, "ready", 10*time.Minute)
	waitKnown(b, []*holdfastProc{srv}, clients)

	id := startRollout(b, srv.url, prevalidate)
	var rec controlapi.RolloutRecord
	var firstNack time.Time
	deadline := time.Now().Add(10 * time.Minute)
	for {
		r, ok := readRolloutRecord(b, []*holdfastProc{srv}, id)
		if ok {
			rec = r
			if firstNack.IsZero() && r.Nacked+r.WouldNack > 0 {
				firstNack = time.Now()
			}
			if r.State != "running" {
				break
			}
		}
		if time.Now().After(deadline) {
			b.Fatalf("the rollout still running after 10 minutes")
		}
		time.Sleep(10 * time.Millisecond)
	}
	var base, ever int
	for {
		fmt.Fprintln(k.stdin, "serving")
		line := next(b, k, time.Minute)
		var now int
		if _, err := fmt.Sscanf(line, "serving %d %d %d", &base, &now, &ever); err != nil {
			b.Fatalf("the child said %q", line)
		}
		if rec.State == "promoted" || base == clients {
			break
		}
		if time.Now().After(deadline) {
			b.Fatalf("%d of %d clients back on the old content after 10 minutes", base, clients)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if !firstNack.IsZero() && rec.State != "promoted" {
		back = time.Since(firstNack)
	}
	stage := rec.Stage
	b.Logf("seed %d, prevalidate %v: %s at stage %g%% (nacked %d, would-nack %d); %d of %d clients ever served the change; first nack → every client on the old content %v",
		seed, prevalidate, rec.State, stage, rec.Nacked, rec.WouldNack, ever, clients, back.Round(time.Millisecond))
	return ever, back
}

var benchHTTP = &http.Client{Timeout: 10 * time.Second}

// control is a client of the control API at url.
func control(b *testing.B, url string) *controlapi.Client {
	b.Helper()
	c, err := controlapi.NewClient(url, controlapi.WithHTTPClient(benchHTTP))
	if err != nil {
		b.Fatal(err)
	}
	return c
}

// readRolloutRecord reads rollout id from the first of servers that
// answers.
func readRolloutRecord(b *testing.B, servers []*holdfastProc, id string) (controlapi.RolloutRecord, bool) {
	for _, s := range servers {
		if r, err := control(b, s.url).GetRollout(context.Background(), namespace, id); err == nil {
			return *r, true
		}
	}
	return controlapi.RolloutRecord{}, false
}

// leads reports whether the server at url says it leads.
func leads(url string) bool {
	resp, err := benchHTTP.Get(url + "/statusz")
	if err != nil {
		return false
	}
	defer resp.Body.Close()
	var st struct {
		Leader bool `json:"leader"`
	}
	return json.NewDecoder(resp.Body).Decode(&st) == nil && st.Leader
}

// publishBase publishes the namespace's base: seq "0:0" and 999 filler
// keys, as startOrigin does, 100 keys a publish (etcd takes at most 128
// operations in a transaction by default).
func publishBase(b *testing.B, url string) {
	b.Helper()
	c := control(b, url)
	puts := map[string]json.RawMessage{key: json.RawMessage(`"0:0"`)}
	for i := range 999 {
		puts[fmt.Sprintf("k%04d", i)] = json.RawMessage(fmt.Sprintf(`"value of key %d, a setting"`, i))
		if len(puts) == 100 || i == 998 {
			if _, err := c.Publish(context.Background(), namespace, controlapi.PublishRequest{Puts: puts}); err != nil {
				b.Fatal(err)
			}
			puts = map[string]json.RawMessage{}
		}
	}
}

// startRollout starts a rollout of seq "1:<now>" over 1, 10 and 100% with
// a 5 s bake and returns its id.
func startRollout(b *testing.B, url string, prevalidate bool) string {
	b.Helper()
	started, err := control(b, url).StartRollout(context.Background(), namespace, controlapi.RolloutRequest{
		Puts: map[string]json.RawMessage{key: json.RawMessage(fmt.Sprintf(`"1:%d"`, time.Now().UnixNano()))}, Stages: []float64{1, 10, 100},
		Bake: "5s", ReportTimeout: "1m", StageTimeout: "5m", Prevalidate: prevalidate,
	})
	if err != nil {
		b.Fatal(err)
	}
	return started.ID
}

// waitKnown waits until the servers, together, know every client of the
// namespace and have their acks (each server's status counts its own
// clients' reports; holdfast server merges them).
func waitKnown(b *testing.B, servers []*holdfastProc, clients int) {
	b.Helper()
	c := control(b, servers[0].url)
	var last string
	ok := testutil.Wait(5*time.Minute, func() bool {
		st, err := c.Status(context.Background(), namespace)
		if err != nil {
			last = err.Error()
			return false
		}
		last = fmt.Sprintf("%d clients, %d acked", st.Clients, st.Acked)
		return st.Clients >= clients && st.Acked >= clients
	})
	if !ok {
		b.Fatalf("the servers do not know every client: %s", last)
	}
}

// holdfastProc is a `holdfast server` or `holdfast relay` process.
type holdfastProc struct {
	url  string
	log  string // the file of its stderr
	cmd  *exec.Cmd
	dead bool
}

func (p *holdfastProc) kill() {
	if !p.dead {
		p.dead = true
		_ = p.cmd.Process.Kill()
		_ = p.cmd.Wait()
	}
}

// buildHoldfast builds the holdfast command into a temporary directory;
// HOLDFAST_SCALE_BIN names a holdfast binary to run instead (another
// version's, to compare).
func buildHoldfast(b *testing.B) string {
	b.Helper()
	if bin := os.Getenv("HOLDFAST_SCALE_BIN"); bin != "" {
		return bin
	}
	bin := filepath.Join(b.TempDir(), "holdfast")
	if out, err := exec.Command("go", "build", "-o", bin, "github.com/holdfast-dev/holdfast/cmd/holdfast").CombinedOutput(); err != nil {
		b.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

// startHoldfast runs `holdfast CMD -addr A ARGS...` on a free loopback
// port until the benchmark ends, and waits until its /readyz answers 200.
func startHoldfast(b *testing.B, bin, cmd string, args ...string) *holdfastProc {
	b.Helper()
	addr := freeAddr(b)
	c := exec.Command(bin, append([]string{cmd, "-addr", addr}, args...)...)
	logFile, err := os.Create(filepath.Join(b.TempDir(), cmd+".log"))
	if err != nil {
		b.Fatal(err)
	}
	defer logFile.Close() // the process has its own descriptor
	c.Stderr = logFile
	c.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := c.Start(); err != nil {
		b.Fatal(err)
	}
	p := &holdfastProc{url: "http://" + addr, log: logFile.Name(), cmd: c}
	b.Cleanup(p.kill)
	var last string
	if !testutil.Wait(time.Minute, func() bool {
		resp, err := benchHTTP.Get(p.url + "/readyz")
		if err != nil {
			last = err.Error()
			return false
		}
		resp.Body.Close()
		last = resp.Status
		return resp.StatusCode == http.StatusOK
	}) {
		b.Fatalf("holdfast %s at %s not ready after a minute: %s", cmd, p.url, last)
	}
	return p
}

func freeAddr(b *testing.B) string {
	b.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// startEtcdMember runs a one-member etcd (Debian's etcd-server) until the
// benchmark ends and returns its client address.
func startEtcdMember(b *testing.B) string {
	b.Helper()
	bin, err := exec.LookPath("etcd")
	if err != nil {
		b.Skipf("no etcd: %v", err)
	}
	client, peer := freeAddr(b), freeAddr(b)
	c := exec.Command(bin, "--name", "m0", "--data-dir", filepath.Join(b.TempDir(), "etcd"),
		"--listen-client-urls", "http://"+client, "--advertise-client-urls", "http://"+client,
		"--listen-peer-urls", "http://"+peer, "--initial-advertise-peer-urls", "http://"+peer,
		"--initial-cluster", "m0=http://"+peer, "--log-level", "warn", "--logger", "zap")
	c.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := c.Start(); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = c.Process.Kill(); _ = c.Wait() })
	if !testutil.Wait(time.Minute, func() bool {
		resp, err := benchHTTP.Get("http://" + client + "/health")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	}) {
		b.Fatal("etcd not healthy after a minute")
	}
	return client
}

// perfRecord starts `perf record` of the whole machine, with call graphs,
// into the file HOLDFAST_SCALE_PERF names (unset: nothing), and returns
// what stops it: every process of a run (servers, relays, etcd, clients)
// in one profile (perf report --sort comm,sym).
func perfRecord(b *testing.B) (stop func()) {
	b.Helper()
	path := os.Getenv("HOLDFAST_SCALE_PERF")
	if path == "" {
		return func() {}
	}
	cmd := exec.Command("perf", "record", "-a", "-g", "-F", "199", "-o", path)
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		b.Fatalf("perf record: %v", err)
	}
	var once sync.Once
	stop = func() {
		once.Do(func() {
			_ = cmd.Process.Signal(os.Interrupt)
			_ = cmd.Wait()
		})
	}
	b.Cleanup(stop)
	return stop
}
