package syncer

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"time"

	"github.com/cenkalti/backoff/v4"

	"github.com/holdfast-dev/holdfast/internal/instrument"
	"github.com/holdfast-dev/holdfast/internal/rollout"
	"github.com/holdfast-dev/holdfast/internal/snapshot"
	"github.com/holdfast-dev/holdfast/internal/wire"
	"github.com/holdfast-dev/holdfast/schema"
	"github.com/holdfast-dev/holdfast/telemetry"
	"github.com/holdfast-dev/holdfast/transport"
)

// Sink receives what a Syncer does, on the Syncer's goroutine, in order.
// Its methods must not block for long: the Syncer waits for them.
type Sink interface {
	// Applied: u.Snapshot is the new applied data, checked whole.
	Applied(u Update)
	// Confirmed: the applied data is current as of now minus p.Age (a
	// progress event, a 304, a snapshot or change of a revision already
	// applied or rejected).
	Confirmed(p Position)
	// Failed: syncing was interrupted by err (a transport error, a refused
	// snapshot); the data is not confirmed until the next Applied or
	// Confirmed.
	Failed(err error)
	// Rejected: revision failed its checks (err says why) and is not
	// applied; the applied data is unchanged. Confirmed follows when the
	// server is otherwise in touch. When the client is in a rollout's
	// stage and its checks rejected the data with the staged change, err
	// is a *StagedError naming the rollout.
	Rejected(revision int64, err error)
	// WouldReject: revision carries rollout rolloutID with prevalidation,
	// and the client's checks reject the staged change (err says why),
	// whether or not the client is in its stage: Applied of revision (the
	// base) precedes it for a client outside the stage, Rejected for one
	// in it. Only with Config.ClientID set.
	WouldReject(revision int64, rolloutID string, err error)
}

// Position is where the Syncer stands with the server, and how far the
// server vouches for the data in the report that gave it.
type Position struct {
	Cursor int64 // the store revision a watch resumes from
	Head   int64 // the newest namespace revision the server told of
	// Age is how long before the report the server's upstream last
	// confirmed the data (a relay's AgeMillis; 0 from an origin): the data
	// was confirmed current at the report's receipt minus Age. A change
	// applied or skipped has none: it is the origin's data, current when
	// it arrives (a relay replaying a backlog follows it with a progress
	// that tells the truth).
	Age time.Duration
	// Unconfirmed: the server said its upstream is not confirming the
	// data right now (a relay cut off); the data must not be called
	// fresh. Set or cleared by each snapshot, 304, progress or long-poll
	// reply; a change keeps what the last of them said.
	Unconfirmed bool
	// Fresh: the first report of a watch the Syncer (re)opened: the
	// server it now talks to (another one, or one restarted) may not
	// have heard what this client holds.
	Fresh bool
}

// Update describes one Applied event.
type Update struct {
	// Snapshot is the data to serve: Wire itself, or with Config.ClientID
	// set and a rollout on the wire, the client's view of it (see
	// rollout.Serve).
	Snapshot *snapshot.Snapshot
	// Prev is the data served before (the previous Update's Snapshot), nil
	// if none.
	Prev *snapshot.Snapshot
	// Wire is the namespace's content as the server sent it, rollout key
	// and all: the monotonic floor, what changes chain on, what a
	// last-good file keeps. It is Snapshot when no rollout is evaluated.
	Wire *snapshot.Snapshot
	// Change, when set, is the change set that made Snapshot from Prev;
	// nil when Snapshot came whole, or when a rollout's view is served
	// now or was before (the change set is the wire's, not the view's).
	Change *transport.ChangeSet
	// Rollout is the rollout the wire content carries, zero when none.
	Rollout Rollout
	// Reset says why the monotonic floor was reset (ResetStore,
	// ResetHistory), or is empty.
	Reset string
	Position
}

// Rollout describes the staged rollout a namespace's data carries, as one
// client sees it.
type Rollout struct {
	ID    string  // empty: no rollout
	Stage float64 // the stage's percentage
	// Member: the client is in the stage and serves the staged change.
	Member bool
}

