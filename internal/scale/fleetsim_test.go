//go:build scale

package scale

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/holdfast-dev/holdfast/controlapi"
	"github.com/holdfast-dev/holdfast/internal/rollout"
	"github.com/holdfast-dev/holdfast/internal/testutil"
	"github.com/holdfast-dev/holdfast/internal/wire"
	"github.com/holdfast-dev/holdfast/transport"
)

// BenchmarkFleetSim drives real `holdfast server` processes (three, over
// one etcd member, Debian's) with simulated clients at the report level:
// HOLDFAST_SIM_RELAYS (50) simulated relays, each speaking for its share
// of the clients on the relays' wire (presence reports of its clients,
// relayed acks of theirs), following the namespace by snapshot and
// acking each revision once for every client (no SDKs, no streams of
// clients). Each relay reports to one server (relay i to server i mod 3)
// and fails over to the next when it stops answering.
//
// For each fleet size of HOLDFAST_SIM_CLIENTS (10000,100000) and each
// case of HOLDFAST_SIM_CASES (steady,nack,killed):
//   - steady: stages 1, 10, 100% with a 5 s bake; the rollout must
//     promote with every client counted once (the last bake's members
//     and reports, the clients known, equal to the fleet).
//   - nack: 3% of the clients (by a hash of their id) reject the change,
//     prevalidate on: the rollout must revert at the 1% stage.
//   - killed: as steady, and the leading server is killed (SIGKILL) as
//     the 10% stage begins: the time to the next decision, and the
//     clients still counted once.
//
// Reported: wal-Bps, etcd's WAL bytes a second over the rollout (from its
// start to its last decision, sampled every 100 ms;
// etcd_disk_wal_write_bytes_total from its /metrics), quiet-wal-Bps over
// 5 s before it, after-wal-bytes the bytes of the 10 s after it (the
// servers' summaries of the namespace, written again once it ends);
// leader-cpu, the leading server's CPU seconds a second over the same
// span (/proc); the stage times; next-s for killed.
//
//	go test -tags scale -run '^$' -bench FleetSim -benchtime 1x -timeout 60m ./internal/scale/
func BenchmarkFleetSim(b *testing.B) {
	sizes := envList("HOLDFAST_SIM_CLIENTS", "10000,100000")
	cases := envList("HOLDFAST_SIM_CASES", "steady,nack,killed")
	relays := envInt("HOLDFAST_SIM_RELAYS", 50)
	for _, n := range sizes {
		clients, err := strconv.Atoi(n)
		if err != nil {
			b.Fatalf("HOLDFAST_SIM_CLIENTS: %v", err)
		}
		for _, c := range cases {
			b.Run(fmt.Sprintf("clients=%d/%s", clients, c), func(b *testing.B) {
				for range b.N {
					runFleetSim(b, clients, relays, c)
				}
			})
		}
	}
}

func envList(name, def string) []string {
	v := os.Getenv(name)
	if v == "" {
		v = def
	}
	return strings.Split(v, ",")
}

// simBad reports whether a simulated client rejects the change (3%).
func simBad(id string) bool {
	h := fnv.New32a()
	h.Write([]byte(id))
	return h.Sum32()%100 < 3
}

