package controller

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/holdfast-dev/holdfast/internal/rollout"
)

// Store keeps the rollouts' durable state.
type Store interface {
	// Current returns namespace ns's current rollout: the running one, or
	// the last that ended; nil when it never had one.
	Current(ctx context.Context, ns string) (*State, error)
	// Running returns every running rollout of the store.
	Running(ctx context.Context) ([]*State, error)
	// List returns ns's rollouts, newest first: the current one and the
	// last MaxKept that ended.
	List(ctx context.Context, ns string) ([]*State, error)
	// Commit writes c in one transaction, only if the namespace's current
	// rollout is still at c.Prev's Version (c.Prev nil: it has none) and
	// c.Leading (store-specific; nil: unconditional) holds; else it fails
	// with ErrConflict and writes nothing. It returns the new state's
	// Version, and fills c.Next's placeholder revisions with the revision
	// of c.Change, if any (State.FillRevision). (In etcd both are the
	// transaction's revision.)
	Commit(ctx context.Context, c Commit) (rev int64, err error)
}

// Commit is one transition.
type Commit struct {
	Prev, Next *State
	// Change is the namespace's change, committed as one revision with
	// the state; nil: the state alone (a bake begins, a stage holds).
	Change  *Change
	Leading any
}

// Change is a namespace change a transition commits.
type Change struct {
	Kind          string // KindStage, KindPromote or KindRevert
	Actor, Reason string // the audit record's (reason at most MaxReasonBytes)
	Puts          map[string]json.RawMessage
	Deletes       []string
	// Check: check the namespace's content after the change against its
	// schema (a promotion).
	Check bool
}

// Gate is a check a stage must pass while it bakes (a metric gate): a
// breach reverts or holds the rollout, as Spec.OnBreach says.
type Gate interface {
	// Check evaluates the gate now. A breach is breach true, with the
	// figures in detail (recorded untruncated in the rollout's decisions,
	// up to MaxReasonBytes in the audit); an error is the gate's own
	// trouble (the gate decides when trouble is a breach: its grace).
	Check(ctx context.Context) (breach bool, detail string, err error)
}

// A Gate may also have these methods (internal/gate's Bound has them):
//
//   - Start(ctx) error: the first check, at the rollout's start; an
//     error (no answer, several series) refuses the start, nothing
//     written (ErrGate).
//   - FailingSince() time.Time and Resume(time.Time): since when its query
//     has failed; the controller keeps it in the rollout's state
//     (State.GateFailing) and resumes a gate it builds after a failover
//     from it, so the grace goes on rather than restarting.
//   - Close() error: called when the controller drops the gate.
//   - LastJSON() json.RawMessage: its last check's result, kept in the
//     rollout's record with each transition of a bake.
type (
	gateStarter interface {
		Start(ctx context.Context) error
	}
	gateResumer interface {
		FailingSince() time.Time
		Resume(failingSince time.Time)
	}
	gateCloser interface{ Close() error }
	gateLast   interface{ LastJSON() json.RawMessage }
)

// Config configures a Controller.
type Config struct {
	Store Store
	// Reports returns what the clients of ns reported, merged over every
	// server of the store: a first stage's cut is taken over them, and an
	// ended rollout's records counted.
	Reports func(ctx context.Context, ns string) ([]Report, error)
	// Partials returns what every source (each server's relays, and its
	// own clients) counted of running rollout st's current stage
	// (Counter.Count): what its steps decide on. nil: the steps count
	// Reports as one source.
	Partials func(ctx context.Context, st *State) ([]Partial, error)
	// Missing says how many reports of ns's clients since (a rollout's
	// start) some bound dropped on the way (a table full, a summary or a
	// queue cut), and why: a stage does not bake, and a bake does not end,
	// while reports are missing; the stage times out (or holds) saying so.
	// nil: none is ever missing.
	Missing func(ctx context.Context, ns string, since time.Time) (n int64, why string)
	// Gates builds a spec's gates; nil refuses specs with gates.
	Gates func(raw json.RawMessage) (Gate, error)
	// Liveness is how long a client of a stage may stay silent before it
	// counts as gone and holds the stage no more (0: never).
	Liveness time.Duration
	// Settle is how long a stage waits, at least, before it bakes: the
	// time the reports through other servers take to reach Reports (0:
	// none), so that a stage never bakes on one server's members alone.
	Settle time.Duration
	// Actor is the actor of the controller's own transitions.
	Actor  string
	Logger *slog.Logger
	// Poll is how often Run looks at the running rollouts (default 250ms).
	Poll time.Duration
	Now  func() time.Time
}