// rolloutOf is v's Rollout.
func rolloutOf(v rollout.View) Rollout {
	if v.Staged == nil {
		return Rollout{}
	}
	return Rollout{ID: v.Staged.ID, Stage: v.Staged.Stage, Member: v.Member}
}

// Why a monotonic floor was reset.
const (
	ResetStore   = "store changed"     // the server's store id changed
	ResetHistory = "history rewritten" // same store id, history rewound
)

// Config configures a Syncer. Namespace, Source and Sink are required.
type Config struct {
	Namespace string
	Source    transport.Source
	Sink      Sink
	// Schema, when set, checks every update whole before it is applied.
	Schema *schema.Schema
	// ClientID, when set, is the client whose view of a staged rollout is
	// served: each new revision is turned into it with rollout.Serve and
	// checked as served (and, with prevalidation, with the staged change;
	// see Sink.WouldReject). Empty (a relay): the data is served as it
	// came, the rollout key and all.
	ClientID string
	Log      *slog.Logger                 // nil: discard
	Meter    *instrument.NamespaceMetrics // nil-safe
	Tracer   *instrument.Tracer           // nil-safe
	// Backoff is the reconnect policy; see NewBackoff and Wait.
	Backoff Backoff
	// FetchTimeout bounds one snapshot fetch, so that a black-holed server
	// cannot hold the loop.
	FetchTimeout time.Duration
	// Backstop ends even a healthy watch after this long, for a
	// conditional snapshot that confirms nothing diverged.
	Backstop time.Duration
	// RewriteGrace is how long the evidence of rewritten history must last
	// before older data is taken (see the package doc). Default 10s.
	RewriteGrace time.Duration
}

// DefaultRewriteGrace is Config.RewriteGrace's default.
const DefaultRewriteGrace = 10 * time.Second

// healthyStream is how long a watch that delivers must have lived for the
// reconnect backoff to start over: a server that cuts every stream after
// its first event still meets a growing backoff.
const healthyStream = 5 * time.Second

// failureLogEvery rate-limits the Warn log of repeated failures.
const failureLogEvery = 30 * time.Second

// Syncer follows one namespace. Its state is confined to the goroutine
// that calls Run (and, before Run, Seed).
type Syncer struct {
	cfg Config
	log *slog.Logger

	applied *snapshot.Snapshot // the last good data as it came: the monotonic floor; nil before any
	served  *snapshot.Snapshot // applied's view for cfg.ClientID (applied itself without a rollout); nil with applied
	staged  Rollout            // the rollout applied carries
	// seedStore and seedRevision are the floor while applied is nil: a
	// last-good file's, whose data failed the checks (see Seed).
	seedStore    string
	seedRevision int64
	storeID      string // the store the cursor belongs to
	cursor       int64  // where a watch resumes
	head         int64  // the newest namespace revision the server told of
	rejected     int64  // the namespace revision last rejected, if any
	// unconfirmed is what the server's last snapshot or progress said:
	// its upstream is not confirming the data (Position.Unconfirmed).
	unconfirmed bool
	// rewriteSince is when the evidence that the server's history is
	// behind the floor, under the same store id, began; zero when there is
	// none.
	rewriteSince time.Time
	// resetPending is why the floor was dropped for a snapshot that was
	// rejected (ResetStore, ResetHistory): the next data applied, of the
	// new store or history, reports it, as it would have reported the
	// rejected one. Empty when none is pending.
	resetPending string
	// atOnce: a resnapshot was made at once after a short stream (a store
	// change, a gap); the next such one waits its backoff unless a
	// healthy stream came in between.
	atOnce bool
	// fresh: a watch was (re)opened and nothing was reported on it yet
	// (Position.Fresh).
	fresh bool

	lastWarn   time.Time // of failures; see failed
	suppressed int       // failures logged at Debug since lastWarn
}

// New returns a Syncer. It starts nothing.
func New(cfg Config) *Syncer {
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	if cfg.RewriteGrace <= 0 {
		cfg.RewriteGrace = DefaultRewriteGrace
	}
	return &Syncer{cfg: cfg, log: cfg.Log}
}

