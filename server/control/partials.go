package control

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/holdfast-dev/holdfast/internal/controlplane"
	"github.com/holdfast-dev/holdfast/internal/presence"
	"github.com/holdfast-dev/holdfast/internal/rollout/controller"
)

// How a running rollout's stage is counted across servers
// (docs/ROLLOUTS.md, "How reports reach the controller"): while a rollout
// runs, every server counts its own clients' reports of the namespace, as
// the controller would, per source (each relay its clients' presence
// names, and the server itself for those connected to it directly or
// through a relay that reports no presence), and writes those partials
// (controller.Partial) in one key, PartialsRoot + NS + "/" + SERVER, under
// the lease of its summaries: at most every partialsEvery, and only when
// one changed. What the store carries of a rollout grows with the relays and
// servers, not with the clients: the leader sums the partials, the later
// of two of one source (a relay that moved, a server killed while its
// lease lives) alone counting. The per-client summaries of a namespace
// (reports.go) are not rewritten while a rollout runs in it.
const PartialsRoot = RolloutRoot + "partials/"

// unheardGrace is how long a client connected through a source but not
// heard from holds a stage (Partial.Unheard): long enough for a relay
// that moved here to hand on what its clients reported, not forever for
// a client that never reports.
const unheardGrace = 10 * time.Second

// partialsEvery is how often, at most, a server writes its partials, and
// the leader reads the others': a report reaches the controller within
// about two of them.
const partialsEvery = 250 * time.Millisecond

func partialsPrefix(ns string) string { return PartialsRoot + ns + "/" }

// partialRecord is one server's partials of one namespace's running
// rollout.
type partialRecord struct {
	Server  string    `json:"server"`
	At      time.Time `json:"at"`
	Rollout string    `json:"rollout"`
	// Evicted is the namespace's pairs the server's ack table dropped to
	// make room (controller.Config.Missing).
	Evicted  *controlplane.Evictions `json:"evicted,omitempty"`
	Partials []controller.Partial    `json:"partials"`
}

// writtenPartials is what this server last wrote of a namespace's
// partials.
type writtenPartials struct {
	shape []byte // the record without the times counted
	at    time.Time
}

// countPartials counts this server's clients of st's namespace, as of
// now, per source (keep: the count decides; see controller.Counter).
// heard is every client this server holds a report of, in any namespace;
// present its presence; others the other servers'.
func (r *reportSync) countPartials(st *controller.State, now time.Time, heard map[string]bool, present, others map[string]presence.Entry, keep bool) []controller.Partial {
	bySource := make(map[string][]controller.Report)
	for _, rep := range r.acks.Of(st.Namespace) {
		e, here := present[rep.ClientID]
		if !here {
			e = presence.Entry{State: presence.Gone}
		}
		if o, ok := others[rep.ClientID]; ok && o.State.Beats(e.State) {
			continue // better elsewhere: it counts there
		}
		if e.State.Connected() {
			// Its liveness is its connection (reports.go, reports).
			rep.Seen = later(rep.Seen, now)
		}
		src := r.sourceOf(e)
		bySource[src] = append(bySource[src], rep)
	}
	unheard := r.unheard(present, heard, now)
	out := make([]controller.Partial, 0, len(bySource))
	for src, reps := range bySource {
		p := r.counter.Count(st, src, reps, now, r.liveness, keep).Bounded()
		p.Unheard = unheard[src]
		out = append(out, p)
	}
	for src, n := range unheard {
		if _, ok := bySource[src]; !ok {
			p := r.counter.Count(st, src, nil, now, r.liveness, keep)
			p.Unheard = n
			out = append(out, p)
		}
	}
	slices.SortFunc(out, func(a, b controller.Partial) int { return strings.Compare(a.Source, b.Source) })
	return out
}

// sourceOf is the source of a client of this server's presence e: the
// relay it is connected through, in that relay's run (two relays that
// give one id are two sources; one that fails over to another server
// stays one), or this server.
func (r *reportSync) sourceOf(e presence.Entry) string {
	switch {
	case e.Relay == "":
		return controller.ServerSource(r.id)
	case e.Epoch == "":
		return e.Relay
	}
	return e.Relay + "@" + e.Epoch
}

// unheard counts, per source, the clients connected to this server (or to
// a relay behind it) of which it holds no report at all, for
// unheardGrace after it first noticed them.
func (r *reportSync) unheard(present map[string]presence.Entry, heard map[string]bool, now time.Time) map[string]int {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make(map[string]int)
	for id := range r.unheardSince {
		if e, ok := present[id]; !ok || e.State != presence.Live || heard[id] {
			delete(r.unheardSince, id)
		}
	}
	for id, e := range present {
		if e.State != presence.Live || heard[id] {
			continue
		}
		since, ok := r.unheardSince[id]
		if !ok {
			since = now
			r.unheardSince[id] = since
		}
		if now.Sub(since) < unheardGrace {
			out[r.sourceOf(e)]++
		}
	}
	return out
}