// Controller moves rollouts along (Run, on one server at a time) and
// serves the operators' requests (on any server).
type Controller struct {
	cfg  Config
	wake chan struct{}

	counter *Counter // the reports counted as one source (no Config.Partials)

	mu    sync.Mutex
	gates map[string][]Gate // rollout id → its gates, built once
}

// New returns a controller.
func New(cfg Config) *Controller {
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Poll <= 0 {
		cfg.Poll = 250 * time.Millisecond
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Actor == "" {
		cfg.Actor = "holdfast rollout controller"
	}
	if cfg.Reports == nil {
		cfg.Reports = func(context.Context, string) ([]Report, error) { return nil, nil }
	}
	if cfg.Missing == nil {
		cfg.Missing = func(context.Context, string, time.Time) (int64, string) { return 0, "" }
	}
	return &Controller{cfg: cfg, wake: make(chan struct{}, 1), counter: NewCounter(), gates: make(map[string][]Gate)}
}

// Wake makes Run look at once (a report came).
func (c *Controller) Wake() {
	select {
	case c.wake <- struct{}{}:
	default:
	}
}

func newID() string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return "r-" + hex.EncodeToString(b[:])
}

// stagedChange is the change that commits stage i of st.
func stagedChange(st *State, kind, actor, reason string) (*Change, error) {
	val, err := rollout.Encode(&rollout.Staged{ID: st.ID, Stage: st.Spec.Stages[st.Stage], Cut: st.Cut,
		Puts: st.Spec.Puts, Deletes: st.Spec.Deletes, Prevalidate: st.Spec.Prevalidate})
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	return &Change{Kind: kind, Actor: actor, Reason: reason, Puts: map[string]json.RawMessage{rollout.Key: val}}, nil
}

// buildGates builds a spec's gates (checking them).
func (c *Controller) buildGates(spec Spec) ([]Gate, error) {
	if len(spec.Gates) == 0 {
		return nil, nil
	}
	if c.cfg.Gates == nil {
		return nil, fmt.Errorf("%w: this server takes no gates", ErrInvalid)
	}
	var out []Gate
	for _, raw := range spec.Gates {
		g, err := c.cfg.Gates(raw)
		if err != nil {
			closeGates(out)
			return nil, fmt.Errorf("%w: gate %s: %v", ErrInvalid, raw, err)
		}
		out = append(out, g)
	}
	return out, nil
}

// Start starts a rollout of spec on ns: its first stage committed. It
// fails with ErrInvalid, ErrRunning, or the store's error (a schema that
// refuses the change is checked at the promotion).
func (c *Controller) Start(ctx context.Context, ns string, spec Spec, actor, reason string) (Record, error) {
	spec, err := CheckSpec(ns, spec)
	if err != nil {
		return Record{}, err
	}
	if len(reason) > MaxReasonBytes {
		return Record{}, fmt.Errorf("%w: reason longer than %d bytes", ErrInvalid, MaxReasonBytes)
	}
	cur, err := c.cfg.Store.Current(ctx, ns)
	if err != nil {
		return Record{}, err
	}
	if cur != nil && cur.State == Running {
		return Record{}, fmt.Errorf("%w: namespace %q: rollout %q", ErrRunning, ns, cur.ID)
	}
	if err := c.startGates(ctx, spec); err != nil {
		return Record{}, err
	}
	reports, err := c.cfg.Reports(ctx, ns)
	if err != nil {
		return Record{}, err
	}
	now := c.cfg.Now()
	st := &State{ID: newID(), Namespace: ns, Spec: spec, State: Running, StageAt: now, Revisions: []int64{0},
		Actor: actor, Started: now, Decisions: []Decision{}}
	known := knownHashes(st.ID, reports, now, c.cfg.Liveness)
	st.Cut, st.Blind = rollout.Cut(known, spec.Stages[0], 0), len(known) == 0
	if spec.Stages[0] >= 100 {
		st.Cut, st.Blind = math.MaxUint64, false
	}
	st.Cuts = []uint64{st.Cut}
	why := fmt.Sprintf("rollout %s started: stage %v%% of %v", st.ID, spec.Stages[0], spec.Stages)
	if reason != "" {
		why += ": " + reason
	}
	st.decide(Decision{At: now, What: "start", Stage: spec.Stages[0], Actor: actor, Reason: why})
	ch, err := stagedChange(st, KindStage, actor, clip(why, MaxReasonBytes))
	if err != nil {
		return Record{}, err
	}
	rev, err := c.cfg.Store.Commit(ctx, Commit{Prev: cur, Next: st, Change: ch})
	if errors.Is(err, ErrConflict) {
		return Record{}, fmt.Errorf("%w: namespace %q: another rollout started meanwhile", ErrRunning, ns)
	}
	if err != nil {
		return Record{}, err
	}
	st.Version = rev
	c.Wake()
	// Its first counts are those its cut was taken over: the reports (the
	// sources count it from their next write).
	return st.record(c.sumReports(st, reports, now, false).counts), nil
}

