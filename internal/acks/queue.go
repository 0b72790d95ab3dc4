package acks

import (
	"cmp"
	"context"
	"errors"
	"log/slog"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/holdfast-dev/holdfast/internal/syncer"
	"github.com/holdfast-dev/holdfast/internal/version"
	"github.com/holdfast-dev/holdfast/internal/wire"
	"github.com/holdfast-dev/holdfast/transport"
)

// The windows over which a client spreads its acks: an outcome waits a
// random delay within one, so that the clients of a publish do not all
// report in the same millisecond. A plain ack takes the wider window,
// which mostly falls after the publish has reached the fleet: the acks of
// ten thousand clients then do not compete with the delivery to the last
// of them. A nack, a would-nack, and any report while a rollout runs in
// the namespace (its stage may wait on it) take the narrow one. When the
// first outcome waiting is due, everything waiting goes, of any
// namespace, in one batch; a relay forwards in the narrow window (its
// clients spread theirs).
const (
	ackDelayMin = 50 * time.Millisecond
	ackDelayMax = 250 * time.Millisecond
	// AckDelayPlainMax bounds how long a plain ack waits: a benchmark
	// that measures a publish's acks waits at least this long for them.
	AckDelayPlainMax = time.Second
	ackDelayPlainMin = 250 * time.Millisecond
)

// relayPlainDelay is how long a relay that sends cohort reports holds a
// plain ack (applied, no rollout running in its namespace): long enough
// that the acks of all its clients of one publish, which they spread over
// AckDelayPlainMax after their receipt, mostly go in one report, as one
// run of slots. A report of the acks of a publish's first quarter-second
// and another of the next would cost the origin a request each, and runs
// of slots as many as the clients in them.
const relayPlainDelay = AckDelayPlainMax + 500*time.Millisecond

// maxPending bounds the outcomes waiting (each client's newest of each
// namespace and kind): past it, an outcome of one more is dropped, so
// that a relay whose upstream is down does not grow without bound. Ten
// thousand clients of a dozen namespaces fit. A drop is not a silent
// pass for a rollout: the relay counts it (OnDrop) into its presence
// table, whose reports upstream say how many outcomes of which namespace
// it lost and when (wire.PresenceReport.Lost); a server counts them as
// reports missing, and a rollout of the namespace holds.
const maxPending = 1 << 18

// Queue reports outcomes (applied or rejected revisions) to the config
// plane, off the apply path, on one goroutine for all namespaces: a
// client's own, or those of the clients a relay forwards. Outcomes
// coalesce: the newest of each client's namespace is waiting at any time.
// They go as one wire.CohortAcker report (plain outcomes) and one
// wire.RelayAcker batch (the others) for a relay, one
// transport.BatchAcker batch when the source has it, else one Ack each.
// Reporting is best effort: failures back off and retry the newest
// outcomes, and never touch reads or applies.
type Queue struct {
	// Read-only after New.
	src     transport.Acker
	batch   transport.BatchAcker // nil when the source has none
	relay   wire.RelayAcker      // a relay's, when the source has it
	relayID string
	// A relay's upstream that takes cohort reports, and the relay's
	// numbering of its clients for them: run's alone.
	cohort  wire.CohortAcker
	cohorts *cohorts
	// The context sends run under (sendContext): run's alone.
	sendCtx    context.Context
	sendCancel context.CancelFunc
	log        *slog.Logger
	wake       chan struct{} // cap 1: an outcome is pending

	startOnce sync.Once
	wg        sync.WaitGroup

	mu sync.Mutex // guards pending, due, dropped, max, onDrop
	// pending holds the newest ack and the newest nack of each namespace
	// not yet taken by run, by value: a relay's ten thousand a publish
	// then reuse the map's slots, where a pointer each was allocated.
	pending map[ackKey]transport.Ack
	due     time.Time       // when the first outcome pending is due; zero when none
	dropped int             // outcomes dropped past max
	max     int             // maxPending, but in tests
	onDrop  func(ns string) // hears of each outcome dropped
	taken   []transport.Ack // run's: what take returned last, its buffer reused
	// kept is each client's last report of each namespace, to tell
	// again (Keep, Resend); nil when the Queue keeps none.
	kept *kept
}

// ackKey keeps a namespace's newest ack and newest nack apart: they are
// different facts (what it applied, what it rejected), and the server's
// view needs both, as a rejection right after an apply must not hide it.
type ackKey struct{ client, ns, status string }