func runFleetSim(b *testing.B, clients, relays int, what string) {
	bin := buildHoldfast(b)
	etcd := startEtcdMember(b)
	var servers []*holdfastProc
	for range 3 {
		servers = append(servers, startHoldfast(b, bin, "server", "-etcd", etcd, "-heartbeat", "1s"))
	}
	publishBase(b, servers[0].url)

	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	defer func() { cancel(); wg.Wait() }()
	var acked atomic.Int64
	var sims []*simRelay
	for i := range relays {
		r := &simRelay{id: fmt.Sprintf("sim-relay-%02d", i), servers: servers, at: i % len(servers), nack: what == "nack", acked: &acked}
		for j := i; j < clients; j += relays {
			r.clients = append(r.clients, fmt.Sprintf("sim-client-%06d", j))
		}
		sims = append(sims, r)
		wg.Add(1)
		go func() { defer wg.Done(); r.run(ctx) }()
	}
	go func() {
		// Should the servers not hear the fleet: why, in the log.
		select {
		case <-ctx.Done():
		case <-time.After(time.Minute):
			for _, r := range sims {
				if e, ok := r.lastErr.Load().(string); ok {
					fmt.Fprintf(os.Stderr, "relay %s: %s\n", r.id, e)
				}
			}
		}
	}()
	waitKnown(b, servers, clients)

	quiet0 := walBytes(b, etcd)
	time.Sleep(5 * time.Second)
	quiet := float64(walBytes(b, etcd)-quiet0) / 5

	leader := -1
	for i, s := range servers {
		if leads(s.url) {
			leader = i
		}
	}
	if leader < 0 {
		b.Fatal("no server leads")
	}
	wal0, cpu0 := walBytes(b, etcd), procCPU(b, servers[leader].cmd.Process.Pid)
	start := time.Now()
	id := startRollout(b, servers[(leader+1)%len(servers)].url, what == "nack")
	var killedAt time.Time
	var rec controlapi.RolloutRecord
	// etcd's WAL and the leader's CPU every 100 ms, so that the rates are
	// taken up to the rollout's end as the controller decided it, not as
	// a look saw it later (a look at an ended rollout of 100,000 clients
	// takes seconds, and the summaries of a fleet that took the promoted
	// revision are written then, after the rollout).
	type sample struct {
		at  time.Time
		wal int64
		cpu float64
	}
	var (
		samplesMu sync.Mutex
		samples   = []sample{{at: start, wal: wal0, cpu: cpu0}}
	)
	leaderPid := servers[leader].cmd.Process.Pid
	stopSampling := make(chan struct{})
	var sampling sync.WaitGroup
	sampling.Add(1)
	go func() {
		defer sampling.Done()
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-stopSampling:
				return
			case <-tick.C:
			}
			wal, err := readWALBytes(etcd)
			if err != nil {
				continue
			}
			cpu, _ := readProcCPU(leaderPid) // 0 once the leader is killed: not used then
			samplesMu.Lock()
			samples = append(samples, sample{at: time.Now(), wal: wal, cpu: cpu})
			samplesMu.Unlock()
		}
	}()
	for {
		alive := make([]*holdfastProc, 0, len(servers))
		for _, s := range servers {
			if !s.dead {
				alive = append(alive, s)
			}
		}
		r, ok := readRolloutRecord(b, alive, id)
		if ok {
			rec = r
			if r.State != "running" {
				break
			}
		}
		if what == "killed" && killedAt.IsZero() && ok && rec.Stage == 10 {
			// Its CPU up to the kill, for the figure.
			cpu0 = procCPU(b, servers[leader].cmd.Process.Pid) - cpu0
			servers[leader].kill()
			killedAt = time.Now()
		}
		if time.Since(start) > 15*time.Minute {
			b.Fatalf("the rollout still at stage %v after 15 minutes: %s", rec.Stage, rec.Reason)
		}
		time.Sleep(200 * time.Millisecond)
	}
	// The rollout ended at its last decision: the rates up to the first
	// sample at or after it; and what etcd wrote in the 10 s after it.
	ended := rec.Decisions[len(rec.Decisions)-1].At
	testutil.Eventually(b, time.Minute, func() bool {
		samplesMu.Lock()
		defer samplesMu.Unlock()
		return !samples[len(samples)-1].at.Before(ended.Add(10 * time.Second))
	}, "10 s of samples after the rollout's end")
	close(stopSampling)
	sampling.Wait()
	last, after := samples[len(samples)-1], samples[len(samples)-1]
	for _, smp := range samples[1:] {
		if !smp.at.Before(ended) {
			last = smp
			break
		}
	}
	for _, smp := range samples {
		if !smp.at.Before(last.at.Add(10 * time.Second)) {
			after = smp
			break
		}
	}
	took := last.at.Sub(start)
	wal := float64(last.wal-wal0) / took.Seconds()
	var cpu float64
	if killedAt.IsZero() {
		cpu = (last.cpu - cpu0) / took.Seconds()
	} else {
		cpu = cpu0 / killedAt.Sub(start).Seconds()
	}
	b.ReportMetric(wal, "wal-Bps")
	b.ReportMetric(float64(after.wal-last.wal), "after-wal-bytes")
	b.ReportMetric(quiet, "quiet-wal-Bps")
	b.ReportMetric(cpu, "leader-cpu")
	b.ReportMetric(took.Seconds(), "rollout-s")

	var stages []string
	var lastBake *controlapi.RolloutCounts
	var next time.Time
	for _, d := range rec.Decisions {
		stages = append(stages, fmt.Sprintf("%s %g%% +%.1fs", d.What, d.Stage, d.At.Sub(rec.Decisions[0].At).Seconds()))
		if d.What == "bake" {
			lastBake = d.Counts
		}
		if !killedAt.IsZero() && next.IsZero() && d.At.After(killedAt) {
			next = d.At
		}
	}
	msg := fmt.Sprintf("%d clients, %d relays, 3 servers, %s: %s at stage %g%% after %v (%s); WAL %.0f B/s (quiet %.0f B/s); leader CPU %.3f s/s",
		clients, relays, what, rec.State, rec.Stage, took.Round(time.Millisecond), strings.Join(stages, ", "), wal, quiet, cpu)
	if !killedAt.IsZero() {
		if next.IsZero() {
			b.Fatalf("no decision after the kill: %s", msg)
		}
		b.ReportMetric(next.Sub(killedAt).Seconds(), "next-s")
		msg += fmt.Sprintf("; leader killed at 10%%, next decision %v later", next.Sub(killedAt).Round(time.Millisecond))
	}
	b.Log(msg)
	switch what {
	case "nack":
		if rec.State != "reverted" || rec.Stage != 1 {
			b.Fatalf("the 3%% nack case: %s", msg)
		}
	default:
		if rec.State != "promoted" || lastBake == nil || lastBake.InStage != clients || lastBake.Reported != clients || rec.Clients != clients {
			b.Fatalf("want promoted with every one of %d clients counted once (last bake %+v, clients %d): %s", clients, lastBake, rec.Clients, msg)
		}
	}
}

