package control

import (
	"container/list"
	"context"
	"slices"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/holdfast-dev/holdfast/controlapi"
	"github.com/holdfast-dev/holdfast/transport"
)

// DefaultMaxAckEntries bounds the ack table: (client, namespace) pairs.
const DefaultMaxAckEntries = 200_000

// ClientState is one client's report on one namespace: an entry of GET
// /control/clients.
type ClientState = controlapi.ClientState

type ackKey struct{ client, ns string }

type ackEntry struct {
	key           ackKey
	acked, nacked int64
	nackErr       string
	at            time.Time
	// What the client reported of a staged rollout (its latest): the
	// rollout's id, the highest revision it served it at, whether its nack
	// named it, its would-nack.
	rollout       string
	served, would int64
	nackedRollout bool
	wouldErr      string
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
		e := el.Value.(*ackEntry)
		e.at = now
		if ack.Rollout != "" && ack.Rollout != e.rollout {
			e.rollout, e.served, e.would, e.nackedRollout, e.wouldErr = ack.Rollout, 0, 0, false, ""
		}
		switch ack.Status {
		case transport.AckRejected:
			if ack.Revision >= e.nacked {
				e.nacked, e.nackErr = ack.Revision, clip(ack.Error, maxNackError)
			}
			e.nackedRollout = e.nackedRollout || ack.Rollout != ""
		case transport.AckApplied:
			e.acked = max(e.acked, ack.Revision)
			if ack.Rollout != "" {
				e.served = max(e.served, ack.Revision)
			}
		case transport.AckWouldReject:
			if ack.Rollout != "" && ack.Revision >= e.would {
				e.would, e.wouldErr = ack.Revision, clip(ack.Error, maxNackError)
			}
		}
	}
	return nil
}

// clip cuts s to at most n bytes, at a rune's start.
func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
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
		out = append(out, ClientState{ClientID: k.client, Namespace: k.ns, AckedRevision: e.acked,
			NackedRevision: e.nacked, NackError: e.nackErr, UpdatedAt: e.at})
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
