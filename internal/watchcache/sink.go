package watchcache

import (
	"errors"
	"time"

	"github.com/holdfast-dev/holdfast/internal/cachedir"
	"github.com/holdfast-dev/holdfast/internal/presence"
	"github.com/holdfast-dev/holdfast/internal/snapshot"
	"github.com/holdfast-dev/holdfast/internal/syncer"
	"github.com/holdfast-dev/holdfast/transport"
)

// persistConfirmEvery bounds how often a confirmation alone (no new data)
// rewrites a namespace's last-good file: often enough that a relay
// restarted during an outage knows its data's age within it.
const persistConfirmEvery = 10 * time.Second

// sink takes one namespace's syncer's reports (on its goroutine) into the
// follower and the last-good file.
type sink struct {
	c *Cache
	f *followed
}

var _ syncer.Sink = sink{}

func (s sink) Applied(u syncer.Update) {
	snap := u.Snapshot
	// As the SDK does: a change confirms at age 0 and keeps the flag of the
	// last report; a snapshot's age and flag are its own.
	s.c.follower.Apply(s.f.name, snap.StoreID(), snap.Revision(), u.Cursor, values(snap), u.Change, u.Age, u.Unconfirmed)
	s.c.gotData(s.f)
	s.c.heard.Store(true)
	s.f.lastErr.Store(nil)
	s.f.hold(snap)
	s.save(u.Cursor, time.Now().Add(-u.Age))
	s.retell(u.Fresh)
}

func (s sink) Confirmed(p syncer.Position) {
	if !s.c.follower.Confirm(s.f.name, p.Cursor, p.Age, p.Unconfirmed) && s.f.applied != nil {
		a := s.f.applied
		s.c.follower.Refill(s.f.name, a.StoreID(), a.Revision(), p.Cursor, values(a), p.Age, p.Unconfirmed)
	}
	s.c.heard.Store(true)
	s.f.lastErr.Store(nil)
	if now := time.Now(); now.Sub(s.f.savedAt) >= persistConfirmEvery {
		s.save(p.Cursor, now.Add(-p.Age))
	}
	s.retell(p.Fresh)
}

// retellEvery is the least time between two tellings of the clients'
// reports to an upstream that wants them repeated while a rollout runs:
// as often as the clients themselves would (config's rereportEvery).
const retellEvery = time.Second

// retell tells the upstream again the reports the cache keeps of the
// namespace's clients (Config.KeepReports): at the first report of a
// watch (re)opened (fresh: the upstream it now talks to may not have
// heard them), and, to an upstream that does not keep reports, at every
// report while a rollout runs, at most every retellEvery. Clients the
// cache's presence table says left are forgotten.
func (s sink) retell(fresh bool) {
	c := s.c
	if !c.cfg.KeepReports || c.acks == nil {
		return
	}
	staged := s.f.staged.Load()
	now := time.Now()
	if !fresh && (!staged || c.upstreamKeeps() || now.Sub(s.f.resentAt) < retellEvery) {
		return
	}
	s.f.resentAt = now
	var gone func(string) bool
	if entries := c.srv.Presence().Entries(); len(entries) > 0 {
		gone = func(client string) bool {
			e, ok := entries[client]
			return ok && e.State == presence.Gone
		}
	}
	if n := c.acks.Resend(s.f.name, staged, gone); n > 0 && fresh {
		c.log.Debug("relay: its clients' reports told again to a new upstream connection", "ns", s.f.name, "reports", n)
	}
}

// upstreamKeeps reports whether the upstream says it keeps reports
// (transport.CapabilityReportsKept); one that cannot say does not.
func (c *Cache) upstreamKeeps() bool {
	k, ok := c.src.(interface{ ReportsKept() bool })
	return ok && k.ReportsKept()
}

func (s sink) Failed(err error) {
	if errors.Is(err, transport.ErrNotFound) {
		// A 404 names the upstream's store: a reply of this relay's
		// before any data names it too, so that a relay behind this
		// one takes it for a holdfast server's.
		var se *transport.StatusError
		if errors.As(err, &se) && se.StoreID != "" {
			s.c.follower.SeedStoreID(se.StoreID)
		}
		s.c.follower.Absent(s.f.name)
		if s.f.applied == nil {
			// Never had data: it leaves the table, and is not asked
			// for again for a while (flood.go).
			s.c.dropAbsent(s.f)
		}
	}
	s.c.follower.Fail(s.f.name)
	msg := err.Error()
	s.f.lastErr.Store(&msg)
}

// Rejected: a cache checks nothing of its own (no schema); what its
// syncer refuses (torn or backwards data) it does not serve.
func (s sink) Rejected(revision int64, err error) {
	s.c.log.Error("relay: upstream update refused; the last good keeps serving", "ns", s.f.name, "revision", revision, "err", err)
	s.c.follower.Fail(s.f.name)
	msg := err.Error()
	s.f.lastErr.Store(&msg)
}

// WouldReject is never called: a cache's syncer evaluates no rollout (it
// has no ClientID) and passes the rollout key on as it came.
func (s sink) WouldReject(int64, string, error) {}

// save submits the namespace's last good, confirmed at, to its file.
func (s sink) save(cursor int64, at time.Time) {
	if s.c.cfg.LastGood == nil || s.f.applied == nil {
		return
	}
	s.f.savedAt = time.Now() // not at: an upstream's age must not make every confirmation a write
	s.c.cfg.LastGood.Submit(&cachedir.Record{Namespace: s.f.name, StoreID: s.f.applied.StoreID(), Revision: s.f.applied.Revision(),
		Cursor: cursor, ConfirmedAt: at, Snapshot: s.f.applied})
}

// seed is the syncer's starting point from what the follower serves (its
// last-good file): nil when it serves nothing of ns.
func (c *Cache) seed(ns string) (*snapshot.Snapshot, int64) {
	storeID, rev, cursor, vals, ok := c.follower.Data(ns)
	if !ok {
		return nil, 0
	}
	snap, err := snapshot.Build(ns, storeID, rev, vals)
	if err != nil {
		return nil, 0
	}
	return snap, cursor
}
