package config

import (
	"errors"
	"time"

	"github.com/holdfast-dev/holdfast/internal/syncer"
	"github.com/holdfast-dev/holdfast/transport"
)

// nsSink takes a namespace's syncer's reports: each records a fact under
// n.mu and settles. The syncer built and checked any new data before.
type nsSink struct{ n *Namespace }

var _ syncer.Sink = nsSink{}

func (s nsSink) Applied(u syncer.Update) {
	n := s.n
	// Only this goroutine and the clock change what is served; the clock
	// seldom (to Defaults and back), and settle works the changes out
	// again if it did in between.
	up := n.newUpdate(u, n.serving.Load())
	n.mu.Lock()
	defer n.mu.Unlock()
	n.applied, n.appliedWire, n.appliedOrigin, n.firstRejected = u.Snapshot, u.Wire, OriginNetwork, false
	if n.appliedWire == nil {
		n.appliedWire = u.Snapshot
	}
	n.appliedAt = time.Now()
	n.status.Rollout = rolloutStatus(u.Rollout)
	if u.Reset == syncer.ResetHistory {
		n.newHistory = true
	}
	n.status.Revision, n.status.StoreID = u.Snapshot.Revision(), u.Snapshot.StoreID()
	n.confirmed(u.Position, true)
	n.settle(up)
	n.acks.Report(n.c.opts.clientID, n.name, u.Snapshot.Revision(), memberOf(u.Rollout), u.Rollout.ID != "", nil)
	n.reportedAt = time.Now()
	n.wakeClock()
}

// memberOf is the rollout an ack speaks for: r's, when the client is in
// its stage (it applied or rejected the staged change); else none.
func memberOf(r syncer.Rollout) string {
	if r.Member {
		return r.ID
	}
	return ""
}

func (s nsSink) Confirmed(p syncer.Position) {
	n := s.n
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.applied != nil && n.appliedOrigin == OriginDisk {
		// Data from disk, now confirmed: the server hears what this client
		// serves, as after an apply. A report lost to a crash before the
		// restart, or made under another client id, would otherwise be
		// missing, and a rollout's stage waits for every member's.
		rollout := ""
		if n.status.Rollout.Staged {
			rollout = n.status.Rollout.ID
		}
		n.acks.Report(n.c.opts.clientID, n.name, n.applied.Revision(), rollout, n.status.Rollout.ID != "", nil)
		n.reportedAt = time.Now()
	}
	if n.applied != nil {
		n.appliedOrigin = OriginNetwork // data from disk, now confirmed
	}
	n.confirmed(p, false)
	n.rereport(time.Now(), p.Fresh)
	n.settle(nil)
	n.wakeClock()
}

// rereportEvery is the least time between two reports of the same state
// while a rollout runs, to a server that wants them repeated: its
// liveness window is two heartbeats, and at least 3 s.
const rereportEvery = time.Second

// rereport tells the server again what this client holds while a rollout
// runs in the namespace: its applied revision (naming the rollout when it
// serves the staged change), and its newest nack and would-nack still
// standing. Reports are soft state on their way: a relay or server
// restarted mid-rollout lost those it held. A server that lists
// transport.CapabilityReportsKept takes liveness from the connection and
// (a relay) keeps its clients' reports: it hears them again once per
// connection (fresh: the first confirmation of a watch (re)opened, as the
// server it now talks to may not have heard them). An older one hears
// them at every confirmation (a progress event: one a heartbeat at least
// while connected), at most every rereportEvery: it counts a stage's
// client silent past its liveness window as gone (docs/PROTOCOL.md,
// "When a client reports"). n.mu must be held.
func (n *Namespace) rereport(now time.Time, fresh bool) {
	if n.acks == nil || n.applied == nil || n.status.Rollout.ID == "" {
		return
	}
	if !fresh && (n.c.reportsKept() || now.Sub(n.reportedAt) < rereportEvery) {
		return
	}
	n.reportedAt = now
	id := n.c.opts.clientID
	rollout := ""
	if n.status.Rollout.Staged {
		rollout = n.status.Rollout.ID
	}
	n.acks.Report(id, n.name, n.applied.Revision(), rollout, true, nil)
	if n.nack.revision > n.applied.Revision() { // still rejected: nothing later applied
		n.acks.Report(id, n.name, n.nack.revision, n.nack.rollout, true, n.nack.err)
	}
	if n.would.Rollout == n.status.Rollout.ID {
		n.acks.Add(n.would)
	}
}

// reportsKept reports whether the client's source says its server keeps
// reports (transport.CapabilityReportsKept): a source that cannot say
// (one of WithSource) is taken for one that does not.
func (c *Client) reportsKept() bool {
	k, ok := c.src.(interface{ ReportsKept() bool })
	return ok && k.ReportsKept()
}