// startGates builds spec's gates and gives each its first check (Start,
// if it has one), then drops them: the leader builds its own. A gate that
// does not build or fails its first check refuses the start.
func (c *Controller) startGates(ctx context.Context, spec Spec) error {
	gates, err := c.buildGates(spec)
	defer closeGates(gates)
	if err != nil {
		return err
	}
	for i, g := range gates {
		s, ok := g.(gateStarter)
		if !ok {
			continue
		}
		if err := s.Start(ctx); err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			return fmt.Errorf("%w: gate %d (%s): %w", ErrGate, i, spec.Gates[i], err)
		}
	}
	return nil
}

func closeGates(gates []Gate) {
	for _, g := range gates {
		if cl, ok := g.(gateCloser); ok {
			_ = cl.Close()
		}
	}
}

// knownHashes are the hashes, in rollout id's order, of the clients a
// first stage's cut is taken over: those up to date (acked the newest
// revision any client acked) or heard from within the liveness window. A
// client gone long ago (an id of a restarted client) is left out, so a
// small stage is not spent on it.
func knownHashes(id string, reports []Report, now time.Time, window time.Duration) []uint64 {
	var head int64
	for _, r := range reports {
		head = max(head, r.Acked)
	}
	out := make([]uint64, 0, len(reports))
	for _, r := range reports {
		if window == 0 || r.Acked >= head || now.Sub(r.Seen) < window {
			out = append(out, rollout.Hash(id, r.ClientID))
		}
	}
	return out
}

// Abort reverts ns's running rollout id now.
func (c *Controller) Abort(ctx context.Context, ns, id, actor, reason string) (Record, error) {
	return c.end(ctx, ns, id, actor, reason, false)
}

// Promote makes ns's running rollout id's change the base now.
func (c *Controller) Promote(ctx context.Context, ns, id, actor, reason string) (Record, error) {
	return c.end(ctx, ns, id, actor, reason, true)
}

func (c *Controller) end(ctx context.Context, ns, id, actor, reason string, promote bool) (Record, error) {
	if len(reason) > MaxReasonBytes {
		return Record{}, fmt.Errorf("%w: reason longer than %d bytes", ErrInvalid, MaxReasonBytes)
	}
	for attempt := 0; ; attempt++ {
		cur, err := c.find(ctx, ns, id)
		if err != nil {
			return Record{}, err
		}
		if cur.State != Running {
			return Record{}, fmt.Errorf("%w: rollout %q of namespace %q is %s", ErrEnded, id, ns, cur.State)
		}
		in, err := c.read(ctx, cur)
		if err != nil {
			return Record{}, err
		}
		now := c.cfg.Now()
		counts := c.sum(cur, in, now, false).counts
		stage := cur.Spec.Stages[cur.Stage]
		var next *State
		if promote {
			why := fmt.Sprintf("promoted by %s at stage %v%%", orSomeone(actor), stage)
			if reason != "" {
				why += ": " + reason
			}
			next, err = c.promote(ctx, cur, counts, now, actor, why, nil)
		} else {
			why := fmt.Sprintf("aborted by %s at stage %v%%", orSomeone(actor), stage)
			if reason != "" {
				why += ": " + reason
			}
			next, err = c.revert(ctx, cur, counts, now, actor, "abort", why, nil)
		}
		if errors.Is(err, ErrConflict) && attempt < 5 {
			continue // the controller moved it meanwhile: look again
		}
		if err != nil {
			return Record{}, err
		}
		return next.record(counts), nil
	}
}

