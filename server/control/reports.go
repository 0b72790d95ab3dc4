package control

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"hash/fnv"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/holdfast-dev/holdfast/internal/controlplane"
	"github.com/holdfast-dev/holdfast/internal/presence"
	"github.com/holdfast-dev/holdfast/internal/rollout/controller"
)

// How the clients' reports reach the rollout controller and the monitor
// across servers (docs/SERVER.md, "Rollouts"): every server keeps its
// clients' reports in its ack table and writes a summary of each
// namespace's entries to the store, under a lease of its own (a server
// that dies takes its summaries with it). While a rollout runs on the
// namespace, at most once a second and only when it changed; else at most
// every idleReportsEvery when a client's revisions changed, and every
// idleRefresh when only the times they were heard did. The leader merges
// the summaries with its own table (a stage's counts, the first stage's
// cut), and so do status and clients on any server. Never an etcd write
// per ack; no server needs another's address.
const (
	reportsEvery     = time.Second
	idleReportsEvery = 5 * time.Second
	idleRefresh      = 30 * time.Second
	expireEvery      = 30 * time.Second // how often the ack table drops the pairs unheard past their expiry
	reportsTTL       = 10               // seconds: a summary outlives its server by at most this
	// summaryPart bounds the clients of one key of a summary, and
	// summaryPartBytes its size (under etcd's default request limit of
	// 1.5 MiB; a report of a rollout's member takes ~95 bytes): a server
	// with more writes its summary in several parts, each client in one
	// (by a hash of its id), so that no client is left out.
	summaryPart      = 20_000
	summaryPartBytes = 1 << 20
)

func reportsPrefix(ns string) string { return RolloutRoot + "reports/" + ns + "/" }

// summaryKey names part k of n of server's summary of ns: a summary of
// one part is the server's id alone (what servers before parts read).
func summaryKey(ns, server string, k, n int) string {
	if n <= 1 {
		return reportsPrefix(ns) + server
	}
	return fmt.Sprintf("%s%s#%d.%d", reportsPrefix(ns), server, k, n)
}

// keyServer is the server a summary's key names (the last element, its
// part cut off).
func keyServer(key string) string {
	name := key[strings.LastIndexByte(key, '/')+1:]
	if i := strings.IndexByte(name, '#'); i >= 0 {
		name = name[:i]
	}
	return name
}

// summaryParts is how many parts a summary of reports takes, of at most
// part clients and about summaryPartBytes each (its size estimated from
// its reports' fields, with room for the rest).
func summaryParts(reports []controller.Report, part int) int {
	size := 0
	for i := range reports {
		r := &reports[i]
		size += 96 + len(r.ClientID) + len(r.Rollout) + len(r.NackError) + len(r.WouldError) + len(r.SDKVersion)
	}
	return max(1, (len(reports)+part-1)/part, (size+summaryPartBytes-1)/summaryPartBytes)
}

// partOf is the part of n a client's report goes in.
func partOf(client string, n int) int {
	if n <= 1 {
		return 0
	}
	h := fnv.New32a()
	h.Write([]byte(client))
	return int(h.Sum32() % uint32(n))
}

// reportSync writes this server's summaries and reads the others'.
type reportSync struct {
	cli      *clientv3.Client
	acks     *Acks
	presence *presence.Table
	// presenceSent is what the store holds of this server's presence
	// (run's alone); presenceRead the others', cached.
	presenceSent map[string]presenceValue
	presenceRead remotePresence
	active       *activeRollouts
	id           string // this server's
	part         int    // clients in one part of a summary at most (summaryPart)
	log          *slog.Logger
	stop         context.CancelFunc
	wg           sync.WaitGroup
	mu           sync.Mutex
	remote       map[string]remoteReports // ns → the others' summaries, cached
	all          remoteSummaries          // every namespace's, cached (the monitor)

	// The running rollouts' partials (partials.go): counted with counter,
	// a client gone past liveness; what the store holds of this server's
	// (run's alone); the others', cached; when each client connected but
	// unheard was first noticed; the clients heard, as of the last write.
	counter      *controller.Counter
	liveness     time.Duration
	partialsSent map[string]writtenPartials
	partialsRead map[string]readPartials
	unheardSince map[string]time.Time
	heard        map[string]bool
	own          map[string]ownPartials // ns → this server's partials as last counted
}

