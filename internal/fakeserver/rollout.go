package fakeserver

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/holdfast-dev/holdfast/controlapi"
	"github.com/holdfast-dev/holdfast/internal/controlplane"
	"github.com/holdfast-dev/holdfast/internal/gate"
	"github.com/holdfast-dev/holdfast/internal/presence"
	"github.com/holdfast-dev/holdfast/internal/rollout"
	"github.com/holdfast-dev/holdfast/internal/rollout/controller"
	"github.com/holdfast-dev/holdfast/transport"
)

// The reference server's rollouts are internal/rollout/controller's, over
// a controller.MemStore whose changes commit to the server's own store:
// the state machine holdfast server runs, in memory.

// Defaults of a RolloutSpec.
const (
	DefaultRolloutReportTimeout = controller.DefaultReportTimeout
	DefaultRolloutStageTimeout  = controller.DefaultStageTimeout
)

// What a rollout does when a stage times out (RolloutSpec.OnTimeout).
const (
	OnTimeoutRevert = controller.Revert
	OnTimeoutHold   = controller.Hold
)

// The states of a rollout (RolloutRecord.State).
const (
	RolloutRunning  = controller.Running
	RolloutPromoted = controller.Promoted
	RolloutReverted = controller.Reverted
)

const (
	maxRolloutStages = controller.MaxStages
	// maxReports bounds the clients' reports the server keeps for its
	// rollouts (the least recently heard go first; a running rollout of
	// their namespace holds, knowing them missing: Reports.Missing).
	maxReports = 1 << 17
	// presenceEvery is how often the controller's view of which clients
	// are connected is read again: well within a liveness window.
	presenceEvery = 250 * time.Millisecond
	// rolloutPoll is how often the controller looks at running rollouts
	// without a report (a report wakes it at once).
	rolloutPoll = 20 * time.Millisecond
	// operator is the actor of the Go API's aborts and promotions.
	operator = "the operator"
)

// Errors of rollouts.
var (
	// ErrRolloutRunning: a rollout is running on the namespace; a plain
	// publish or rollback, or a second rollout, is refused (HTTP 409).
	ErrRolloutRunning = errors.New("fakeserver: a rollout is running")
	// ErrRolloutEnded: the rollout has ended; it can be neither aborted nor
	// promoted (HTTP 409).
	ErrRolloutEnded = errors.New("fakeserver: the rollout has ended")
	// ErrUnknownRollout: no rollout of that id on the namespace (HTTP 404).
	ErrUnknownRollout = errors.New("fakeserver: unknown rollout")
	// errStoreChanged: the store was reset or restored under a rollout.
	errStoreChanged = errors.New("fakeserver: the store was reset or restored")
)

// RolloutSpec is a staged rollout of a change to one namespace, and
// RolloutRecord its state: the control API's (controlapi).
type (
	RolloutSpec   = controlapi.RolloutSpec
	RolloutRecord = controlapi.RolloutRecord
)

// rollouts is the server's rollout controller, its state and the
// clients' reports it counts.
type rollouts struct {
	mem     *controller.MemStore
	ctl     *controller.Controller
	reports *controlplane.Reports
	any     atomic.Bool // a rollout was ever started: reports expand
	// present is the data plane's presence table (set once it is made):
	// a client connected is heard now (reportsOf).
	present atomic.Pointer[presence.Table]
	// The presence last read (reportsOf), and when: read at most every
	// presenceEvery, as the controller asks every poll.
	presentMu      sync.Mutex
	presentAt      time.Time
	presentEntries map[string]presence.Entry

	mu   sync.Mutex
	gens map[string]uint64 // running rollout id → the store generation it started in
	had  map[string]bool   // the namespaces that had a rollout (at most the store's)

	stop      context.CancelFunc
	done      chan struct{}
	closeOnce sync.Once
}