// Drop ends every running rollout, reverted with nothing committed to
// its namespace: for a store whose content was replaced under it (the
// reference server's reset and restore), where a revert has nothing left
// to revert.
func (c *Controller) Drop(ctx context.Context, reason string) error {
	running, err := c.cfg.Store.Running(ctx)
	if err != nil {
		return err
	}
	var errs []error
	for _, st := range running {
		for attempt := 0; st != nil && st.State == Running; attempt++ {
			now := c.cfg.Now()
			next := st.clone()
			next.State, next.Reason, next.Ended, next.BakeEnd = Reverted, clip(reason, MaxReasonBytes), now, time.Time{}
			counts := c.sum(st, input{}, now, false).counts
			next.Final = &counts
			next.decide(Decision{At: now, What: "revert", Stage: st.Spec.Stages[st.Stage], Actor: c.cfg.Actor, Reason: reason, Counts: &counts})
			_, err := c.commit(ctx, st, next, nil, nil)
			if !errors.Is(err, ErrConflict) || attempt >= 5 {
				if err != nil {
					errs = append(errs, err)
				}
				break
			}
			if st, err = c.cfg.Store.Current(ctx, st.Namespace); err != nil {
				errs = append(errs, err)
				break
			}
		}
	}
	return errors.Join(errs...)
}

func orSomeone(actor string) string {
	if actor == "" {
		return "an operator"
	}
	return actor
}

// find returns ns's rollout id.
func (c *Controller) find(ctx context.Context, ns, id string) (*State, error) {
	cur, err := c.cfg.Store.Current(ctx, ns)
	if err != nil {
		return nil, err
	}
	if cur != nil && cur.ID == id {
		return cur, nil
	}
	all, err := c.cfg.Store.List(ctx, ns)
	if err != nil {
		return nil, err
	}
	for _, st := range all {
		if st.ID == id {
			return st, nil
		}
	}
	return nil, fmt.Errorf("%w: %q in namespace %q", ErrUnknown, id, ns)
}

// Get returns the record of ns's rollout id.
func (c *Controller) Get(ctx context.Context, ns, id string) (Record, error) {
	st, err := c.find(ctx, ns, id)
	if err != nil {
		return Record{}, err
	}
	in, err := c.read(ctx, st)
	if err != nil {
		return Record{}, err
	}
	return c.recordOf(st, in), nil
}

// List returns ns's rollouts' records, newest first.
func (c *Controller) List(ctx context.Context, ns string) ([]Record, error) {
	all, err := c.cfg.Store.List(ctx, ns)
	if err != nil {
		return nil, err
	}
	if len(all) == 0 {
		return []Record{}, nil
	}
	// One read of the reports for every record counted from them: they
	// are all ns's.
	var reports []Report
	read := false
	out := make([]Record, 0, len(all))
	for _, st := range all {
		if c.fromPartials(st) {
			in, err := c.read(ctx, st)
			if err != nil {
				return nil, err
			}
			out = append(out, c.recordOf(st, in))
			continue
		}
		if !read {
			if reports, err = c.cfg.Reports(ctx, ns); err != nil {
				return nil, err
			}
			read = true
		}
		out = append(out, c.recordOf(st, input{reports: reports}))
	}
	return out, nil
}

// recordOf returns st's record, counted over in (read for st).
// An ended rollout's counts are those it ended with, raised by the
// reports of its revisions heard since (a client that served it and
// reports late still counts), never lowered (a server that no longer
// hears some of its clients).
func (c *Controller) recordOf(st *State, in input) Record {
	counts := c.sum(st, in, c.cfg.Now(), false).counts
	if st.State != Running && st.Final != nil {
		f := *st.Final
		f.Clients, f.Served, f.Acked = max(f.Clients, counts.Clients), max(f.Served, counts.Served), max(f.Acked, counts.Acked)
		f.Nacked, f.WouldNack = max(f.Nacked, counts.Nacked), max(f.WouldNack, counts.WouldNack)
		counts = f
	}
	rec := st.record(counts)
	if st.State != Running {
		rec.RolloutCounts = counts
	}
	return rec
}

