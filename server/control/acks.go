package control

import (
	"context"
	"slices"
	"strings"
	"sync"
	"time"

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
	acked, nacked int64
	nackErr       string
	at            time.Time
}

// Acks is the table of what clients reported to this server (directly or
// through relays): soft state, rebuilt from the clients' next reports
// after a restart. It holds at most max pairs; when full, the pair heard
// from longest ago makes room. It implements transport.Acker and
// transport.BatchAcker, so that the data plane hands it its acks.
type Acks struct {
	mu  sync.Mutex
	m   map[ackKey]*ackEntry
	max int
	now func() time.Time
}

// NewAcks returns an empty table of at most max pairs.
func NewAcks(max int) *Acks {
	return &Acks{m: make(map[ackKey]*ackEntry), max: max, now: time.Now}
}

// Ack records one ack or nack.
func (a *Acks) Ack(_ context.Context, ack transport.Ack) error {
	return a.AckBatch(context.Background(), []transport.Ack{ack})
}

// AckBatch records acks and nacks.
func (a *Acks) AckBatch(_ context.Context, acks []transport.Ack) error {
	now := a.now()
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, ack := range acks {
		k := ackKey{ack.ClientID, ack.Namespace}
		e := a.m[k]
		if e == nil {
			if len(a.m) >= a.max {
				a.evictLocked()
			}
			e = &ackEntry{}
			a.m[k] = e
		}
		e.at = now
		switch ack.Status {
		case transport.AckRejected:
			if ack.Revision >= e.nacked {
				e.nacked, e.nackErr = ack.Revision, ack.Error
			}
		case transport.AckApplied:
			e.acked = max(e.acked, ack.Revision)
		}
	}
	return nil
}

// AckRelayed records acks a relay forwards for its clients.
func (a *Acks) AckRelayed(ctx context.Context, _ string, acks []transport.Ack) error {
	return a.AckBatch(ctx, acks)
}

// evictLocked drops the pair heard from longest ago.
func (a *Acks) evictLocked() {
	var oldest ackKey
	var at time.Time
	first := true
	for k, e := range a.m {
		if first || e.at.Before(at) {
			oldest, at, first = k, e.at, false
		}
	}
	delete(a.m, oldest)
}

// Clients returns the table's entries (of namespace ns, or all when ns is
// empty), sorted by client and namespace, with the head each namespace
// has by revision (0: unknown).
func (a *Acks) Clients(ns string, revision func(ns string) int64) []ClientState {
	a.mu.Lock()
	out := make([]ClientState, 0, len(a.m))
	for k, e := range a.m {
		if ns != "" && k.ns != ns {
			continue
		}
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
