package control

import (
	"container/list"
	"context"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/holdfast-dev/holdfast/controlapi"
	"github.com/holdfast-dev/holdfast/internal/rollout/controller"
	"github.com/holdfast-dev/holdfast/transport"
)

// DefaultMaxAckEntries bounds the ack table: (client, namespace) pairs.
const DefaultMaxAckEntries = 200_000

// ClientState is one client's report on one namespace: an entry of GET
// /control/clients.
type ClientState = controlapi.ClientState

type ackKey struct{ client, ns string }

// ackEntry is one pair's report, folded by controller.Report.Observe
// (rep.Seen: when it was last heard).
type ackEntry struct {
	key ackKey
	rep controller.Report
}

// maxNackError bounds the error kept of a nack: the table's memory is
// bounded by its entries times this.
const maxNackError = 256

// Acks is the table of what clients reported to this server (directly or
// through relays): soft state, rebuilt from the clients' next reports
// after a restart. It holds at most max pairs; when full, the pair heard
// from longest ago makes room (a list in the order heard, so that room is
// made at once, whatever the table's size). It implements
// transport.Acker, transport.BatchAcker and wire.RelayAcker, so that
// the data plane hands it its acks.
type Acks struct {
	mu    sync.Mutex
	m     map[ackKey]*list.Element // of *ackEntry, most recently heard at the front
	order *list.List
	max   int
	now   func() time.Time
}

// NewAcks returns an empty table of at most max pairs.
func NewAcks(max int) *Acks {
	return &Acks{m: make(map[ackKey]*list.Element), order: list.New(), max: max, now: time.Now}
}

// Ack records one ack or nack.
func (a *Acks) Ack(ctx context.Context, ack transport.Ack) error {
	return a.AckBatch(ctx, []transport.Ack{ack})
}

// AckBatch records acks and nacks.
func (a *Acks) AckBatch(_ context.Context, acks []transport.Ack) error {
	now := a.now()
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, ack := range acks {
		k := ackKey{ack.ClientID, ack.Namespace}
		el := a.m[k]
		if el == nil {
			if a.order.Len() >= a.max {
				oldest := a.order.Back()
				delete(a.m, oldest.Value.(*ackEntry).key)
				a.order.Remove(oldest)
			}
			el = a.order.PushFront(&ackEntry{key: k})
			a.m[k] = el
		} else {
			a.order.MoveToFront(el)
		}
		el.Value.(*ackEntry).rep.Observe(&ack, now, maxNackError)
	}
	return nil
}

// How long a pair stays in the table unheard. While a rollout runs in
// its namespace, a connected client reports what it holds once a
// heartbeat (docs/PROTOCOL.md, "When a client reports"), so a pair unheard
// for runningAckExpiry, far past any liveness window, is a client gone.
// Outside rollouts a client is heard at its changes only, so its pair
// stays idleAckExpiry, for the monitor (/control/clients).
const (
	runningAckExpiry = 10 * time.Minute
	idleAckExpiry    = 24 * time.Hour
)

// expire drops the pairs heard before now minus their expiry; running
// reports whether a namespace has a rollout running. It visits only the
// pairs heard before now-runningAckExpiry (the table is in the order
// heard), and returns how many it dropped.
func (a *Acks) expire(now time.Time, running func(ns string) bool) int {
	a.mu.Lock()
	defer a.mu.Unlock()
	dropped := 0
	for el := a.order.Back(); el != nil; {
		e := el.Value.(*ackEntry)
		age := now.Sub(e.rep.Seen)
		if age <= runningAckExpiry {
			break
		}
		prev := el.Prev()
		if age > idleAckExpiry || running(e.key.ns) {
			delete(a.m, e.key)
			a.order.Remove(el)
			dropped++
		}
		el = prev
	}
	return dropped
}

// AckRelayed records acks a relay forwards for its clients.
func (a *Acks) AckRelayed(ctx context.Context, _ string, acks []transport.Ack) error {
	return a.AckBatch(ctx, acks)
}

// Clients returns the table's entries (of namespace ns, or all when ns is
// empty), sorted by client and namespace, with the head each namespace
// has by revision (0: unknown).
func (a *Acks) Clients(ns string, revision func(ns string) int64) []ClientState {
	a.mu.Lock()
	out := make([]ClientState, 0, len(a.m))
	for k, el := range a.m {
		if ns != "" && k.ns != ns {
			continue
		}
		e := el.Value.(*ackEntry)
		out = append(out, ClientState{ClientID: k.client, Namespace: k.ns, AckedRevision: e.rep.Acked,
			NackedRevision: e.rep.Nacked, NackError: e.rep.NackError, UpdatedAt: e.rep.Seen})
	}
	a.mu.Unlock()
	for i := range out {
		c := &out[i]
		c.HeadRevision = revision(c.Namespace)
		c.Behind = c.AckedRevision < c.HeadRevision
		c.Lag = max(0, c.HeadRevision-c.AckedRevision)
	}
	slices.SortFunc(out, func(x, y ClientState) int {
		if c := strings.Compare(x.ClientID, y.ClientID); c != 0 {
			return c
		}
		return strings.Compare(x.Namespace, y.Namespace)
	})
	return out
}