// input is what a rollout is counted over: the partials of its sources
// (a running rollout's, with Config.Partials), or its namespace's
// reports.
type input struct {
	partials []Partial
	reports  []Report
}

// fromPartials reports whether st is counted over Config.Partials.
func (c *Controller) fromPartials(st *State) bool {
	return c.cfg.Partials != nil && st.State == Running
}

// read reads what st is counted over.
func (c *Controller) read(ctx context.Context, st *State) (input, error) {
	if c.fromPartials(st) {
		ps, err := c.cfg.Partials(ctx, st)
		return input{partials: ps}, err
	}
	reports, err := c.cfg.Reports(ctx, st.Namespace)
	return input{reports: reports}, err
}

// sum sums what st's sources counted of its stage, as of now: in's
// partials, or its reports counted as one source. keep: remember each
// client first counted (a step of a running rollout; the rest only use
// what is remembered).
func (c *Controller) sum(st *State, in input, now time.Time, keep bool) stageSum {
	if c.fromPartials(st) {
		return sumPartials(st, in.partials)
	}
	return c.sumReports(st, in.reports, now, keep)
}

// sumReports is sum over reports, counted as one source.
func (c *Controller) sumReports(st *State, reports []Report, now time.Time, keep bool) stageSum {
	return sumPartials(st, []Partial{c.counter.Count(st, "", reports, now, c.cfg.Liveness, keep)})
}

// Run moves the running rollouts along until ctx ends: every transition
// conditional on leading (the store's condition of this controller's
// leadership). Run it on one server at a time (the leader).
func (c *Controller) Run(ctx context.Context, leading any) error {
	tick := time.NewTicker(c.cfg.Poll)
	defer tick.Stop()
	defer c.dropGates() // a leader that leads no more keeps no gate open

	for {
		if err := c.Step(ctx, leading); err != nil && ctx.Err() == nil {
			c.cfg.Logger.Warn("rollout: a step failed", "err", err)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		case <-c.wake:
		}
	}
}

// Step looks at every running rollout once and moves it along.
func (c *Controller) Step(ctx context.Context, leading any) error {
	running, err := c.cfg.Store.Running(ctx)
	if err != nil {
		return err
	}
	var errs []error
	for _, st := range running {
		in, err := c.read(ctx, st)
		if err != nil {
			errs = append(errs, fmt.Errorf("rollout %s of %q: %w", st.ID, st.Namespace, err))
			continue
		}
		// A stage may end as it begins: take a few steps at once (over the
		// same reports; a source's partials of the stage that ended are of
		// the next no more).
		for range 4 {
			next, err := c.stepWith(ctx, st, in, leading)
			if err != nil {
				if !errors.Is(err, ErrConflict) {
					errs = append(errs, fmt.Errorf("rollout %s of %q: %w", st.ID, st.Namespace, err))
				}
				break
			}
			if next == nil || next.State != Running {
				break
			}
			st = next
		}
	}
	c.forget(running)
	return errors.Join(errs...)
}

// forget drops what the controller keeps of rollouts no longer running.
func (c *Controller) forget(running []*State) {
	c.counter.Forget(func(id string) bool {
		return slices.ContainsFunc(running, func(s *State) bool { return s.ID == id })
	})
	c.mu.Lock()
	defer c.mu.Unlock()
	for id, gates := range c.gates {
		if !slices.ContainsFunc(running, func(s *State) bool { return s.ID == id }) {
			closeGates(gates)
			delete(c.gates, id)
		}
	}
}

// dropGates closes and forgets every gate built.
func (c *Controller) dropGates() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for id, gates := range c.gates {
		closeGates(gates)
		delete(c.gates, id)
	}
}

// Close drops the gates the controller built (their connections). Call it
// once Run and Step are done.
func (c *Controller) Close() {
	c.forget(nil)
}

// step decides on st and commits the transition, if any; it returns the
// new state (nil: none).
func (c *Controller) step(ctx context.Context, st *State, leading any) (*State, error) {
	in, err := c.read(ctx, st)
	if err != nil {
		return nil, err
	}
	return c.stepWith(ctx, st, in, leading)
}