type remoteSummaries struct {
	at        time.Time
	summaries []nsSummary
}

// nsSummary is another server's summary of one namespace.
type nsSummary struct {
	ns string
	summary
}

// writtenSummary is what this server last wrote of a part of a
// namespace's summary.
type writtenSummary struct {
	ns          string
	body, shape []byte // the reports; without the times heard
	at          time.Time
	clients     int
	evicted     *controlplane.Evictions
}

type remoteReports struct {
	at      time.Time
	reports []controller.Report
}

// summary is what one server writes of one namespace (of one part: Part
// of Parts, 0 of 1 when whole).
type summary struct {
	Server string    `json:"server"`
	At     time.Time `json:"at"`
	// Truncated is the clients a summary left out: only servers before
	// summaries had parts wrote it; a rollout holds while one says so.
	Truncated int `json:"truncated,omitempty"`
	// Evicted is the namespace's pairs the server's ack table dropped to
	// make room (its last at Evicted.Last): a rollout started before
	// that holds (controller.Config.Missing).
	Evicted *controlplane.Evictions `json:"evicted,omitempty"`
	Part    int                     `json:"part,omitempty"`
	Parts   int                     `json:"parts,omitempty"`
	Reports []controller.Report     `json:"reports"`
}

// summaryJSON is a summary as the store keeps it: the SDK version most of
// its clients said is named once (SDKVersion), not in each report, so
// that a fleet of one version costs a summary no bytes a client
// (summaryPart); a report of another version names its own, and
// one whose client said none names noVersion.
type summaryJSON struct {
	Server     string                  `json:"server"`
	At         time.Time               `json:"at"`
	Truncated  int                     `json:"truncated,omitempty"`
	Evicted    *controlplane.Evictions `json:"evicted,omitempty"`
	Part       int                     `json:"part,omitempty"`
	Parts      int                     `json:"parts,omitempty"`
	SDKVersion string                  `json:"sdk_version,omitempty"`
	Reports    []controller.Report     `json:"reports"`
}

// noVersion is a report's SDK version in a summary that names one, for a
// client that said none: no SDK version takes it (wire.ValidSDKVersion).
const noVersion = "-"

func (s summary) MarshalJSON() ([]byte, error) {
	j := summaryJSON{Server: s.Server, At: s.At, Truncated: s.Truncated, Evicted: s.Evicted, Part: s.Part, Parts: s.Parts,
		SDKVersion: commonVersion(s.Reports), Reports: s.Reports}
	if j.SDKVersion != "" {
		j.Reports = slices.Clone(s.Reports)
		for i := range j.Reports {
			switch j.Reports[i].SDKVersion {
			case j.SDKVersion:
				j.Reports[i].SDKVersion = ""
			case "":
				j.Reports[i].SDKVersion = noVersion
			}
		}
	}
	return json.Marshal(j)
}

func (s *summary) UnmarshalJSON(data []byte) error {
	var j summaryJSON
	if err := json.Unmarshal(data, &j); err != nil {
		return err
	}
	*s = summary{Server: j.Server, At: j.At, Truncated: j.Truncated, Evicted: j.Evicted, Part: j.Part, Parts: j.Parts, Reports: j.Reports}
	for i := range s.Reports {
		switch s.Reports[i].SDKVersion {
		case "":
			s.Reports[i].SDKVersion = j.SDKVersion
		case noVersion:
			s.Reports[i].SDKVersion = ""
		}
	}
	return nil
}

// commonVersion is the SDK version most of reports said ("" when none
// said one); of two as common, the lesser string, so that a summary
// written again is the same.
func commonVersion(reports []controller.Report) string {
	counts := make(map[string]int)
	best := ""
	for _, r := range reports {
		if r.SDKVersion == "" {
			continue
		}
		counts[r.SDKVersion]++
		if n, b := counts[r.SDKVersion], counts[best]; n > b || n == b && r.SDKVersion < best {
			best = r.SDKVersion
		}
	}
	return best
}

func newReportSync(cli *clientv3.Client, acks *Acks, pres *presence.Table, active *activeRollouts, id string, liveness time.Duration, log *slog.Logger) *reportSync {
	r := makeReportSync(cli, acks, pres, active, id, liveness, log)
	ctx, cancel := context.WithCancel(context.Background())
	r.stop = cancel
	r.wg.Add(1)
	go func() { defer r.wg.Done(); r.run(ctx) }()
	return r
}

