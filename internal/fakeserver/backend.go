package fakeserver

import (
	"context"
	"time"

	"github.com/holdfast-dev/holdfast/transport"
)

// backend is what the data-plane handlers read: the in-memory MVCC store
// of the reference server, or a relay's Follower. Every method is safe for
// concurrent use; register callbacks run under the backend's lock, so
// that a watcher sees every later change.
type backend interface {
	// info returns the store id, the cursor every namespace served is
	// complete up to, and the compaction point.
	info() (id string, head, compact int64)
	nsRevision(ns string) (int64, bool)
	snapshot(ns string) (snapshot, error)
	subscribe(ns string, since int64, register func(subscription)) (subscription, error)
	subscribeMany(reqs []sinceReq, register func(sub subscription, names []string)) (subscription, []transport.NamespaceEndedBody)
	generation() uint64
	// known returns the acks of namespaces the backend serves, in place;
	// the origin's also drops acks above its head (store.known).
	known(acks []transport.Ack) []transport.Ack
	// freshness says how long ago the data of names was last confirmed
	// by the backend's upstream (the oldest of them), and whether it is
	// not being confirmed right now. The MVCC store is the origin: its
	// data is current by definition.
	freshness(names ...string) (age time.Duration, unconfirmed bool)
	// demand is called before a request reads reqs: a relay starts
	// following the namespaces it does not yet and waits (within ctx, and
	// a bound of its own) until each has data and its cursor reaches
	// since. It returns the namespaces it refuses, each with a
	// *RefusedError.
	demand(ctx context.Context, reqs []sinceReq) map[string]error
}

// freshness: the origin's data is always current.
func (st *store) freshness(...string) (time.Duration, bool) { return 0, false }

// demand: the origin serves what it has.
func (st *store) demand(context.Context, []sinceReq) map[string]error { return nil }