// walBytes reads etcd's etcd_disk_wal_write_bytes_total.
func walBytes(b *testing.B, etcd string) int64 {
	b.Helper()
	n, err := readWALBytes(etcd)
	if err != nil {
		b.Fatal(err)
	}
	return n
}

func readWALBytes(etcd string) (int64, error) {
	resp, err := benchHTTP.Get("http://" + etcd + "/metrics")
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "etcd_disk_wal_write_bytes_total "); ok {
			f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
			return int64(f), err
		}
	}
	return 0, errors.New("etcd's /metrics has no etcd_disk_wal_write_bytes_total")
}

// procCPU is a process's CPU seconds (user and system) from /proc.
func procCPU(b *testing.B, pid int) float64 {
	b.Helper()
	cpu, err := readProcCPU(pid)
	if err != nil {
		b.Fatal(err)
	}
	return cpu
}

func readProcCPU(pid int) (float64, error) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	s := string(data)
	fields := strings.Fields(s[strings.LastIndexByte(s, ')')+2:])
	utime, _ := strconv.ParseFloat(fields[11], 64)
	stime, _ := strconv.ParseFloat(fields[12], 64)
	return (utime + stime) / 100, nil // USER_HZ
}

// simRelay is a simulated relay and its clients.
type simRelay struct {
	id      string
	clients []string
	servers []*holdfastProc
	at      int // the server it reports to
	nack    bool
	acked   *atomic.Int64
	lastErr atomic.Value // string: the last error, for the benchmark's failure

	src   *transport.HTTPSource
	epoch string
	seq   uint64
	rev   int64 // the revision its clients acked (to src)
}