// makeReportSync returns a reportSync that writes nothing until its
// write is called (newReportSync runs it).
func makeReportSync(cli *clientv3.Client, acks *Acks, pres *presence.Table, active *activeRollouts, id string, liveness time.Duration, log *slog.Logger) *reportSync {
	return &reportSync{cli: cli, acks: acks, presence: pres, active: active, id: id, part: summaryPart, log: log, stop: func() {},
		remote: make(map[string]remoteReports), presenceSent: make(map[string]presenceValue), counter: controller.NewCounter(), liveness: liveness,
		partialsSent: make(map[string]writtenPartials), partialsRead: make(map[string]readPartials), unheardSince: make(map[string]time.Time),
		own: make(map[string]ownPartials)}
}

func (r *reportSync) close() {
	r.stop()
	r.wg.Wait()
}

// run writes the summaries of the namespaces with a running rollout.
func (r *reportSync) run(ctx context.Context) {
	var lease clientv3.LeaseID
	written := make(map[string]writtenSummary)
	parts := make(map[string]int)
	var expired time.Time
	var evicted int64 // the ack table's evictions, as last logged
	tick := time.NewTicker(reportsEvery)
	defer tick.Stop()
	counts := time.NewTicker(partialsEvery) // the running rollouts' partials, between the writes
	defer counts.Stop()
	defer func() {
		if lease != 0 {
			rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
			_, _ = r.cli.Revoke(rctx, lease)
			cancel()
		}
	}()
	for {
		select {
		case <-ctx.Done():
			return
		case <-counts.C:
			if lease != 0 && r.active.any() {
				if err := r.writeCounts(ctx, lease); err != nil && ctx.Err() == nil {
					r.log.Debug("control: writing the rollouts' partials (again at the next write)", "err", err)
				}
			}
			continue
		case <-tick.C:
		}
		if now := time.Now(); now.Sub(expired) >= expireEvery {
			expired = now
			running := make(map[string]bool)
			for _, ns := range r.active.namespaces() {
				running[ns] = true
			}
			if n := r.acks.expire(now, func(ns string) bool { return running[ns] }); n > 0 {
				r.log.Debug("control: clients unheard past their expiry left the ack table", "clients", n)
			}
			if n := r.acks.Evicted(); n > evicted {
				evicted = n
				r.log.Warn("control: the ack table is full; the clients heard longest ago left it", "evicted", n)
			}
		}
		if err := r.write(ctx, &lease, written, parts); err != nil && ctx.Err() == nil {
			r.log.Warn("control: writing the rollout reports' summary", "err", err)
			lease = 0 // take a new one: the old may have expired
			clear(written)
			clear(parts)
			clear(r.presenceSent)
			clear(r.partialsSent)
		}
	}
}