// writePartials writes what changed of this server's partials of the
// running rollouts (all: its reports, by namespace; present: its
// presence), and deletes those of rollouts no longer running.
func (r *reportSync) writePartials(ctx context.Context, lease clientv3.LeaseID, all map[string][]controller.Report, present map[string]presence.Entry) error {
	heard := make(map[string]bool)
	for _, reports := range all {
		for _, rep := range reports {
			heard[rep.ClientID] = true
		}
	}
	r.mu.Lock()
	r.heard = heard
	r.mu.Unlock()
	return r.putPartials(ctx, lease, heard, func(ns string) bool { return len(all[ns]) > 0 }, present, true)
}

// writeCounts writes what changed of this server's partials between two
// writes (partialsEvery), over what the last write knew of the clients
// heard; it deletes none.
func (r *reportSync) writeCounts(ctx context.Context, lease clientv3.LeaseID) error {
	r.mu.Lock()
	heard := r.heard
	r.mu.Unlock()
	return r.putPartials(ctx, lease, heard, func(string) bool { return false }, r.presence.Entries(), false)
}

// putPartials writes what changed of this server's partials of the running
// rollouts; has reports whether it holds reports of a namespace (its
// partials are written, even empty, so that the leader knows it counted).
// full: delete the keys of rollouts no longer running, and those of
// namespaces of which it holds nothing.
func (r *reportSync) putPartials(ctx context.Context, lease clientv3.LeaseID, heard map[string]bool, has func(ns string) bool, present map[string]presence.Entry, full bool) error {
	states := r.active.states()
	now := time.Now()
	others := make(map[string]presence.Entry)
	if len(states) > 0 {
		var err error
		if others, err = r.othersPresence(ctx); err != nil {
			return err
		}
	}
	keep := make(map[string]bool)
	for _, st := range states {
		key := partialsPrefix(st.Namespace) + r.id
		ps := r.countPartials(st, now, heard, present, others, true)
		r.mu.Lock()
		r.own[st.Namespace] = ownPartials{at: now, version: st.Version, partials: slices.Clone(ps)}
		r.mu.Unlock()
		var evicted *controlplane.Evictions
		if e := r.acks.EvictedOf(st.Namespace); e.N > 0 {
			evicted = &e
		}
		if _, sent := r.partialsSent[key]; len(ps) == 0 && !has(st.Namespace) && evicted == nil && (full || !sent) {
			continue // nothing of it here: no key
		}
		keep[key] = true
		for i := range ps {
			ps[i].At = time.Time{} // set as the record's below: the shape is without
		}
		rec := partialRecord{Server: r.id, Rollout: st.ID, Evicted: evicted, Partials: ps}
		shape, err := json.Marshal(rec)
		if err != nil {
			return err
		}
		if w, ok := r.partialsSent[key]; ok && bytes.Equal(w.shape, shape) && now.Sub(w.at) < idleRefresh {
			continue
		}
		rec.At = now.UTC()
		for i := range rec.Partials {
			rec.Partials[i].At = rec.At
		}
		data, err := json.Marshal(rec)
		if err != nil {
			return err
		}
		if _, err := r.cli.Put(ctx, key, string(data), clientv3.WithLease(lease)); err != nil {
			return err
		}
		r.partialsSent[key] = writtenPartials{shape: shape, at: now}
	}
	if full {
		r.mu.Lock()
		for ns := range r.own {
			if !slices.ContainsFunc(states, func(st *controller.State) bool { return st.Namespace == ns }) {
				delete(r.own, ns)
			}
		}
		r.mu.Unlock()
	}
	for key := range r.partialsSent {
		if keep[key] || !full {
			continue
		}
		if _, err := r.cli.Delete(ctx, key); err != nil {
			return err
		}
		delete(r.partialsSent, key)
	}
	return nil
}