func (s nsSink) Failed(err error) {
	n := s.n
	n.mu.Lock()
	defer n.mu.Unlock()
	n.recordError(err)
	n.healthy = false
	n.settle(nil)
	n.wakeClock()
}

// Rejected: the last good keeps serving; the rejection shows in Status and
// the logs, is counted, reaches OnReject subscribers, and is reported to
// the server (a nack).
func (s nsSink) Rejected(revision int64, err error) {
	n := s.n
	rerr := &RejectedError{Namespace: n.name, Revision: revision, Err: err}
	n.log.Error("config: update rejected; the last good keeps serving", "revision", revision, "err", err)
	var staged *syncer.StagedError
	rollout := ""
	if errors.As(err, &staged) {
		rollout = staged.Rollout // a member's nack of the staged change: it counts against the rollout
	}
	n.acks.Report(n.c.opts.clientID, n.name, revision, rollout, true, rerr)
	n.mu.Lock()
	defer n.mu.Unlock()
	n.nack = nackReport{revision: revision, rollout: rollout, err: rerr}
	n.recordError(rerr)
	n.rejects.Add(1) // after the error: whoever sees the count sees the error in Status
	if n.applied == nil {
		n.firstRejected = true
	}
	n.disp.enqueue(item{rejected: rerr})
}

// WouldReject: a staged change this client is not in the stage of fails
// its checks (prevalidation). The base keeps serving (it was applied); the
// would-nack goes to the server, which counts it as a nack of the rollout.
// Readers see nothing: it is logged and counted (holdfast.applies,
// result would_reject).
func (s nsSink) WouldReject(revision int64, rolloutID string, err error) {
	n := s.n
	n.log.Warn("config: a staged rollout's change would be rejected; reported, serving the base",
		"revision", revision, "rollout", rolloutID, "err", err)
	would := transport.Ack{ClientID: n.c.opts.clientID, Namespace: n.name, Revision: revision,
		Status: transport.AckWouldReject, Rollout: rolloutID, Error: err.Error(), SDKVersion: Version}
	n.acks.Add(would)
	n.mu.Lock()
	n.would = would
	n.mu.Unlock()
}

// confirmed records that the data is current as of now minus p.Age (the
// time since a relay's upstream confirmed it; 0 from an origin) and
// persists it (changed: the data itself changed). A report with an age may
// move the confirmation back: a relay cut off that replays its backlog
// confirms the changes now, and the progress after them tells the truth.
// n.mu must be held.
func (n *Namespace) confirmed(p syncer.Position, changed bool) {
	// Now minus the age: the monotonic reading stays, so a clock step
	// does not age the data.
	n.confirm, n.ageKnown, n.healthy = time.Now().Add(-p.Age), true, true
	n.unconfirmed = p.Unconfirmed
	n.status.Unconfirmed = p.Unconfirmed
	n.cursor, n.head, n.headAt = p.Cursor, p.Head, n.confirm // every report follows word of the head
	if prev := n.confirmedCursor.Load(); p.Cursor > prev {
		n.confirmedCursor.Store(p.Cursor)
		n.c.rev.confirmed(n, prev, p.Cursor)
	}
	n.status.LastConfirmed = n.confirm
	n.status.Cursor = n.cursor
	n.persist(changed)
}

// wakeClock tells the clock a report changed the deadlines.
func (n *Namespace) wakeClock() {
	select {
	case n.kick <- struct{}{}:
	default:
	}
}

// recordError keeps err as the last error. n.mu must be held.
func (n *Namespace) recordError(err error) {
	n.status.LastError = errorInfo(err, time.Now())
}

// resultBindError is the apply result counted when a Bind cannot decode a
// value the namespace applied (the update itself was applied).
// TODO(telemetry): a telemetry.ResultBindError among the known results.
const resultBindError = "bind_error"

// bindFailed shows a Binding's decode error in Status and the metrics.
func (n *Namespace) bindFailed(err error) {
	n.metrics.Apply(resultBindError)
	n.log.Error("config: bound value does not decode; the previous value stays bound", "err", err)
	n.mu.Lock()
	defer n.mu.Unlock()
	info := errorInfo(err, time.Now())
	info.Kind = ErrorBind
	n.status.LastError = info
}

// bindRecovered marks a Binding's error past, if it is still the last.
func (n *Namespace) bindRecovered(err error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.status.LastError.Kind == ErrorBind && n.status.LastError.Err == err {
		n.status.LastError.Recovered = true
	}
}