// Seed starts the Syncer from data read from disk: it becomes the applied
// data (the monotonic floor for its store id) and cursor, whether or not
// the caller serves it. If the data fails the schema, Seed returns why and
// the data is not applied, but its store id and revision stay the floor:
// older data of that store is refused as any is (see the package doc).
// Call it before Run.
//
// snap is the content as it came from the server (Update.Wire): with
// Config.ClientID set, a rollout it carries is evaluated afresh for this
// client, and Served says what to serve.
func (s *Syncer) Seed(snap *snapshot.Snapshot, cursor int64) error {
	s.storeID, s.cursor = snap.StoreID(), cursor
	v, _, err := s.admit(snap, false)
	if err != nil {
		s.seedStore, s.seedRevision = snap.StoreID(), snap.Revision()
		return err
	}
	s.applied, s.served, s.staged = snap, v.Served, rolloutOf(v)
	return nil
}

// Served is what the applied data serves, and the rollout it carries: after
// a Seed that succeeded, the seed's view. nil before any data. Call it
// before Run, or from the Sink.
func (s *Syncer) Served() (*snapshot.Snapshot, Rollout) { return s.served, s.staged }

// floor is the store id and revision below which data of that store is
// refused: the applied data's, or a seed's that failed the checks; "" and 0
// when there is none.
func (s *Syncer) floor() (storeID string, revision int64) {
	if s.applied != nil {
		return s.applied.StoreID(), s.applied.Revision()
	}
	return s.seedStore, s.seedRevision
}

// Run syncs until ctx ends: snapshot, then watch from the cursor; on a
// disconnect resume from the cursor after a backoff; on compaction, a gap,
// a new store id or a refused cursor, resnapshot. It never gives up.
func (s *Syncer) Run(ctx context.Context) {
	bo := s.cfg.Backoff.New()
	needSnapshot, reason := true, telemetry.ResnapshotInitial
	for ctx.Err() == nil {
		if needSnapshot {
			if err := s.resnapshot(ctx, reason); err != nil {
				if ctx.Err() != nil {
					return
				}
				s.failed(err, "config: snapshot failed; retrying")
				s.waitAfterSnapshot(ctx, bo, err)
				continue
			}
			needSnapshot = false
		}

		delivered := false // an event applied (or confirmed) without error
		started := time.Now()
		watchCtx, cancel := context.WithTimeoutCause(ctx, s.cfg.Backstop, ErrBackstop)
		s.fresh = true
		err := s.cfg.Source.Watch(watchCtx, transport.WatchRequest{Namespace: s.cfg.Namespace, Since: s.cursor},
			func(ev transport.Event) error {
				if err := s.Handle(ev); err != nil {
					return err
				}
				delivered = true
				return nil
			})
		cancel()
		// A stream that delivered for healthyStream was healthy: the
		// backoff starts over, and so does the allowance of one at-once
		// resnapshot. A shorter one does neither, so a server that ends
		// every stream after its first event meets a growing backoff.
		healthy := delivered && time.Since(started) >= healthyStream
		if healthy {
			s.atOnce = false
			bo.Reset()
		}
		if ctx.Err() != nil {
			return
		}
		if context.Cause(watchCtx) == ErrBackstop {
			err = ErrBackstop
		}
		if !NeedsResnapshot(err) {
			if delivered && isCut(err) {
				// A live watch cut (a proxy's read timeout shorter than the
				// heartbeat, a restart): it resumes from its cursor before
				// anything is reported. Its server confirmed the data when
				// it opened; if the next watch delivers nothing, that one
				// reports the failure.
				s.log.Debug("config: a live watch was cut; resuming from cursor", "cursor", s.cursor, "err", err)
			} else {
				s.failed(err, "config: watch ended; resuming from cursor")
			}
			s.cfg.Meter.Reconnect(ReconnectReason(err))
			s.cfg.Backoff.Wait(ctx, bo, err)
			continue
		}
		// Compaction, a gap or a new store are normal paths, not
		// trouble: no error reported, no state change.
		needSnapshot, reason = true, s.resnapshotReason(err)
		s.log.Info("config: resnapshot", "reason", err)
		moved := s.storeMoved(err)
		if moved {
			s.noteRewrite(err)
		}
		switch {
		case healthy:
			continue // at once, and at most once per healthyStream
		case (moved || delivered) && !s.atOnce:
			// The server's history is not the cursor's, or a stream
			// that delivered met a gap: find out what the server holds
			// now rather than after a grown backoff, once until the
			// next healthy stream.
			s.atOnce = true
			continue
		}
		s.cfg.Backoff.Wait(ctx, bo, err)
	}
}