// New returns a Queue reporting to src. With relayID set it forwards the
// outcomes of other clients, as the relay relayID, in one batch for all
// of them when src is a wire.RelayAcker.
func New(src transport.Acker, log *slog.Logger, relayID string) *Queue {
	a := &Queue{src: src, log: log, relayID: relayID, wake: make(chan struct{}, 1), pending: make(map[ackKey]transport.Ack),
		max: maxPending}
	a.batch, _ = src.(transport.BatchAcker)
	if relayID != "" {
		a.relay, _ = src.(wire.RelayAcker)
		if a.cohort, _ = src.(wire.CohortAcker); a.cohort != nil && a.relay != nil {
			a.cohorts = newCohorts()
		}
	}
	return a
}

// SetMaxPending sets the bound on the outcomes waiting (0: maxPending),
// before the first Add; a relay's tests set a small one.
func (a *Queue) SetMaxPending(n int) {
	if a == nil {
		return
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	a.max = cmp.Or(n, maxPending)
}

// OnDrop sets fn to hear of each outcome the Queue drops, past its bound
// on the outcomes waiting, with its namespace: a relay counts them as
// lost (presence.Table.NoteLost), for its upstream to know. fn must not
// call the Queue. A nil Queue ignores it.
func (a *Queue) OnDrop(fn func(ns string)) {
	if a == nil {
		return
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	a.onDrop = fn
}

// Report queues the outcome of a client's namespace, ack.Revision applied
// or (err not nil) rejected; rollout, when set, names the staged rollout
// whose change the client applied or rejected as a member of its stage
// (transport.Ack.Rollout); staged says that a rollout runs in the
// namespace's data, member or not, so that the report goes promptly. The
// client is this process: the ack carries this SDK's version. See Add.
func (a *Queue) Report(clientID, ns string, revision int64, rollout string, staged bool, err error) {
	ack := transport.Ack{ClientID: clientID, Namespace: ns, Revision: revision, Status: transport.AckApplied, Rollout: rollout,
		SDKVersion: version.SDK}
	if err != nil {
		ack.Status, ack.Error = transport.AckRejected, err.Error()
	}
	a.add(ack, staged || rollout != "" || err != nil)
}

// Add queues ack without blocking, to go within the narrow window unless
// it is a plain ack (applied, of no rollout); it replaces an outcome of
// the same client's namespace of the same kind (ack or nack) not yet
// sent, even one of a later revision (see add). A nil Queue ignores it.
func (a *Queue) Add(ack transport.Ack) { a.Forward(ack, false) }

// Forward is Add for a relay. With prompt (a rollout runs in the
// namespace: its stage may wait for the ack; or a relay downstream held
// it already) a plain ack goes in the narrow window too; otherwise it
// waits for a cohort report (relayPlainDelay) when the upstream takes
// them.
func (a *Queue) Forward(ack transport.Ack, prompt bool) {
	a.add(ack, prompt || ack.Status != transport.AckApplied || ack.Rollout != "")
}

// add queues ack, in place of the outcome of the same kind waiting,
// whatever their revisions: a client reports its outcomes in the order it
// applies them (and a relay forwards them in the order they come, one
// batch of a client after another), so a lower revision after a higher
// one is of a new history (the store was reset or restored), whose ack
// the one of the old history must not hide: the server drops an ack above
// its head, and a client of a reset store was seen never to report again.
func (a *Queue) add(ack transport.Ack, prompt bool) {
	if a == nil {
		return
	}
	var delay time.Duration
	switch {
	case prompt || a.relayID != "" && (a.cohorts == nil || !a.cohort.CohortsOffered()):
		delay = ackDelayMin + rand.N(ackDelayMax-ackDelayMin)
	case a.relayID != "": // to an upstream that takes cohort reports
		delay = relayPlainDelay // one process: nothing to spread
	default:
		delay = ackDelayPlainMin + rand.N(AckDelayPlainMax-ackDelayPlainMin)
	}
	due := time.Now().Add(delay)
	k := ackKey{ack.ClientID, ack.Namespace, ack.Status}
	a.mu.Lock()
	var onDrop func(string)
	a.keepLocked(ack)
	switch _, ok := a.pending[k]; {
	case !ok && len(a.pending) >= a.max:
		onDrop = a.dropLocked()
	default:
		a.pending[k] = ack
		if a.due.IsZero() || due.Before(a.due) {
			a.due = due
		}
	}
	a.mu.Unlock()
	if onDrop != nil {
		onDrop(ack.Namespace)
	}
	select {
	case a.wake <- struct{}{}:
	default:
	}
}

// dropLocked counts an outcome dropped, and returns who must hear of it
// once a.mu is released. a.mu is held.
func (a *Queue) dropLocked() func(string) {
	a.dropped++
	if a.dropped == 1 {
		a.log.Warn("acks: too many outcomes waiting to be reported; dropping new ones", "max", a.max)
	}
	return a.onDrop
}

// Start starts the Queue's goroutine, once, until ctx ends; after a
// failure it waits as policy says (backoff, Retry-After, the unauthorized
// wait).
func (a *Queue) Start(ctx context.Context, policy syncer.Backoff) {
	if a == nil {
		return
	}
	a.startOnce.Do(func() {
		a.wg.Add(1)
		go func() { defer a.wg.Done(); a.run(ctx, policy) }()
	})
}

// Wait waits for the goroutine to return, once Start's ctx ended.
func (a *Queue) Wait() {
	if a != nil {
		a.wg.Wait()
	}
}

// take returns the pending outcomes, each namespace's in revision order
// (order across namespaces means nothing), in the buffer of the last
// take's: only run calls it, and nothing keeps what deliver was given.
func (a *Queue) take() []transport.Ack {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.due = time.Time{}
	if len(a.pending) == 0 {
		return nil
	}
	acks := a.taken[:0]
	for _, ack := range a.pending {
		acks = append(acks, ack)
	}
	clear(a.pending)
	a.taken = acks
	slices.SortFunc(acks, func(x, y transport.Ack) int {
		return cmp.Or(strings.Compare(x.ClientID, y.ClientID), strings.Compare(x.Namespace, y.Namespace), cmp.Compare(x.Revision, y.Revision))
	})
	return acks
}

// requeue puts back the outcomes of a failed send, unless a newer one of
// the same namespace came meanwhile.
func (a *Queue) requeue(acks []transport.Ack) {
	var dropped []string // the namespaces of the outcomes dropped
	var onDrop func(string)
	a.mu.Lock()
	for i := range acks {
		k := ackKey{acks[i].ClientID, acks[i].Namespace, acks[i].Status}
		switch _, newer := a.pending[k]; {
		case newer:
		case len(a.pending) >= a.max:
			onDrop = a.dropLocked()
			dropped = append(dropped, acks[i].Namespace)
		default:
			a.pending[k] = acks[i]
		}
	}
	a.mu.Unlock()
	if onDrop != nil {
		for _, ns := range dropped {
			onDrop(ns)
		}
	}
}

// run sends outcomes until ctx ends. After a failure it waits as policy
// says (the client's: backoff, Retry-After, the unauthorized wait).
func (a *Queue) run(ctx context.Context, policy syncer.Backoff) {
	bo := policy.New()
	t := time.NewTimer(time.Hour)
	t.Stop()
	defer t.Stop()
	defer func() {
		if a.sendCancel != nil {
			a.sendCancel()
		}
	}()
	for {
		select {
		case <-ctx.Done():
			return
		case <-a.wake:
		}
		// Spread: wait until the first outcome pending is due (an
		// earlier one may come meanwhile), gathering what else comes in.
		for {
			a.mu.Lock()
			wait := time.Until(a.due)
			if a.due.IsZero() {
				wait = 0 // taken already (by a retry): nothing to wait for
			}
			a.mu.Unlock()
			if wait <= 0 {
				break
			}
			t.Reset(wait)
			select {
			case <-ctx.Done():
				return
			case <-a.wake:
				t.Stop()
			case <-t.C:
			}
		}
		for acks := a.take(); len(acks) > 0; acks = a.take() {
			unsent, err := a.deliver(ctx, acks)
			if err == nil {
				bo.Reset()
				continue
			}
			if ctx.Err() != nil {
				return
			}
			a.log.Debug("acks not delivered; will retry", "acks", len(unsent), "err", err)
			a.requeue(unsent) // the newest outcome of each namespace wins
			if policy.Wait(ctx, bo, err); ctx.Err() != nil {
				return
			}
		}
	}
}

// deliver sends acks. A batch refused as malformed is sent again in
// halves until the refused acks are alone, and those are dropped (sending
// them again cannot help): one client's report that the server refuses (a
// relay forwards every kind) must not cost the others theirs. After a
// failure of another kind it returns it, with the acks not yet delivered.
func (a *Queue) deliver(ctx context.Context, acks []transport.Ack) ([]transport.Ack, error) {
	// Reports of a kind this version does not know (a relay forwards
	// them for a later upstream) go last, in a batch of their own: an
	// upstream that refuses them then refuses only them, on an ack stream
	// too, which a refused line ends without a word.
	if slices.ContainsFunc(acks, unknown) && slices.ContainsFunc(acks, known) {
		other := slices.DeleteFunc(slices.Clone(acks), known)
		if unsent, err := a.deliver(ctx, slices.DeleteFunc(acks, unknown)); err != nil {
			return append(unsent, other...), err
		}
		return a.deliver(ctx, other)
	}
	start := time.Now()
	err := a.send(ctx, acks)
	switch {
	case err == nil:
		a.logForwarded(ctx, start, acks)
		return nil, nil
	case ctx.Err() != nil || !errors.Is(err, transport.ErrBadRequest):
		return acks, err
	case len(acks) == 1:
		a.log.Warn("ack refused by the server; dropped", "client_id", acks[0].ClientID, "ns", acks[0].Namespace,
			"status", acks[0].Status, "err", err)
		return nil, nil
	}
	half := len(acks) / 2
	if unsent, err := a.deliver(ctx, acks[:half]); err != nil {
		return append(unsent, acks[half:]...), err
	}
	return a.deliver(ctx, acks[half:])
}

// logForwarded writes, at debug level and for a relay only, the acks it
// has just forwarded and when their send began: where a client's report
// left the relay, so that the pipeline from the relay to a rollout's
// controller can be timed from outside (internal/scale's
// BenchmarkServerRollout reads it). Each ack is "ns revision status
// rollout client" (rollout "-" when none; the client id last, as it may
// hold spaces).
func (a *Queue) logForwarded(ctx context.Context, start time.Time, acks []transport.Ack) {
	if a.relayID == "" || !a.log.Enabled(ctx, slog.LevelDebug) {
		return
	}
	each := make([]string, len(acks))
	for i, ack := range acks {
		each[i] = ack.Namespace + " " + strconv.FormatInt(ack.Revision, 10) + " " + ack.Status + " " + cmp.Or(ack.Rollout, "-") + " " + ack.ClientID
	}
	a.log.Debug("acks forwarded", "sent", start, "took", time.Since(start), "n", len(acks), "acks", each)
}

// known reports whether this version knows a's status. A would-nack is
// known: it goes in the same batch as the ack of the base it comes with,
// so that a rollout's stage, which may end on that ack, hears both at once.
func known(a transport.Ack) bool {
	return a.Status == transport.AckApplied || a.Status == transport.AckRejected || a.Status == transport.AckWouldReject
}

func unknown(a transport.Ack) bool { return !known(a) }

// sendTimeout bounds a send: between sendTimeout/2 and sendTimeout, as
// the context is reused (sendContext).
const sendTimeout = 10 * time.Second

// sendContext returns the context a send runs under: a child of ctx (run's,
// the same at every call) that ends within sendTimeout, reused by the
// sends that follow while more than half of it is left. A context and a timer for every send were
// a client's most frequent allocations after its acks themselves.
func (a *Queue) sendContext(ctx context.Context) context.Context {
	if a.sendCtx != nil {
		if d, _ := a.sendCtx.Deadline(); time.Until(d) > sendTimeout/2 && a.sendCtx.Err() == nil {
			return a.sendCtx
		}
		a.sendCancel()
	}
	a.sendCtx, a.sendCancel = context.WithTimeout(ctx, sendTimeout)
	return a.sendCtx
}

// send reports acks: as one batch, or one by one; it stops at the first
// failure, and what was not sent is the caller's to retry (sending an ack
// twice is harmless: the newest outcome is the server's).
func (a *Queue) send(ctx context.Context, acks []transport.Ack) error {
	sendCtx := a.sendContext(ctx)
	if a.relay != nil {
		if a.cohorts != nil {
			// Plain outcomes as a cohort report, the others one by one.
			rest, err := a.cohorts.send(sendCtx, a.cohort, a.relayID, acks)
			if err != nil || len(rest) == 0 {
				return err
			}
			acks = rest
		}
		return a.relay.AckRelayed(sendCtx, a.relayID, acks)
	}
	if a.batch != nil {
		// A source that finds the server without batches says so with
		// ErrStreamUnsupported: then one by one.
		if err := a.batch.AckBatch(sendCtx, acks); !errors.Is(err, transport.ErrStreamUnsupported) {
			return err
		}
	}
	for _, ack := range acks {
		if err := a.src.Ack(sendCtx, ack); err != nil {
			return err
		}
	}
	return nil
}
