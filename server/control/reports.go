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

	"github.com/holdfast-dev/holdfast/internal/rollout/controller"
)

// How the clients' reports reach the rollout controller across servers
// (docs/SERVER.md, "Rollouts"): every server keeps its clients' reports in
// its ack table, and while a rollout runs on a namespace it writes a
// summary of that namespace's entries to the store, at most once a
// second and only when it changed, under a lease of its own (a server
// that dies takes its summary with it). The leader merges the summaries
// with its own table. An etcd write per server per second per running
// rollout, never one per ack; no server needs another's address.
const (
	reportsEvery = time.Second
	reportsTTL   = 10 // seconds: a summary outlives its server by at most this
	// maxSummaryClients bounds one summary: the newest-heard clients are
	// kept (a bound one server's clients cannot pass; etcd's request limit
	// holds it at ~60 bytes a client).
	maxSummaryClients = 20_000
)

func reportsPrefix(ns string) string { return RolloutRoot + "reports/" + ns + "/" }

// Reports returns the ack table's entries of ns as the controller counts
// them (at most max, the newest heard; 0: all).
func (a *Acks) Reports(ns string, limit int) []controller.Report {
	a.mu.Lock()
	defer a.mu.Unlock()
	var out []controller.Report
	for el := a.order.Front(); el != nil; el = el.Next() { // newest heard first
		e := el.Value.(*ackEntry)
		if e.key.ns != ns {
			continue
		}
		out = append(out, controller.Report{ClientID: e.key.client, Acked: e.acked, Nacked: e.nacked, NackError: e.nackErr,
			Rollout: e.rollout, Served: e.served, NackedRollout: e.nackedRollout, Would: e.would, WouldError: e.wouldErr, Seen: e.at})
		if limit > 0 && len(out) == limit {
			break
		}
	}
	return out
}

// reportSync writes this server's summaries and reads the others'.
type reportSync struct {
	cli    *clientv3.Client
	acks   *Acks
	active *activeRollouts
	id     string // this server's
	log    *slog.Logger
	stop   context.CancelFunc
	wg     sync.WaitGroup
	mu     sync.Mutex
	remote map[string]remoteReports // ns → the others' summaries, cached
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

func newReportSync(cli *clientv3.Client, acks *Acks, active *activeRollouts, id string, log *slog.Logger) *reportSync {
	ctx, cancel := context.WithCancel(context.Background())
	r := &reportSync{cli: cli, acks: acks, active: active, id: id, log: log, stop: cancel, remote: make(map[string]remoteReports)}
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
	written := make(map[string][]byte)
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
		if err := r.write(ctx, &lease, written); err != nil && ctx.Err() == nil {
			r.log.Warn("control: writing the rollout reports' summary", "err", err)
			lease = 0 // take a new one: the old may have expired
			clear(written)
		}
	}
}

func (r *reportSync) write(ctx context.Context, lease *clientv3.LeaseID, written map[string][]byte) error {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	running := r.active.namespaces()
	if len(running) == 0 {
		clear(written)
		if *lease != 0 { // the summaries go with it
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
	} else if _, err := r.cli.KeepAliveOnce(ctx, *lease); err != nil {
		return err
	}
	for _, ns := range running {
		reports := r.acks.Reports(ns, maxSummaryClients+1)
		s := summary{Server: r.id, Reports: reports}
		if len(reports) > maxSummaryClients {
			s.Reports = reports[:maxSummaryClients]
			s.Truncated = len(r.acks.Reports(ns, 0)) - maxSummaryClients
			r.log.Warn("control: a rollout's report summary is truncated", "ns", ns, "left_out", s.Truncated)
		}
		slices.SortFunc(s.Reports, func(x, y controller.Report) int { return strings.Compare(x.ClientID, y.ClientID) })
		body, err := json.Marshal(s.Reports)
		if err != nil {
			return err
		}
		if bytes.Equal(body, written[ns]) {
			continue
		}
		s.At = time.Now().UTC()
		data, err := json.Marshal(s)
		if err != nil {
			return err
		}
		if _, err := r.cli.Put(ctx, reportsPrefix(ns)+r.id, string(data), clientv3.WithLease(*lease)); err != nil {
			return err
		}
		written[ns] = body
	}
	return nil
}

// reports returns the reports of ns: this server's table merged with the
// other servers' summaries (read at most every half second).
func (r *reportSync) reports(ctx context.Context, ns string) ([]controller.Report, error) {
	local := r.acks.Reports(ns, 0)
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