// partials is controller.Config.Partials: this server's partials of st,
// counted now, and the others' as they last wrote them (read at most
// every partialsEvery). A server that holds reports of st's namespace (a
// summary says so) but wrote no partials of st yet counts as a stale
// source: the stage waits for it.
func (r *reportSync) partials(ctx context.Context, st *controller.State) ([]controller.Partial, error) {
	read, err := r.partialRecords(ctx, st.Namespace)
	if err != nil {
		return nil, err
	}
	servers := maps.Clone(read.servers)
	var out []controller.Partial
	for _, rec := range read.records {
		delete(servers, rec.Server)
		if rec.Rollout != st.ID {
			continue // of an earlier rollout: the server counts st at its next write
		}
		out = append(out, rec.Partials...)
	}
	for server := range servers {
		// A source of no stage at all: stale until the server counts.
		out = append(out, controller.Partial{Source: controller.ServerSource(server)})
	}
	// This server's own, as its last write counted them when they are of
	// st and fresh (the write counts every partialsEvery), else now.
	r.mu.Lock()
	heard, others, cached := r.heard, r.presenceRead.entries, r.own[st.Namespace]
	r.mu.Unlock()
	if cached.version == st.Version && time.Since(cached.at) < partialsEvery {
		return append(out, cached.partials...), nil
	}
	own := r.countPartials(st, time.Now(), heard, r.presence.Entries(), others, true)
	return append(out, own...), nil
}

// ownPartials is what this server last counted of a running rollout's
// stage (of its state at version).
type ownPartials struct {
	at       time.Time
	version  int64
	partials []controller.Partial
}

// partialRecords returns the other servers' partial records of ns, and
// the other servers that hold reports of it: those with a summary of it,
// its keys alone read (read at most every partialsEvery).
func (r *reportSync) partialRecords(ctx context.Context, ns string) (readPartials, error) {
	r.mu.Lock()
	cached, ok := r.partialsRead[ns]
	r.mu.Unlock()
	if ok && time.Since(cached.at) <= partialsEvery {
		return cached, nil
	}
	sums, err := r.cli.Get(ctx, reportsPrefix(ns), clientv3.WithPrefix(), clientv3.WithKeysOnly())
	if err != nil {
		return readPartials{}, fmt.Errorf("control: the report summaries of %q: %w", ns, err)
	}
	resp, err := r.cli.Get(ctx, partialsPrefix(ns), clientv3.WithPrefix())
	if err != nil {
		return readPartials{}, fmt.Errorf("control: the rollout partials of %q: %w", ns, err)
	}
	cached = readPartials{at: time.Now(), servers: make(map[string]bool)}
	for _, kv := range sums.Kvs {
		if s := keyServer(string(kv.Key)); s != r.id {
			cached.servers[s] = true
		}
	}
	for _, kv := range resp.Kvs {
		if keyServer(string(kv.Key)) == r.id {
			continue
		}
		var rec partialRecord
		if err := json.Unmarshal(kv.Value, &rec); err != nil {
			r.log.Warn("control: a rollout's partials do not decode", "key", string(kv.Key), "err", err)
			continue
		}
		cached.records = append(cached.records, rec)
	}
	r.mu.Lock()
	dropUnasked(r.partialsRead, func(rp readPartials) time.Time { return rp.at })
	r.partialsRead[ns] = cached
	r.mu.Unlock()
	return cached, nil
}

// readPartials is what partialRecords read of a namespace.
type readPartials struct {
	at      time.Time
	records []partialRecord
	servers map[string]bool // the other servers with a summary of it
}

// othersPresence returns the other servers' presence, read at most every
// ownershipEvery: what says a client not connected here is connected
// elsewhere (and counted there). Older by that much, it counts a client
// that moved twice for as long (in a stage it holds rather than passes),
// and spares etcd a read of every client's presence each half second.
func (r *reportSync) othersPresence(ctx context.Context) (map[string]presence.Entry, error) {
	r.mu.Lock()
	cached := r.presenceRead
	r.mu.Unlock()
	if !cached.at.IsZero() && time.Since(cached.at) <= ownershipEvery {
		return cached.entries, nil
	}
	if _, err := r.fleetPresence(ctx); err != nil {
		return nil, err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.presenceRead.entries, nil
}

// ownershipEvery bounds the age of the others' presence a server counts
// its partials over.
const ownershipEvery = 2 * time.Second

// partialsMissing is what the other servers' partial records of ns say
// their ack tables dropped since.
func (r *reportSync) partialsMissing(ctx context.Context, ns string, since time.Time) (n int64, whys []string, err error) {
	read, err := r.partialRecords(ctx, ns)
	if err != nil {
		return 0, nil, err
	}
	for _, rec := range read.records {
		if e := rec.Evicted; e != nil && e.N > 0 && !e.Last.Before(since) {
			n += e.N
			whys = append(whys, fmt.Sprintf("server %s: %d client report(s) left its full ack table, the last at %s",
				rec.Server, e.N, e.Last.UTC().Format(time.RFC3339)))
		}
	}
	return n, whys, nil
}