// storeMoved reports whether a watch ended because the server's history is
// not the one the cursor came from: a new store id, or a cursor above its
// head (a plain 400 from servers that predate CodeCursorAhead).
func (s *Syncer) storeMoved(err error) bool {
	var se *transport.StatusError
	return errors.Is(err, transport.ErrStoreChanged) || errors.Is(err, transport.ErrCursorAhead) ||
		errors.As(err, &se) && se.StatusCode == http.StatusBadRequest
}

// noteRewrite starts the rewritten-history clock when the server refused
// the cursor as above its head under the same store id.
func (s *Syncer) noteRewrite(err error) {
	if !errors.Is(err, transport.ErrCursorAhead) {
		return
	}
	var se *transport.StatusError
	if errors.As(err, &se) && se.StoreID != "" && se.StoreID != s.storeID {
		return // a new store: the snapshot resets the floor anyway
	}
	if s.rewriteSince.IsZero() {
		s.rewriteSince = time.Now()
	}
}

// waitAfterSnapshot waits before the next snapshot attempt. A snapshot
// over the size limit will not shrink soon: it waits the longest the
// backoff does, not a growing series of downloads. A snapshot behind the
// floor is looked at again well within the rewrite grace.
func (s *Syncer) waitAfterSnapshot(ctx context.Context, bo backoff.BackOff, err error) {
	var behind *BehindError
	switch {
	case errors.Is(err, transport.ErrTooLarge):
		s.log.Warn("config: snapshot over the size limit; retrying at the longest backoff", "retry_every", s.cfg.Backoff.Max, "err", err)
		s.cfg.Backoff.sleep(ctx, jitter(s.cfg.Backoff.Max))
	case errors.As(err, &behind):
		s.cfg.Backoff.sleep(ctx, min(bo.NextBackOff(), max(s.cfg.RewriteGrace/5, 100*time.Millisecond)))
	default:
		s.cfg.Backoff.Wait(ctx, bo, err)
	}
}

// failed reports err to the Sink and logs it: at Warn for the first
// failure and then at most every failureLogEvery (with how many were
// logged at Debug in between), so an outage neither goes unsaid nor floods.
func (s *Syncer) failed(err error, msg string) {
	s.cfg.Sink.Failed(err)
	if now := time.Now(); now.Sub(s.lastWarn) >= failureLogEvery {
		s.log.Warn(msg, "cursor", s.cursor, "err", err, "similar_since_last", s.suppressed)
		s.lastWarn, s.suppressed = now, 0
		return
	}
	s.suppressed++
	s.log.Debug(msg, "cursor", s.cursor, "err", err)
}

// position is where the Syncer stands, for a report whose data its server's
// upstream confirmed age before; the first since a watch (re)opened is
// Fresh.
func (s *Syncer) position(age time.Duration) Position {
	p := Position{Cursor: s.cursor, Head: s.head, Age: age, Unconfirmed: s.unconfirmed, Fresh: s.fresh}
	s.fresh = false
	return p
}

func (s *Syncer) confirmed(age time.Duration) { s.cfg.Sink.Confirmed(s.position(age)) }

// vouched notes what a snapshot or progress said of its data's age and
// returns the age.
func (s *Syncer) vouched(ageMillis int64, unconfirmed bool) time.Duration {
	s.unconfirmed = unconfirmed
	return wire.AgeFromMillis(ageMillis)
}

