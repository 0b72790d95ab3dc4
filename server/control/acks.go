package control

import (
	"context"
	"time"

	"github.com/holdfast-dev/holdfast/controlapi"
	"github.com/holdfast-dev/holdfast/internal/controlplane"
	"github.com/holdfast-dev/holdfast/internal/presence"
	"github.com/holdfast-dev/holdfast/internal/rollout/controller"
	"github.com/holdfast-dev/holdfast/transport"
)

// DefaultMaxAckEntries bounds the ack table: (client, namespace) pairs.
const DefaultMaxAckEntries = 200_000

// ClientState is one client's report on one namespace: an entry of GET
// /control/clients.
type ClientState = controlapi.ClientState

// maxNackError bounds the error kept of a nack: the table's memory is
// bounded by its entries times this.
const maxNackError = 256

// Acks is the table of what clients reported to this server (directly or
// through relays): controlplane.Reports, which it feeds with the data
// plane's acks (it implements transport.Acker, transport.BatchAcker and
// wire.RelayAcker). The leader's rollouts count it merged with the other
// servers' summaries (reports.go).
type Acks struct {
	*controlplane.Reports
	now  func() time.Time
	prop *propagation // the propagation monitor, fed with the same acks
	// live, when set, is the presence of the clients connected to this
	// server (or to a relay behind it): the propagation of a publish
	// counts only those live at its commit.
	live *presence.Table
}

// NewAcks returns an empty table of at most max pairs.
func NewAcks(max int) *Acks {
	return &Acks{Reports: controlplane.NewReports(max, maxNackError), now: time.Now, prop: newPropagation()}
}

// Ack records one ack or nack.
func (a *Acks) Ack(ctx context.Context, ack transport.Ack) error {
	return a.AckBatch(ctx, []transport.Ack{ack})
}

// AckBatch records acks and nacks.
func (a *Acks) AckBatch(_ context.Context, acks []transport.Ack) error {
	now := a.now()
	a.Observe(acks, now)
	a.prop.observe(acks, now)
	return nil
}

// published starts the propagation monitor's watch of revision rev of
// ns, committed now.
func (a *Acks) published(ns string, rev int64) {
	a.prop.published(ns, rev, a.now(), propagationClients(a, ns))
}

// AckRelayed records acks a relay forwards for its clients.
func (a *Acks) AckRelayed(ctx context.Context, _ string, acks []transport.Ack) error {
	return a.AckBatch(ctx, acks)
}

// EvictedOf returns how many reports of ns the table lost (it dropped
// them to make room) and what the presence table knows lost (clients it
// did not track, outcomes the relays behind it dropped:
// presence.Table.LostOf), with the time of the last: what this server's
// summary says of ns, for the leader to hold ns's rollout. The presence
// table's time is taken up to the next lostGrain: a loss that lasts
// (clients connected that it could not keep) is as of now at every call,
// and would have the summaries written again at every round.
func (a *Acks) EvictedOf(ns string) controlplane.Evictions {
	e := a.Reports.EvictedOf(ns)
	if n, last := a.live.LostOf(ns); n > 0 {
		e.N += n
		if last = last.Truncate(lostGrain).Add(lostGrain); last.After(e.Last) {
			e.Last = last
		}
	}
	return e
}

// lostGrain is the grain of the presence table's losses in a summary:
// a rollout started up to lostGrain after one counts it too (it holds,
// the safe side).
const lostGrain = 30 * time.Second

// Missing is controller.Config.Missing over this server's tables: the
// reports of ns the ack table dropped to make room, and those the
// presence table knows lost (presence.Table.Missing), when the last was
// lost at or after since.
func (a *Acks) Missing(ctx context.Context, ns string, since time.Time) (int64, string) {
	return controller.JoinMissing(a.Reports.Missing, func(_ context.Context, ns string, since time.Time) (int64, string) {
		return a.live.Missing(ns, since, "this server")
	})(ctx, ns, since)
}

// How long a pair stays in the table unheard. A client is heard at its
// changes and once per connection (docs/PROTOCOL.md, "When a client
// reports"): while a rollout runs in its namespace, a pair unheard for
// runningAckExpiry, far past any liveness window, whose client is not
// connected here (its presence neither live nor stale), is a client gone;
// a connected one's stays, as its stage counts it. Outside rollouts a
// pair stays idleAckExpiry, for the monitor (/control/clients).
const (
	runningAckExpiry = 10 * time.Minute
	idleAckExpiry    = 24 * time.Hour
)

// expire drops the pairs heard before now minus their expiry; running
// reports whether a namespace has a rollout running. It returns how many
// it dropped.
func (a *Acks) expire(now time.Time, running func(ns string) bool) int {
	var present map[string]presence.Entry
	if a.live != nil {
		present = a.live.Entries()
	}
	return a.Expire(now, runningAckExpiry, func(ns, client string, age time.Duration) bool {
		if age > idleAckExpiry {
			return true
		}
		e, ok := present[client]
		return running(ns) && !(ok && e.State.Connected())
	})
}
