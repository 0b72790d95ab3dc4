package control

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

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
	// maxSummaryClients bounds one summary: the newest-heard clients are
	// kept (a bound one server's clients cannot pass; etcd's request limit
	// holds it at ~60 bytes a client).
	maxSummaryClients = 20_000
)

func reportsPrefix(ns string) string { return RolloutRoot + "reports/" + ns + "/" }

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
	log          *slog.Logger
	stop         context.CancelFunc
	wg           sync.WaitGroup
	mu           sync.Mutex
	remote       map[string]remoteReports // ns → the others' summaries, cached
	all          remoteSummaries          // every namespace's, cached (the monitor)
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

// writtenSummary is what this server last wrote of a namespace.
type writtenSummary struct {
	body, shape []byte // the reports; without the times heard
	at          time.Time
}

type remoteReports struct {
	at      time.Time
	reports []controller.Report
}

// summary is what one server writes of one namespace.
type summary struct {
	Server    string              `json:"server"`
	At        time.Time           `json:"at"`
	Truncated int                 `json:"truncated,omitempty"` // clients left out (past maxSummaryClients)
	Reports   []controller.Report `json:"reports"`
}

// summaryJSON is a summary as the store keeps it: the SDK version most of
// its clients said is named once (SDKVersion), not in each report, so
// that a fleet of one version costs a summary no bytes a client
// (maxSummaryClients); a report of another version names its own, and
// one whose client said none names noVersion.
type summaryJSON struct {
	Server     string              `json:"server"`
	At         time.Time           `json:"at"`
	Truncated  int                 `json:"truncated,omitempty"`
	SDKVersion string              `json:"sdk_version,omitempty"`
	Reports    []controller.Report `json:"reports"`
}

// noVersion is a report's SDK version in a summary that names one, for a
// client that said none: no SDK version takes it (wire.ValidSDKVersion).
const noVersion = "-"

func (s summary) MarshalJSON() ([]byte, error) {
	j := summaryJSON{Server: s.Server, At: s.At, Truncated: s.Truncated, SDKVersion: commonVersion(s.Reports), Reports: s.Reports}
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
	*s = summary{Server: j.Server, At: j.At, Truncated: j.Truncated, Reports: j.Reports}
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

func newReportSync(cli *clientv3.Client, acks *Acks, pres *presence.Table, active *activeRollouts, id string, log *slog.Logger) *reportSync {
	ctx, cancel := context.WithCancel(context.Background())
	r := &reportSync{cli: cli, acks: acks, presence: pres, active: active, id: id, log: log, stop: cancel, remote: make(map[string]remoteReports),
		presenceSent: make(map[string]presenceValue)}
	r.wg.Add(1)
	go func() { defer r.wg.Done(); r.run(ctx) }()
	return r
}

func (r *reportSync) close() {
	r.stop()
	r.wg.Wait()
}

// run writes the summaries of the namespaces with a running rollout.
func (r *reportSync) run(ctx context.Context) {
	var lease clientv3.LeaseID
	written := make(map[string]writtenSummary)
	var expired time.Time
	var evicted int64 // the ack table's evictions, as last logged
	tick := time.NewTicker(reportsEvery)
	defer tick.Stop()
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
		if err := r.write(ctx, &lease, written); err != nil && ctx.Err() == nil {
			r.log.Warn("control: writing the rollout reports' summary", "err", err)
			lease = 0 // take a new one: the old may have expired
			clear(written)
			clear(r.presenceSent)
		}
	}
}

func (r *reportSync) write(ctx context.Context, lease *clientv3.LeaseID, written map[string]writtenSummary) error {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	all := r.acks.ByNamespace()
	present := r.presence.Entries()
	if len(all) == 0 && len(present) == 0 {
		clear(written)
		clear(r.presenceSent)
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
		clear(r.presenceSent) // what the store held went with the old lease
	} else if _, err := r.cli.KeepAliveOnce(ctx, *lease); err != nil {
		return err
	}
	running := make(map[string]bool)
	for _, ns := range r.active.namespaces() {
		running[ns] = true
	}
	now := time.Now()
	for ns, reports := range all {
		last := written[ns]
		if !running[ns] && now.Sub(last.at) < idleReportsEvery {
			continue
		}
		s := summary{Server: r.id, Reports: reports}
		if len(reports) > maxSummaryClients {
			s.Reports, s.Truncated = reports[:maxSummaryClients], len(reports)-maxSummaryClients
			r.log.Warn("control: a report summary is truncated", "ns", ns, "left_out", s.Truncated)
		}
		slices.SortFunc(s.Reports, func(x, y controller.Report) int { return strings.Compare(x.ClientID, y.ClientID) })
		body, err := json.Marshal(s.Reports)
		if err != nil {
			return err
		}
		if bytes.Equal(body, last.body) {
			continue
		}
		shape := reportShape(s.Reports)
		if !running[ns] && now.Sub(last.at) < idleRefresh && bytes.Equal(shape, last.shape) {
			continue // only the times heard moved: refreshed less often
		}
		s.At = now.UTC()
		data, err := json.Marshal(s)
		if err != nil {
			return err
		}
		if _, err := r.cli.Put(ctx, reportsPrefix(ns)+r.id, string(data), clientv3.WithLease(*lease)); err != nil {
			return err
		}
		written[ns] = writtenSummary{body: body, shape: shape, at: now}
	}
	for ns := range written {
		if _, ok := all[ns]; !ok { // its clients left the table
			if _, err := r.cli.Delete(ctx, reportsPrefix(ns)+r.id); err != nil {
				return err
			}
			delete(written, ns)
		}
	}
	return r.writePresence(ctx, *lease, present)
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
		if i < 0 || rest[i+1:] == r.id {
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
	r.mu.Lock()
	cached, ok := r.remote[ns]
	r.mu.Unlock()
	if !ok || time.Since(cached.at) > reportsEvery/2 {
		resp, err := r.cli.Get(ctx, reportsPrefix(ns), clientv3.WithPrefix())
		if err != nil {
			return nil, fmt.Errorf("control: the rollout reports of %q: %w", ns, err)
		}
		cached = remoteReports{at: time.Now()}
		for _, kv := range resp.Kvs {
			if strings.HasSuffix(string(kv.Key), "/"+r.id) {
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
		for other, rr := range r.remote { // namespaces no longer asked for
			if time.Since(rr.at) > time.Minute {
				delete(r.remote, other)
			}
		}
		r.remote[ns] = cached
		r.mu.Unlock()
	}
	if len(cached.reports) == 0 {
		return local, nil
	}
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
	return local, nil
}
