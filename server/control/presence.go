package control

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/holdfast-dev/holdfast/internal/presence"
)

// How the servers share presence (docs/SERVER.md, "Presence"): each
// server keeps one key per client it knows (connected to it or to a relay
// behind it), PresenceRoot + SERVER + "/" + CLIENT, under the lease of its
// report summaries (reports.go). It writes a key when the client's state
// changes (live, stale, gone with the time it left), at most once a
// second with the summaries, deletes it when the client is forgotten
// (presence.Forget after it left), and a server that dies takes its keys
// with its lease (reportsTTL). A client's connection confirmed again
// costs nothing: only changes are written. Every server reads the
// others' keys to answer /control/clients and status alike.
const PresenceRoot = "/holdfast-presence/"

// presenceOps bounds the operations of one transaction of presence
// writes, well within etcd's --max-txn-ops (128 by default).
const presenceOps = 64

// presenceValue is one client's key.
type presenceValue struct {
	State string    `json:"s"`
	At    time.Time `json:"at"`
	Relay string    `json:"relay,omitempty"`
}

// remotePresence is the other servers' presence, as last read.
type remotePresence struct {
	at      time.Time
	entries map[string]presence.Entry
}

func presenceKey(server, client string) string { return PresenceRoot + server + "/" + client }

// writePresence writes what changed of this server's presence since the
// last write (r.presenceSent: what the store holds), under lease.
func (r *reportSync) writePresence(ctx context.Context, lease clientv3.LeaseID, present map[string]presence.Entry) error {
	type change struct {
		client string
		v      presenceValue
		del    bool
	}
	var changes []change
	for id, e := range present {
		v := presenceValue{State: string(e.State), Relay: e.Relay}
		if old, ok := r.presenceSent[id]; ok && old.State == v.State && old.Relay == v.Relay {
			continue
		}
		v.At = e.At.UTC()
		changes = append(changes, change{client: id, v: v})
	}
	for id := range r.presenceSent {
		if _, ok := present[id]; !ok {
			changes = append(changes, change{client: id, del: true})
		}
	}
	for len(changes) > 0 {
		batch := changes[:min(len(changes), presenceOps)]
		ops := make([]clientv3.Op, 0, len(batch))
		for _, c := range batch {
			if c.del {
				ops = append(ops, clientv3.OpDelete(presenceKey(r.id, c.client)))
				continue
			}
			data, err := json.Marshal(c.v)
			if err != nil {
				return err
			}
			ops = append(ops, clientv3.OpPut(presenceKey(r.id, c.client), string(data), clientv3.WithLease(lease)))
		}
		if _, err := r.cli.Txn(ctx).Then(ops...).Commit(); err != nil {
			return fmt.Errorf("control: writing the presence: %w", err)
		}
		for _, c := range batch {
			if c.del {
				delete(r.presenceSent, c.client)
			} else {
				r.presenceSent[c.client] = c.v
			}
		}
		changes = changes[len(batch):]
	}
	return nil
}

// fleetPresence returns every client's presence across the servers: this
// server's table merged with the others' keys (read at most every half
// second).
func (r *reportSync) fleetPresence(ctx context.Context) (map[string]presence.Entry, error) {
	local := r.presence.Entries()
	r.mu.Lock()
	cached := r.presenceRead
	r.mu.Unlock()
	if cached.at.IsZero() || time.Since(cached.at) > reportsEvery/2 {
		resp, err := r.cli.Get(ctx, PresenceRoot, clientv3.WithPrefix())
		if err != nil {
			return nil, fmt.Errorf("control: the presence: %w", err)
		}
		cached = remotePresence{at: time.Now(), entries: make(map[string]presence.Entry)}
		for _, kv := range resp.Kvs {
			server, client, ok := strings.Cut(strings.TrimPrefix(string(kv.Key), PresenceRoot), "/")
			if !ok || server == r.id {
				continue
			}
			var v presenceValue
			if err := json.Unmarshal(kv.Value, &v); err != nil {
				r.log.Warn("control: a presence key does not decode", "key", string(kv.Key), "err", err)
				continue
			}
			e := presence.Entry{State: presence.State(v.State), At: v.At, Relay: v.Relay}
			if had, ok := cached.entries[client]; ok {
				e = presence.Merge(had, e)
			}
			cached.entries[client] = e
		}
		r.mu.Lock()
		r.presenceRead = cached
		r.mu.Unlock()
	}
	now := time.Now()
	for id, e := range cached.entries {
		if had, ok := local[id]; ok {
			e = presence.Merge(had, e)
		}
		local[id] = e
	}
	for id, e := range local {
		if e.State == presence.Live {
			e.At = now // confirmed by this server, or by one whose lease lives
			local[id] = e
		}
	}
	return local, nil
}