// stepWith is step over in.
func (c *Controller) stepWith(ctx context.Context, st *State, in input, leading any) (*State, error) {
	now := c.cfg.Now()
	t := c.sum(st, in, now, true)
	counts := t.counts
	stage := st.Spec.Stages[st.Stage]
	if t.nackers > st.Spec.MaxNacks {
		return c.revert(ctx, st, counts, now, c.cfg.Actor, "revert", t.nackReason(st), leading)
	}
	staleN, staleWhy := t.missing()
	if st.Blind && counts.InStage == 0 && counts.Gone == 0 && !st.Held && staleN == 0 {
		if next, why := c.recut(st, t, now); next != nil {
			ch, err := stagedChange(next, KindStage, c.cfg.Actor, clip("rollout "+st.ID+": "+why, MaxReasonBytes))
			if err != nil {
				return nil, err
			}
			return c.commit(ctx, st, next, ch, leading)
		}
	}
	missing, missingWhy := c.cfg.Missing(ctx, st.Namespace, st.Started)
	if staleN > 0 {
		missing += staleN
		missingWhy = strings.TrimPrefix(missingWhy+"; "+staleWhy, "; ")
	}
	if st.BakeEnd.IsZero() {
		// A stage whose members are all gone has no evidence either way:
		// it waits for a member's report (a client that joins and falls
		// in the stage) as one with members yet to report does, and ends
		// as they do at its timeout. A stage with no members at all
		// (and, recut above, no client known) passes: there is nobody
		// to hear.
		noEvidence := counts.InStage == 0 && counts.Gone > 0
		// Reports known missing (a bound dropped them) hold it too: the
		// counts are not the whole stage's.
		if counts.Reported < counts.InStage || noEvidence || missing > 0 {
			if now.Sub(st.StageAt) < st.Spec.StageTimeout || st.Held {
				return nil, nil
			}
			why := fmt.Sprintf("stage %v%% timed out after %v: %d of %d client(s) reported, %d lagging, %d gone",
				stage, st.Spec.StageTimeout, counts.Reported, counts.InStage, counts.Lagging, counts.Gone)
			if missing > 0 {
				why += fmt.Sprintf(", %d report(s) missing (%s)", missing, missingWhy)
			}
			if st.Spec.OnTimeout == Hold {
				return c.hold(ctx, st, counts, now, why+"; holding (promote or abort it)", leading)
			}
			return c.revert(ctx, st, counts, now, c.cfg.Actor, "revert", why, leading)
		}
		if st.Spec.Prevalidate && now.Before(st.StageAt.Add(min(st.Spec.ReportTimeout, st.Spec.StageTimeout))) && t.waiting > 0 {
			return nil, nil
		}
		if now.Sub(st.StageAt) < c.cfg.Settle {
			return nil, nil
		}
		next := st.clone()
		next.BakeEnd, next.Held, next.Reason = now.Add(st.Spec.Bake), false, ""
		next.decide(Decision{At: now, What: "bake", Stage: stage, Actor: c.cfg.Actor, Counts: &counts,
			Reason: fmt.Sprintf("stage %v%%: %d of %d client(s) reported (%d gone); baking %v", stage, counts.Reported, counts.InStage, counts.Gone, st.Spec.Bake)})
		return c.commit(ctx, st, next, nil, leading)
	}
	breach, why, failing, results := c.checkGates(ctx, st)
	if results != nil {
		// Kept with whatever the step commits (not a commit of its own).
		st = st.clone()
		st.GateResults = results
	}
	if !slices.Equal(failing, st.GateFailing) {
		// Whatever the step commits keeps the gates' failures; a step that
		// commits nothing else commits them alone (only when one changes).
		prev := st
		st = st.clone()
		st.GateFailing = failing
		if !breach && (now.Before(st.BakeEnd) || st.Held) {
			return c.commit(ctx, prev, st, nil, leading)
		}
		st.Version = prev.Version
	}
	if breach {
		if st.Spec.OnBreach == Hold {
			if st.Held {
				return nil, nil
			}
			return c.hold(ctx, st, counts, now, why+"; holding (promote or abort it)", leading)
		}
		return c.revert(ctx, st, counts, now, c.cfg.Actor, "revert", why, leading)
	}
	if now.Before(st.BakeEnd) || st.Held {
		return nil, nil
	}
	if missing > 0 {
		return c.hold(ctx, st, counts, now, fmt.Sprintf("stage %v%% baked %v, but %d report(s) are missing (%s); holding (promote or abort it)",
			stage, st.Spec.Bake, missing, missingWhy), leading)
	}
	baked := fmt.Sprintf("stage %v%% baked %v: %d of %d client(s) reported, %d gone, %d nack(s)", stage, st.Spec.Bake,
		counts.Reported, counts.InStage, counts.Gone, t.nackers)
	// The bake's end is a decision of its own, committed with what follows
	// it (the next stage or the promotion) in one write.
	st = st.clone()
	st.decide(Decision{At: now, What: "bake-end", Stage: stage, Actor: c.cfg.Actor, Reason: baked, Counts: &counts})
	if st.Stage+1 >= len(st.Spec.Stages) {
		return c.promote(ctx, st, counts, now, c.cfg.Actor, baked+"; promoted", leading)
	}
	next := st.clone()
	next.Stage++
	pct := st.Spec.Stages[next.Stage]
	next.Cut, next.Blind = t.cut(pct, st.Cut), t.live == 0
	if pct >= 100 {
		next.Cut, next.Blind = math.MaxUint64, false
	}
	next.Cuts = append(next.Cuts, next.Cut)
	next.StageAt, next.BakeEnd, next.Held, next.Reason = now, time.Time{}, false, ""
	next.Revisions = append(next.Revisions, 0)
	why = baked + fmt.Sprintf("; stage %v%%", pct)
	next.decide(Decision{At: now, What: "stage", Stage: pct, Actor: c.cfg.Actor, Reason: why})
	ch, err := stagedChange(next, KindStage, c.cfg.Actor, "rollout "+st.ID+": "+why)
	if err != nil {
		return nil, err
	}
	return c.commit(ctx, st, next, ch, leading)
}

