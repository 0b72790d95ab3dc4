package dataplane

import (
	"context"
	"time"

	"github.com/holdfast-dev/holdfast/internal/wire"
	"github.com/holdfast-dev/holdfast/transport"
)

// Backend is what the data-plane handlers read: the in-memory MVCC store
// of the reference server, or a relay's follower store. Every method is
// safe for concurrent use; register callbacks run under the backend's
// lock, so that a watcher sees every later change. A backend hands every
// change it commits (and every reset, a new generation) to its server's
// Enqueue, under that lock, in order.
type Backend interface {
	// Info returns the store id, the cursor every namespace served is
	// complete up to, and the compaction point.
	Info() (id string, head, compact int64)
	NsRevision(ns string) (int64, bool)
	Snapshot(ns string) (Snapshot, error)
	Subscribe(ns string, since int64, register func(Subscription)) (Subscription, error)
	SubscribeMany(reqs []SinceReq, register func(sub Subscription, names []string)) (Subscription, []wire.NamespaceEndedBody)
	Generation() uint64
	// Known returns the acks of namespaces the backend serves, in place;
	// the origin's also drops acks above its head.
	Known(acks []transport.Ack) []transport.Ack
	// Freshness says how long ago the data of names was last confirmed
	// by the backend's upstream (the oldest of them), and whether it is
	// not being confirmed right now. An origin's store is current by
	// definition.
	Freshness(names ...string) (age time.Duration, unconfirmed bool)
	// Demand is called before a request reads reqs: a relay starts
	// following the namespaces it does not yet and waits (within ctx, and
	// a bound of its own) until each has data and its cursor reaches
	// since. It returns the namespaces it refuses, each with a
	// *RefusedError.
	Demand(ctx context.Context, reqs []SinceReq) map[string]error
}

// A Follower is the Backend of a relay, which follows an upstream: its
// namespaces are each complete up to a cursor of their own (a head move
// is a HubItem of its own), its streams tell the upstream's freshness,
// and each of its confirmations asks the streams for a beat.
type Follower interface {
	Backend
	// StreamState is what a stream reads of its namespaces to tell
	// progress or to weigh a beat.
	StreamState(names ...string) StreamState
}

// StreamState is what a relay's stream reads of its namespaces to tell
// progress or to weigh a beat: the counters, and the data's age and flags
// (the oldest of the namespaces').
type StreamState struct {
	Confirms, Flips uint64
	Dated           time.Time     // the oldest confirmation (zero: no data)
	Age             time.Duration // since Dated
	Unconfirmed     bool          // one of them is not confirmed now
	AtReceipt       bool          // each is dated at this relay's receipt
}