func (r *simRelay) run(ctx context.Context) {
	var b [6]byte
	_, _ = rand.Read(b[:])
	r.epoch = hex.EncodeToString(b[:])
	tick := time.NewTicker(250 * time.Millisecond)
	defer tick.Stop()
	lastPresence := time.Time{}
	for ctx.Err() == nil {
		if r.src == nil {
			src, err := transport.NewHTTPSource(r.servers[r.at].url)
			if err != nil {
				return
			}
			r.src, r.rev, r.seq = src, 0, 0
		}
		err := r.step(ctx, &lastPresence)
		if err != nil && ctx.Err() == nil {
			r.lastErr.Store(err.Error())
			// Fail over: the next server, its clients told again.
			r.at = (r.at + 1) % len(r.servers)
			r.src = nil
		}
		select {
		case <-ctx.Done():
		case <-tick.C:
		}
	}
}

func (r *simRelay) step(ctx context.Context, lastPresence *time.Time) error {
	// The snapshot first: the source learns the server's capabilities
	// (presence reports among them) from its replies.
	snap, err := r.src.Snapshot(ctx, transport.SnapshotRequest{Namespace: namespace})
	if err != nil {
		return err
	}
	if time.Since(*lastPresence) >= time.Second {
		if err := r.presence(ctx); err != nil {
			return err
		}
		*lastPresence = time.Now()
	}
	if snap.Revision == r.rev {
		return nil
	}
	var values map[string]json.RawMessage
	if err := json.Unmarshal(snap.Values, &values); err != nil {
		return err
	}
	var staged *rollout.Staged
	if raw, ok := values[rollout.Key]; ok {
		if staged, err = rollout.Decode(raw); err != nil {
			return err
		}
	}
	acks := make([]transport.Ack, 0, len(r.clients))
	for _, c := range r.clients {
		a := transport.Ack{ClientID: c, Namespace: namespace, Revision: snap.Revision, Status: transport.AckApplied, SDKVersion: "0.1.0"}
		if staged != nil {
			bad := r.nack && simBad(c)
			switch member := staged.Member(c); {
			case member && bad:
				a.Status, a.Rollout, a.Error = transport.AckRejected, staged.ID, "simulated rejection"
			case member:
				a.Rollout = staged.ID
			case bad && staged.Prevalidate:
				acks = append(acks, transport.Ack{ClientID: c, Namespace: namespace, Revision: snap.Revision, Status: transport.AckWouldReject,
					Rollout: staged.ID, Error: "simulated rejection", SDKVersion: "0.1.0"})
			}
		}
		acks = append(acks, a)
	}
	if err := r.src.AckRelayed(ctx, r.id, acks); err != nil {
		return err
	}
	r.rev = snap.Revision
	r.acked.Add(int64(len(acks)))
	return nil
}

// presence sends the relay's clients as live: the whole set once (in
// reports of at most wire.MaxPresenceClients), then an empty report a
// second; a server that does not know the run hears the set again.
func (r *simRelay) presence(ctx context.Context) error {
	send := func(rep wire.PresenceReport) error {
		r.seq++
		rep.RelayID, rep.Epoch, rep.Seq, rep.EveryMillis = r.id, r.epoch, r.seq, 1000
		data, err := json.Marshal(rep)
		if err != nil {
			return err
		}
		return r.src.ReportPresence(ctx, data)
	}
	if r.seq > 0 {
		err := send(wire.PresenceReport{})
		if !errors.Is(err, transport.ErrPresenceUnknown) {
			return err
		}
	}
	for i := 0; i < len(r.clients); i += wire.MaxPresenceClients {
		rep := wire.PresenceReport{Full: i == 0, Live: r.clients[i:min(i+wire.MaxPresenceClients, len(r.clients))]}
		if err := send(rep); err != nil {
			return err
		}
	}
	return nil
}