// recut returns st with its stage cut again over the clients known now,
// and why, when its cut was blind (taken with no client known: the
// stage's share of the hash space); nil when no client is known or the
// stage is 100%. A blind stage can miss every client, 12% of the time
// for a 10% stage of 20 clients, and would bake with nobody in it: a bad
// change would then meet the next stage unheard. The cut rises to hold
// Count of the known clients, as a cut over them at the start would have
// (never lower: nobody in the stage leaves it), and the stage starts
// over: its new revision reported, its timeout and bake in full. A cut
// taken over known clients is never recut: a leader that took over and
// knows none of a stage's members yet (their reports come through
// another server) must not widen the stage.
func (c *Controller) recut(st *State, t stageSum, now time.Time) (next *State, why string) {
	stage := st.Spec.Stages[st.Stage]
	if stage >= 100 || t.live == 0 {
		return nil, ""
	}
	cut := t.cut(stage, st.Cut)
	if cut <= st.Cut {
		return nil, ""
	}
	next = st.clone()
	next.Cut, next.Blind = cut, false
	if next.Stage < len(next.Cuts) {
		next.Cuts[next.Stage] = cut
	}
	next.Revisions[next.Stage] = 0 // the recut's, once committed
	next.StageAt, next.BakeEnd, next.Held, next.Reason = now, time.Time{}, false, ""
	why = fmt.Sprintf("stage %v%% held none of the %d client(s) known now (cut before they reported); cut again over them: %d in it",
		stage, t.live, rollout.Count(t.live, stage))
	next.decide(Decision{At: now, What: "recut", Stage: stage, Actor: c.cfg.Actor, Reason: why})
	return next, why
}