func (s *Server) newRollouts() *rollouts {
	r := &rollouts{gens: make(map[string]uint64), had: make(map[string]bool), done: make(chan struct{})}
	r.reports = controlplane.NewReports(maxReports, transport.MaxAckErrorBytes)
	r.mem = controller.NewMemStoreOver(s.applyRollout)
	r.ctl = controller.New(controller.Config{Store: r.mem, Logger: s.log, Poll: rolloutPoll,
		Reports: func(_ context.Context, ns string) ([]controller.Report, error) { return r.reportsOf(ns), nil },
		// Reports missing: those the report table dropped to make room,
		// and those the data plane's presence table knows lost (clients
		// it did not track, outcomes the relays behind it dropped).
		Missing: controller.JoinMissing(r.reports.Missing, func(_ context.Context, ns string, since time.Time) (int64, string) {
			return s.dp.Presence().Missing(ns, since, "the server")
		}),
		Actor: "holdfast reference server",
		// Every Prometheus URL is allowed (no gate.WithAllow): the
		// reference server serves tests their own fake Prometheus on
		// loopback; holdfast server allows only its -gate-allow.
		Gates: func(raw json.RawMessage) (controller.Gate, error) {
			return gate.FromJSON(raw, nil, gate.WithTimeout(5*time.Second))
		}})
	ctx, cancel := context.WithCancel(context.Background())
	r.stop = cancel
	go func() {
		defer close(r.done)
		_ = r.ctl.Run(ctx, nil)
	}()
	return r
}

// close stops the controller and waits for it; it is idempotent.
func (r *rollouts) close() {
	r.closeOnce.Do(func() {
		r.stop()
		<-r.done
		r.ctl.Close()
	})
}

// reportsOf returns the reports of ns, a client connected (its presence
// live or stale, directly or behind a relay) heard now: its liveness is
// its connection, not its reports' repeats, as holdfast server counts
// it. A client that left is heard when it last reported.
func (r *rollouts) reportsOf(ns string) []controller.Report {
	reps := r.reports.Of(ns)
	t := r.present.Load()
	if t == nil || len(reps) == 0 {
		return reps
	}
	now := time.Now()
	r.presentMu.Lock()
	if now.Sub(r.presentAt) >= presenceEvery {
		r.presentEntries, r.presentAt = t.Entries(), now
	}
	entries := r.presentEntries
	r.presentMu.Unlock()
	for i := range reps {
		if e, ok := entries[reps[i].ClientID]; ok && e.State.Connected() && now.After(reps[i].Seen) {
			reps[i].Seen = now
		}
	}
	return reps
}

// observe counts reports into the table and wakes the controller.
func (r *rollouts) observe(acks []transport.Ack) {
	r.reports.Observe(acks, time.Now())
	if r.any.Load() {
		r.ctl.Wake()
	}
}