// resnapshot fetches the namespace whole and applies it. When the Syncer
// already holds data of the same store, the request is conditional, and an
// unchanged namespace costs no body.
func (s *Syncer) resnapshot(ctx context.Context, reason string) (err error) {
	ctx, end := s.cfg.Tracer.Start(ctx, telemetry.SpanResnapshot, s.cfg.Namespace) // the fetch, the checks, the apply
	defer func() { end(err) }()
	req := transport.SnapshotRequest{Namespace: s.cfg.Namespace}
	if s.applied != nil {
		req.KnownStoreID, req.KnownRevision = s.applied.StoreID(), s.applied.Revision()
	}
	fetchCtx, cancel := context.WithTimeout(ctx, s.cfg.FetchTimeout)
	defer cancel()
	fetchCtx, endFetch := s.cfg.Tracer.Start(fetchCtx, telemetry.SpanSnapshot, s.cfg.Namespace)
	snap, err := s.cfg.Source.Snapshot(fetchCtx, req)
	endFetch(err)
	notModified := errors.Is(err, transport.ErrNotModified)
	if err != nil && !notModified {
		return err
	}
	if snap == nil { // a Source that breaks its contract must not end the process
		return fmt.Errorf("%w: snapshot of %q: no snapshot (error %v)", transport.ErrMalformed, s.cfg.Namespace, err)
	}
	if snap.Namespace != s.cfg.Namespace {
		return fmt.Errorf("%w: snapshot of %q for namespace %q", transport.ErrMalformed, snap.Namespace, s.cfg.Namespace)
	}
	age := s.vouched(snap.AgeMillis, snap.Unconfirmed)

	cur := s.applied
	sameStore := cur != nil && snap.StoreID == cur.StoreID()
	floorStore, floorRev := s.floor()
	reset := ""
	switch {
	case notModified && !sameStore:
		return fmt.Errorf("%w: 304 for data the client does not hold", transport.ErrMalformed)
	case notModified, sameStore && snap.Revision == cur.Revision():
		s.cfg.Meter.Resnapshot(reason)
		// The server holds what is applied. Its cursor is the one to
		// watch from, even if lower than ours: changes up to ours are
		// duplicates and skipped, and ours may be above its head.
		s.rewriteSince = time.Time{}
		s.storeID, s.cursor = snap.StoreID, snap.Cursor
		s.head = max(s.head, snap.Revision)
		s.confirmed(age)
		return nil
	case snap.StoreID == floorStore && snap.Revision < floorRev:
		if !s.historyRewritten(snap) {
			s.cfg.Meter.Resnapshot(reason)
			return &BehindError{Namespace: s.cfg.Namespace, StoreID: snap.StoreID, Revision: snap.Revision, Applied: floorRev,
				Since: s.rewriteSince, Grace: s.cfg.RewriteGrace}
		}
		reason, reset = telemetry.ResnapshotHistoryRewritten, ResetHistory
		s.log.Warn("config: the server's history was rewritten under the same store id; monotonic floor reset",
			"store_id", snap.StoreID, "applied", floorRev, "server", snap.Revision,
			"linearizable", snap.Linearizable, "evidence_for", time.Since(s.rewriteSince).Round(time.Millisecond))
	case cur != nil && !sameStore:
		reset = ResetStore
		s.log.Warn("config: store id changed; monotonic floor reset", "old", cur.StoreID(), "new", snap.StoreID)
	}
	s.cfg.Meter.Resnapshot(reason) // fetched; counted before anything is applied
	s.rewriteSince = time.Time{}
	if reset != "" || snap.StoreID != floorStore || snap.Revision > floorRev {
		s.seedStore, s.seedRevision = "", 0 // passed, or reset
	}
	if snap.StoreID != s.storeID || reset != "" {
		s.head = 0
	}
	s.head = max(s.head, snap.Revision)
	if reset == "" && snap.StoreID == s.storeID && snap.Revision == s.rejected {
		s.cursor = max(s.cursor, snap.Cursor)
		s.confirmed(age)
		return nil // rejected already; wait for a later revision
	}
	next, err := snapshot.BuildJSON(s.cfg.Namespace, snap.StoreID, snap.Revision, snap.Values)
	var v rollout.View
	var wouldReject error
	if err == nil {
		v, wouldReject, err = s.admit(next, true)
	}
	// Watch on from this snapshot's cursor either way: a rejected snapshot
	// is not fetched again, and the next revision, a gap from what is
	// applied, resnapshots. A new store or history restarts the cursor.
	s.storeID, s.cursor = snap.StoreID, snap.Cursor
	if err != nil {
		if reset != "" {
			s.applied, s.served, s.staged = nil, nil, Rollout{} // nothing of the new history chains on the old
			s.resetPending = reset
		}
		s.reject(snap.Revision, err)
		s.prevalidated(snap.Revision, v, wouldReject)
		// In touch with the server, serving the newest data that passes.
		s.confirmed(age)
		return nil
	}
	if reset == "" && cur == nil {
		reset = s.resetPending // the first data of a new store or history whose first snapshot was rejected
	}
	prev := s.served
	s.rejected, s.resetPending = 0, ""
	s.take(next, v)
	s.apply(Update{Snapshot: v.Served, Prev: prev, Wire: next, Rollout: s.staged, Reset: reset, Position: s.position(age)})
	s.prevalidated(next.Revision(), v, wouldReject)
	return nil
}