// write writes what changed of this server's summaries (written: what the
// store holds, by key; parts: how many parts each namespace's takes).
func (r *reportSync) write(ctx context.Context, lease *clientv3.LeaseID, written map[string]writtenSummary, parts map[string]int) error {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	all := r.acks.ByNamespace()
	present := r.presence.Entries()
	if len(all) == 0 && len(present) == 0 {
		clear(written)
		clear(parts)
		clear(r.presenceSent)
		clear(r.partialsSent)
		if *lease != 0 { // the summaries and the presence go with it
			_, err := r.cli.Revoke(ctx, *lease)
			*lease = 0
			return err
		}
		return nil
	}
	if *lease == 0 {
		g, err := r.cli.Grant(ctx, reportsTTL)
		if err != nil {
			return err
		}
		*lease = g.ID
		// What the store held went with the old lease.
		clear(r.presenceSent)
		clear(r.partialsSent)
	} else if _, err := r.cli.KeepAliveOnce(ctx, *lease); err != nil {
		return err
	}
	running := make(map[string]bool)
	for _, ns := range r.active.namespaces() {
		running[ns] = true
	}
	now := time.Now()
	keep := make(map[string]bool) // the keys of this round's parts
	for ns, reports := range all {
		if running[ns] {
			// While a rollout runs its clients are counted in partials
			// (partials.go): the summary stays as last written, for the
			// monitor, and says which servers hold reports of it.
			for key, w := range written {
				if w.ns == ns {
					keep[key] = true
				}
			}
			continue
		}
		n := summaryParts(reports, r.part)
		parts[ns] = n
		byPart := make([][]controller.Report, n)
		for _, rep := range reports {
			k := partOf(rep.ClientID, n)
			byPart[k] = append(byPart[k], rep)
		}
		var evicted *controlplane.Evictions
		if e := r.acks.EvictedOf(ns); e.N > 0 {
			evicted = &e
		}
		for k, reps := range byPart {
			key := summaryKey(ns, r.id, k, n)
			keep[key] = true
			last := written[key]
			// A client new to the summary goes at once, rollout or not: a
			// rollout started on another server a moment later takes its
			// first cut over it.
			fresh := len(reps) != last.clients || !evicted.Equal(last.evicted)
			if now.Sub(last.at) < idleReportsEvery && !fresh {
				continue
			}
			s := summary{Server: r.id, Evicted: evicted, Reports: reps}
			if n > 1 {
				s.Part, s.Parts = k, n
			}
			slices.SortFunc(s.Reports, func(x, y controller.Report) int { return strings.Compare(x.ClientID, y.ClientID) })
			body, err := json.Marshal(s.Reports)
			if err != nil {
				return err
			}
			if bytes.Equal(body, last.body) && !fresh {
				continue
			}
			shape := reportShape(s.Reports)
			if now.Sub(last.at) < idleRefresh && bytes.Equal(shape, last.shape) && !fresh {
				continue // only the times heard moved: refreshed less often
			}
			s.At = now.UTC()
			data, err := json.Marshal(s)
			if err != nil {
				return err
			}
			if _, err := r.cli.Put(ctx, key, string(data), clientv3.WithLease(*lease)); err != nil {
				return err
			}
			written[key] = writtenSummary{ns: ns, body: body, shape: shape, at: now, clients: len(reps), evicted: evicted}
		}
	}
	for key, w := range written {
		if keep[key] {
			continue
		}
		// Its clients left the table, or moved to another part (written
		// above).
		if _, err := r.cli.Delete(ctx, key); err != nil {
			return err
		}
		delete(written, key)
		if _, ok := all[w.ns]; !ok {
			delete(parts, w.ns)
		}
	}
	if err := r.writePartials(ctx, *lease, all, present); err != nil {
		return err
	}
	if err := r.writePresence(ctx, *lease, present); err != nil {
		// What the presence's batches wrote stays written (presenceSent),
		// and the rest goes at the next write: a fleet's presence that
		// takes longer than one write (100,000 clients' keys) must not
		// take the summaries' lease, and the summaries, down with it.
		r.log.Warn("control: writing the presence (the rest at the next write)", "err", err)
	}
	return nil
}

// reportShape is reports without the times heard.
func reportShape(reports []controller.Report) []byte {
	var b bytes.Buffer
	for _, r := range reports {
		fmt.Fprintf(&b, "%s %d %d %s %d %d %t %s\n", r.ClientID, r.Acked, r.Nacked, r.Rollout, r.Served, r.Would, r.NackedRollout, r.SDKVersion)
	}
	return b.Bytes()
}

// summaries returns every other server's summaries, of every namespace
// (read at most every half second).
func (r *reportSync) summaries(ctx context.Context) ([]nsSummary, error) {
	r.mu.Lock()
	cached := r.all
	r.mu.Unlock()
	if !cached.at.IsZero() && time.Since(cached.at) <= reportsEvery/2 {
		return cached.summaries, nil
	}
	prefix := RolloutRoot + "reports/"
	resp, err := r.cli.Get(ctx, prefix, clientv3.WithPrefix())
	if err != nil {
		return nil, fmt.Errorf("control: the report summaries: %w", err)
	}
	cached = remoteSummaries{at: time.Now()}
	for _, kv := range resp.Kvs {
		rest := strings.TrimPrefix(string(kv.Key), prefix)
		i := strings.LastIndexByte(rest, '/')
		if i < 0 || keyServer(rest) == r.id {
			continue
		}
		s := nsSummary{ns: rest[:i]}
		if err := json.Unmarshal(kv.Value, &s.summary); err != nil {
			r.log.Warn("control: a report summary does not decode", "key", string(kv.Key), "err", err)
			continue
		}
		cached.summaries = append(cached.summaries, s)
	}
	r.mu.Lock()
	r.all = cached
	r.mu.Unlock()
	return cached.summaries, nil
}