// wants reports whether the controller needs a cohort report's outcome
// on ns as acks of each client: once ns has had a rollout.
func (r *rollouts) wants(ns string, _ int64) bool {
	if !r.any.Load() {
		return false
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.had[ns]
}

// applyRollout commits a rollout's change to the server's store: only
// while the store is of the generation the rollout started in.
func (s *Server) applyRollout(c controller.Commit) (int64, error) {
	r := s.rollouts
	id := c.Next.ID
	r.mu.Lock()
	gen, ok := r.gens[id]
	if !ok {
		gen = s.store.generation()
		r.gens[id] = gen
	}
	if c.Next.State != controller.Running {
		delete(r.gens, id)
	}
	r.mu.Unlock()
	ch := c.Change
	done, err := s.store.publishStaged(c.Next.Namespace, gen, ch.Puts, ch.Deletes, ch.Check,
		commitMeta{Kind: ch.Kind, Actor: ch.Actor, Reason: ch.Reason}, func(int64) {})
	if err != nil {
		if !ok {
			r.mu.Lock()
			delete(r.gens, id)
			r.mu.Unlock()
		}
		return 0, err
	}
	s.stats.publishes.Add(1)
	s.log.Debug("fakeserver: rollout committed", "ns", c.Next.Namespace, "rollout", id, "kind", ch.Kind, "revision", done.CS.Revision)
	return done.CS.Revision, nil
}

// rolloutError maps the controller's errors to the server's.
func rolloutError(err error) error {
	for _, m := range []struct{ from, to error }{
		{controller.ErrRunning, ErrRolloutRunning}, {controller.ErrEnded, ErrRolloutEnded},
		{controller.ErrUnknown, ErrUnknownRollout}, {controller.ErrInvalid, ErrInvalid},
	} {
		if errors.Is(err, m.from) {
			return fmt.Errorf("%w: %w", m.to, err)
		}
	}
	return err
}

// errNoRollouts: a relay's server runs no rollouts (its origin does).
var errNoRollouts = fmt.Errorf("%w: rollouts run at the origin, not at a relay", ErrInvalid)

// StartRollout starts a staged rollout of spec's change to namespace ns
// and returns its record: the first stage committed as a new revision
// (Revisions[0]). It fails with ErrInvalid (a bad spec: stages that do not
// end at 100 among them), ErrUnknownNamespace, a *SchemaError (the change
// fails ns's schema), or ErrRolloutRunning (one rollout per namespace at a
// time), or ErrClosed.
func (s *Server) StartRollout(ns string, spec RolloutSpec) (RolloutRecord, error) {
	rec, err := s.startRollout(s.life, ns, spec, "", "")
	return rec, err
}

// startRollout starts a rollout with an actor and a reason (the control
// API's; the Go API's have none).
func (s *Server) startRollout(ctx context.Context, ns string, spec controller.Spec, actor, reason string) (controller.Record, error) {
	r := s.rollouts
	if r == nil {
		return controller.Record{}, errNoRollouts
	}
	if s.life.Err() != nil {
		return controller.Record{}, ErrClosed // no controller would move it along
	}
	puts, deletes, err := checkPublish(ns, spec.Puts, spec.Deletes)
	if err != nil {
		return controller.Record{}, err
	}
	spec.Puts, spec.Deletes = puts, deletes
	if _, err := controller.CheckSpec(ns, spec); err != nil {
		return controller.Record{}, rolloutError(err)
	}
	if _, err := s.store.checkStaged(ns, spec.Puts, spec.Deletes); err != nil {
		return controller.Record{}, err
	}
	r.mu.Lock()
	r.had[ns] = true
	r.mu.Unlock()
	r.any.Store(true)
	rec, err := r.ctl.Start(ctx, ns, spec, actor, reason)
	if err != nil {
		return controller.Record{}, rolloutError(err)
	}
	return rec, nil
}

// Rollout returns the record of rollout id of namespace ns, running or
// ended. It fails with ErrUnknownRollout.
func (s *Server) Rollout(ns, id string) (RolloutRecord, error) {
	rec, err := s.rolloutRecord(context.Background(), ns, id)
	return rec, err
}

func (s *Server) rolloutRecord(ctx context.Context, ns, id string) (controller.Record, error) {
	if s.rollouts == nil {
		return controller.Record{}, errNoRollouts
	}
	rec, err := s.rollouts.ctl.Get(ctx, ns, id)
	return rec, rolloutError(err)
}

// WaitRollout waits until rollout id of namespace ns has ended (promoted
// or reverted) and returns its record; or until ctx is done, returning
// its record then and ctx's error. It fails at once with
// ErrUnknownRollout, and with ErrClosed when the server closes.
func (s *Server) WaitRollout(ctx context.Context, ns, id string) (RolloutRecord, error) {
	if s.rollouts == nil {
		return RolloutRecord{}, errNoRollouts
	}
	for {
		changed := s.rollouts.mem.Changed()
		rec, err := s.Rollout(ns, id)
		if err != nil || rec.State != RolloutRunning {
			return rec, err
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return rec, ctx.Err()
		case <-s.closing:
			return rec, ErrClosed
		}
	}
}

// Rollouts returns the records of namespace ns's rollouts, newest first
// (the last few ended ones and the running one).
func (s *Server) Rollouts(ns string) ([]RolloutRecord, error) {
	return s.rolloutRecords(context.Background(), ns)
}

func (s *Server) rolloutRecords(ctx context.Context, ns string) ([]controller.Record, error) {
	if s.rollouts == nil {
		return nil, errNoRollouts
	}
	if err := transport.ValidateNamespace(ns); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	recs, err := s.rollouts.ctl.List(ctx, ns)
	if recs == nil {
		recs = []controller.Record{}
	}
	return recs, rolloutError(err)
}

// AbortRollout reverts the running rollout id of namespace ns now: one new
// revision without the staged change. It returns the ended record, or
// fails with ErrUnknownRollout or ErrRolloutEnded.
func (s *Server) AbortRollout(ns, id string) (RolloutRecord, error) {
	rec, err := s.endRollout(context.Background(), ns, id, false, operator, "")
	return rec, err
}

// PromoteRollout skips the running rollout id of namespace ns to its
// promotion now: one new revision that makes the change the base for
// every client. It returns the ended record, or fails with
// ErrUnknownRollout or ErrRolloutEnded; a promotion that ns's schema
// refuses (changed since the start) reverts it instead.
func (s *Server) PromoteRollout(ns, id string) (RolloutRecord, error) {
	rec, err := s.endRollout(context.Background(), ns, id, true, operator, "")
	return rec, err
}

func (s *Server) endRollout(ctx context.Context, ns, id string, promote bool, actor, reason string) (controller.Record, error) {
	if s.rollouts == nil {
		return controller.Record{}, errNoRollouts
	}
	act := s.rollouts.ctl.Abort
	if promote {
		act = s.rollouts.ctl.Promote
	}
	rec, err := act(ctx, ns, id, actor, reason)
	return rec, rolloutError(err)
}

// endAll ends, without a commit, every running rollout: the store was
// reset or restored under them.
func (r *rollouts) endAll(reason string) {
	if r == nil {
		return
	}
	_ = r.ctl.Drop(context.Background(), reason)
	r.mu.Lock()
	clear(r.gens)
	clear(r.had)
	r.mu.Unlock()
}

// withoutRollout runs publish, a plain publish or rollback of ns, unless
// a rollout runs there: then it is refused, or with abort the rollout is
// reverted first (if precheck, the publish's own checks, passes). No
// rollout commit comes between the check and the publish.
func (s *Server) withoutRollout(ns string, abort bool, precheck func() error, publish func() error) error {
	r := s.rollouts
	if r == nil {
		return publish()
	}
	for attempt := 0; ; attempt++ {
		var running *controller.State
		err := r.mem.Guard(ns, func(cur *controller.State) error {
			if cur != nil && cur.State == controller.Running {
				running = cur
				return nil
			}
			return publish()
		})
		if running == nil {
			return err
		}
		if !abort || attempt >= 5 {
			return &controlplane.RolloutRunningError{Namespace: ns, ID: running.ID, Err: ErrRolloutRunning}
		}
		if precheck != nil {
			if err := precheck(); err != nil { // a publish that would fail aborts nothing
				return err
			}
		}
		if _, err := r.ctl.Abort(context.Background(), ns, running.ID, "a publish", ""); err != nil && !errors.Is(err, controller.ErrEnded) {
			return rolloutError(err)
		}
	}
}

// PublishStaged commits, as one revision, puts and staged as the value of
// rollout.Key (nil staged: the key deleted), past the rollout controller:
// for tests of how clients evaluate a rollout whose cut they choose (the
// controller picks cuts from the clients it knows). Refused while the
// controller runs a rollout on ns. Not part of holdfasttest.
func (s *Server) PublishStaged(ns string, staged *rollout.Staged, puts map[string]json.RawMessage) (int64, error) {
	clean, _, err := checkPublish(ns, puts, nil)
	if err != nil {
		return 0, err
	}
	deletes := []string{rollout.Key}
	if staged != nil {
		raw, err := rollout.Encode(staged)
		if err != nil {
			return 0, fmt.Errorf("%w: %w", ErrInvalid, err)
		}
		clean[rollout.Key], deletes = raw, nil
	}
	var rev int64
	err = s.withoutRollout(ns, false, nil, func() error {
		c, err := s.store.publishIf(ns, clean, deletes, commitMeta{Kind: KindRolloutStage, Reason: "staged by hand"}, nil)
		if err != nil {
			return err
		}
		s.stats.publishes.Add(1)
		rev = c.CS.Revision
		return nil
	})
	return rev, err
}