// admit turns new data as it came (wire) into what the client serves and
// checks that: an error rejects the revision (a malformed rollout; the
// checks failing the served view, a *StagedError when it holds the staged
// change). With prevalidate and a rollout that asks for it, wouldReject
// says why the checks fail the staged change: for a client outside the
// stage the candidate is checked too (the base is served all the same),
// for one in it the check of what it serves says. Without
// Config.ClientID, wire is served as it is.
func (s *Syncer) admit(wire *snapshot.Snapshot, prevalidate bool) (v rollout.View, wouldReject, err error) {
	if s.cfg.ClientID == "" {
		v = rollout.View{Served: wire}
	} else if v, err = rollout.Serve(wire, s.cfg.ClientID); err != nil {
		return v, nil, err
	}
	if err := s.check(v.Served); err != nil {
		if v.Member {
			if prevalidate && v.Staged.Prevalidate {
				wouldReject = err // a member's check of what it serves is its prevalidation too
			}
			err = &StagedError{Rollout: v.Staged.ID, Stage: v.Staged.Stage, Err: err}
		}
		return v, wouldReject, err
	}
	if prevalidate && v.Staged != nil && v.Staged.Prevalidate && !v.Member {
		wouldReject = s.check(v.Candidate)
	}
	return v, wouldReject, nil
}

// take makes wire, served as v, the applied data.
func (s *Syncer) take(wire *snapshot.Snapshot, v rollout.View) {
	s.applied, s.served, s.staged = wire, v.Served, rolloutOf(v)
}

// prevalidated reports a prevalidation that failed, after revision was
// applied (the base, outside the stage) or rejected (in it).
func (s *Syncer) prevalidated(revision int64, v rollout.View, wouldReject error) {
	if wouldReject == nil {
		return
	}
	s.cfg.Meter.Apply(telemetry.ResultWouldReject)
	s.cfg.Sink.WouldReject(revision, v.Staged.ID, wouldReject)
}

// apply reports new applied data to the Sink and counts it; every apply
// result (applied, rejected, duplicate, would_reject) is counted here, in
// the syncer.
func (s *Syncer) apply(u Update) {
	s.cfg.Sink.Applied(u)
	s.cfg.Meter.Apply(telemetry.ResultApplied)
	if t := u.Snapshot.CommittedAt(); !t.IsZero() {
		s.cfg.Meter.PropagationDelay(time.Since(t))
	}
}

// historyRewritten reports whether a snapshot behind the floor, of the
// same store id, is proof of new history: it is a linearizable read, or the
// evidence has lasted the grace. It starts the evidence clock. A snapshot
// its server says is unconfirmed (a relay cut off from its upstream, which
// may simply be behind) is no proof, however long it lasts.
func (s *Syncer) historyRewritten(snap *transport.Snapshot) bool {
	if snap.Unconfirmed {
		return false
	}
	if s.rewriteSince.IsZero() {
		s.rewriteSince = time.Now()
	}
	return snap.Linearizable || time.Since(s.rewriteSince) >= s.cfg.RewriteGrace
}