// reports returns the reports of ns: this server's table merged with the
// other servers' summaries (read at most every half second).
func (r *reportSync) reports(ctx context.Context, ns string) ([]controller.Report, error) {
	local := r.acks.Of(ns)
	cached, err := r.remoteOf(ctx, ns)
	if err != nil {
		return nil, err
	}
	if len(cached.reports) > 0 {
		byID := make(map[string]int, len(local)+len(cached.reports))
		for i, rep := range local {
			byID[rep.ClientID] = i
		}
		for _, rep := range cached.reports {
			if i, ok := byID[rep.ClientID]; ok {
				local[i].Merge(rep)
				continue
			}
			byID[rep.ClientID] = len(local)
			local = append(local, rep)
		}
	}
	// A client connected to a server (its presence live, confirmed by
	// that server's data plane or its relay's presence reports) is heard
	// now: its liveness is its connection, not its reports' repeats, so
	// a summary need not be rewritten for the times heard alone. So is a
	// client whose presence is stale (behind a relay the server no longer
	// hears, or on a stream unconfirmed): connected as far as anyone
	// knows, its missing report holds its stage, up to the stage's
	// timeout, rather than letting it pass unheard.
	present, err := r.fleetPresence(ctx)
	if err != nil {
		return nil, err
	}
	now := time.Now()
	for i := range local {
		if e, ok := present[local[i].ClientID]; ok && e.State.Connected() {
			local[i].Seen = later(local[i].Seen, now)
		}
	}
	return local, nil
}

// forget drops the others' summaries of ns read so far: the next read
// is the store's (a rollout's start takes its first cut over the
// clients heard last).
func (r *reportSync) forget(ns string) {
	r.mu.Lock()
	delete(r.remote, ns)
	r.mu.Unlock()
}

// missing is controller.Config.Missing: the reports of ns this server's
// table dropped, and those the others' partials of it say their tables
// dropped, since a rollout's start.
func (r *reportSync) missing(ctx context.Context, ns string, since time.Time) (int64, string) {
	n, why := r.acks.Missing(ctx, ns, since)
	var whys []string
	if n > 0 {
		whys = append(whys, "server "+r.id+": "+why)
	}
	m, others, err := r.partialsMissing(ctx, ns, since)
	if err != nil {
		// Not known to be missing: the step's own read of the partials
		// fails the same way and decides nothing.
		return n, strings.Join(whys, "; ")
	}
	return n + m, strings.Join(append(whys, others...), "; ")
}

// remoteOf returns the other servers' summaries of ns, read at most every
// half second.
func (r *reportSync) remoteOf(ctx context.Context, ns string) (remoteReports, error) {
	r.mu.Lock()
	cached, ok := r.remote[ns]
	r.mu.Unlock()
	if !ok || time.Since(cached.at) > reportsEvery/2 {
		resp, err := r.cli.Get(ctx, reportsPrefix(ns), clientv3.WithPrefix())
		if err != nil {
			return remoteReports{}, fmt.Errorf("control: the rollout reports of %q: %w", ns, err)
		}
		cached = remoteReports{at: time.Now()}
		for _, kv := range resp.Kvs {
			if keyServer(string(kv.Key)) == r.id {
				continue
			}
			var s summary
			if err := json.Unmarshal(kv.Value, &s); err != nil {
				r.log.Warn("control: a rollout report summary does not decode", "key", string(kv.Key), "err", err)
				continue
			}
			cached.reports = append(cached.reports, s.Reports...)
		}
		r.mu.Lock()
		dropUnasked(r.remote, func(rr remoteReports) time.Time { return rr.at })
		r.remote[ns] = cached
		r.mu.Unlock()
	}
	return cached, nil
}

// dropUnasked deletes the entries of a cache by namespace read more than
// a minute ago (at): namespaces no longer asked for.
func dropUnasked[T any](cache map[string]T, at func(T) time.Time) {
	for ns, v := range cache {
		if time.Since(at(v)) > time.Minute {
			delete(cache, ns)
		}
	}
}

func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}
