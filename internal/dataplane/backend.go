package dataplane

import (
	"context"
	"time"

	"github.com/holdfast-dev/holdfast/transport"
)

// backend is what the data-plane handlers read: the in-memory MVCC store
// of the reference server, or a relay's Follower. Every method is safe for
// concurrent use; register callbacks run under the backend's lock, so
// that a watcher sees every later change.
type Backend interface {
	// Info returns the store id, the cursor every namespace served is
	// complete up to, and the compaction point.
	Info() (id string, head, compact int64)
	NsRevision(ns string) (int64, bool)
	Snapshot(ns string) (Snapshot, error)
	Subscribe(ns string, since int64, register func(Subscription)) (Subscription, error)
	SubscribeMany(reqs []SinceReq, register func(sub Subscription, names []string)) (Subscription, []transport.NamespaceEndedBody)
	Generation() uint64
	// known returns the acks of namespaces the backend serves, in place;
	// the origin's also drops acks above its head (store.known).
	Known(acks []transport.Ack) []transport.Ack
	// freshness says how long ago the data of names was last confirmed
	// by the backend's upstream (the oldest of them), and whether it is
	// not being confirmed right now. The MVCC store is the origin: its
	// data is current by definition.
	Freshness(names ...string) (age time.Duration, unconfirmed bool)
	// demand is called before a request reads reqs: a relay starts
	// following the namespaces it does not yet and waits (within ctx, and
	// a bound of its own) until each has data and its cursor reaches
	// since. It returns the namespaces it refuses, each with a
	// *RefusedError.
	Demand(ctx context.Context, reqs []SinceReq) map[string]error
}

// freshness: the origin's data is always current.
func (st *store) Freshness(...string) (time.Duration, bool) { return 0, false }

// demand: the origin serves what it has.
func (st *store) Demand(context.Context, []SinceReq) map[string]error { return nil }