// check runs the schema, if there is one, on snap: the whole namespace,
// decoded as generic JSON for the check and dropped after it. Keeping the
// document would cost more memory than the snapshot itself (about 12x its
// size on the wire for small values) to save decoding on each change.
func (s *Syncer) check(snap *snapshot.Snapshot) error {
	if s.cfg.Schema == nil {
		return nil
	}
	doc, err := schema.DecodeSeq(snap.RawAll(), snap.Len())
	if err != nil {
		return err
	}
	return s.cfg.Schema.Validate(doc)
}

// reject records that revision failed its checks and tells the Sink.
func (s *Syncer) reject(revision int64, err error) {
	s.rejected = revision
	s.cfg.Meter.Apply(telemetry.ResultRejected)
	s.cfg.Sink.Rejected(revision, err)
}

// Handle applies one watch event, as Run does with each, for a caller that
// drives events itself (a benchmark). An error ends a watch: Run then
// resumes or resnapshots. Not for use while Run runs.
func (s *Syncer) Handle(ev transport.Event) error {
	cur := s.applied
	if cur != nil && cur.StoreID() != s.storeID {
		cur = nil // the last good is of another store: nothing chains on it
	}
	var applied int64 // 0 when nothing of this store is applied
	if cur != nil {
		applied = cur.Revision()
	}
	switch {
	case ev.Change != nil:
		cs := ev.Change
		if cs.StoreID != s.storeID {
			return fmt.Errorf("%w: %q, watching %q", transport.ErrStoreChanged, cs.StoreID, s.storeID)
		}
		s.head = max(s.head, cs.Revision)
		if cs.Revision <= applied || cs.Revision == s.rejected {
			s.cfg.Meter.Apply(telemetry.ResultDuplicate)
			s.cursor = max(s.cursor, cs.Revision)
			s.confirmed(0)
			return nil // a duplicate, or a revision already rejected
		}
		if cur == nil || cs.PrevRevision != applied {
			return fmt.Errorf("%w: change %d follows %d, applied %d", ErrGap, cs.Revision, cs.PrevRevision, applied)
		}
		next, err := cur.Apply(cs.Revision, cs.CommittedAt, cs.Puts, cs.Deletes)
		var v rollout.View
		var wouldReject error
		if err == nil {
			v, wouldReject, err = s.admit(next, true)
		}
		if err != nil {
			// Keep the stream: later changes chain on the rejected
			// revision, so the next one is a gap and resnapshots, and
			// is checked whole.
			s.reject(cs.Revision, err)
			s.prevalidated(cs.Revision, v, wouldReject)
			s.confirmed(0)
			return nil
		}
		s.cursor = max(s.cursor, cs.Revision)
		prev := s.served
		s.take(next, v)
		u := Update{Snapshot: v.Served, Prev: prev, Wire: next, Rollout: s.staged, Position: s.position(0)}
		if v.Served == next && prev == cur {
			u.Change = cs // the wire's change is the served one's
		}
		s.apply(u)
		s.prevalidated(cs.Revision, v, wouldReject)
		return nil
	case ev.Progress != nil:
		p := ev.Progress
		if p.StoreID != s.storeID {
			return fmt.Errorf("%w: %q, watching %q", transport.ErrStoreChanged, p.StoreID, s.storeID)
		}
		s.head = max(s.head, p.Revision)
		if p.Revision > applied && p.Revision != s.rejected {
			return fmt.Errorf("%w: progress at namespace revision %d, applied %d", ErrGap, p.Revision, applied)
		}
		s.cursor = max(s.cursor, p.Cursor)
		s.confirmed(s.vouched(p.AgeMillis, p.Unconfirmed))
		return nil
	}
	return fmt.Errorf("%w: empty watch event", transport.ErrMalformed)
}

// SetMeter sets the namespace's instruments. Call it before Run.
func (s *Syncer) SetMeter(m *instrument.NamespaceMetrics) { s.cfg.Meter = m }

// isCut reports whether err ended a watch as a cut connection does (the
// stream closed or reset, or went idle), as opposed to an answer of the
// server's (an HTTP status) or the backstop.
func isCut(err error) bool {
	var se *transport.StatusError
	return !errors.As(err, &se) && !errors.Is(err, ErrBackstop)
}