// checkGates evaluates st's gates while it bakes: whether one is
// breached and why, and since when each has been failing (nil: none is),
// as State.GateFailing keeps it. The gates are built once per rollout, and
// resume the failures st keeps (a failover).
func (c *Controller) checkGates(ctx context.Context, st *State) (breach bool, why string, failing []time.Time, results []json.RawMessage) {
	if len(st.Spec.Gates) == 0 {
		return false, "", nil, nil
	}
	c.mu.Lock()
	gates, ok := c.gates[st.ID]
	c.mu.Unlock()
	if !ok {
		var err error
		if gates, err = c.buildGates(st.Spec); err != nil {
			return true, fmt.Sprintf("the gates do not build: %v", err), st.GateFailing, nil
		}
		for i, g := range gates {
			if r, ok := g.(gateResumer); ok && i < len(st.GateFailing) && !st.GateFailing[i].IsZero() {
				r.Resume(st.GateFailing[i])
			}
		}
		c.mu.Lock()
		c.gates[st.ID] = gates
		c.mu.Unlock()
	}
	failing = make([]time.Time, len(gates))
	anyFailing := false
	for i, g := range gates {
		b, detail, err := g.Check(ctx)
		if err != nil {
			c.cfg.Logger.Warn("rollout: a gate failed to evaluate", "rollout", st.ID, "gate", i, "err", err)
		}
		if r, ok := g.(gateResumer); ok {
			failing[i] = r.FailingSince().UTC()
			anyFailing = anyFailing || !failing[i].IsZero()
		}
		if b && !breach {
			breach, why = true, fmt.Sprintf("gate %d breached at stage %v%%: %s", i, st.Spec.Stages[st.Stage], detail)
		}
		if l, ok := g.(gateLast); ok {
			if results == nil {
				results = make([]json.RawMessage, len(gates))
			}
			results[i] = l.LastJSON()
		}
	}
	if !anyFailing {
		failing = nil
	}
	return breach, why, failing, results
}

func (c *Controller) hold(ctx context.Context, st *State, counts Counts, now time.Time, why string, leading any) (*State, error) {
	next := st.clone()
	next.Held, next.Reason = true, clip(why, MaxReasonBytes)
	next.decide(Decision{At: now, What: "hold", Stage: st.Spec.Stages[st.Stage], Actor: c.cfg.Actor, Reason: why, Counts: &counts})
	return c.commit(ctx, st, next, nil, leading)
}

// revert commits st's revert (what: revert, abort).
func (c *Controller) revert(ctx context.Context, st *State, counts Counts, now time.Time, actor, what, why string, leading any) (*State, error) {
	next := st.clone()
	next.State, next.Reason, next.Ended, next.BakeEnd = Reverted, clip(why, MaxReasonBytes), now, time.Time{}
	next.Final = &counts
	next.Revisions = append(next.Revisions, 0)
	next.decide(Decision{At: now, What: what, Stage: st.Spec.Stages[st.Stage], Actor: actor, Reason: why, Counts: &counts})
	ch := &Change{Kind: KindRevert, Actor: actor, Reason: clip("rollout "+st.ID+": "+why, MaxReasonBytes), Deletes: []string{rollout.Key}}
	return c.commit(ctx, st, next, ch, leading)
}

// promote commits st's promotion; one the schema refuses reverts.
func (c *Controller) promote(ctx context.Context, st *State, counts Counts, now time.Time, actor, why string, leading any) (*State, error) {
	next := st.clone()
	next.State, next.Reason, next.Ended, next.BakeEnd, next.Held = Promoted, clip(why, MaxReasonBytes), now, time.Time{}, false
	next.Final = &counts
	next.Revisions = append(next.Revisions, 0)
	next.decide(Decision{At: now, What: "promote", Stage: st.Spec.Stages[st.Stage], Actor: actor, Reason: why, Counts: &counts})
	ch := &Change{Kind: KindPromote, Actor: actor, Reason: clip("rollout "+st.ID+": "+why, MaxReasonBytes), Puts: st.Spec.Puts,
		Deletes: append(slices.Clone(st.Spec.Deletes), rollout.Key), Check: true}
	done, err := c.commit(ctx, st, next, ch, leading)
	if err != nil && !errors.Is(err, ErrConflict) && ctx.Err() == nil {
		c.cfg.Logger.Warn("rollout: the promotion was refused; reverting", "rollout", st.ID, "err", err)
		return c.revert(ctx, st, counts, now, c.cfg.Actor, "revert", fmt.Sprintf("promotion refused: %v", err), leading)
	}
	return done, err
}

func (c *Controller) commit(ctx context.Context, prev, next *State, ch *Change, leading any) (*State, error) {
	rev, err := c.cfg.Store.Commit(ctx, Commit{Prev: prev, Next: next, Change: ch, Leading: leading})
	if err != nil {
		return nil, err
	}
	next.Version = rev
	last := next.Decisions[len(next.Decisions)-1]
	c.cfg.Logger.Info("rollout: "+last.What, "ns", next.Namespace, "rollout", next.ID, "stage", last.Stage, "revision", rev, "reason", last.Reason)
	return next, nil
}
