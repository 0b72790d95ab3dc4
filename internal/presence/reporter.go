package presence

import (
	"context"
	"encoding/json"
	"log/slog"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/holdfast-dev/holdfast/internal/wire"
)

// ReportEvery bounds how often a relay reports its presence: changes
// wait for the next report, so that a thousand clients that connect in
// one second cost one request.
const ReportEvery = time.Second

// Reporter sends a relay's table upstream as presence reports: its
// changes, at most every ReportEvery, and a report every keepalive
// whether anything changed or not (the upstream holds the relay's
// clients stale when it hears nothing for two of them). The whole set
// goes at the start and again whenever the upstream does not know the
// run of reports (it restarted, the relay failed over, a send failed).
type Reporter struct {
	t         *Table
	src       wire.PresenceReporter
	relayID   string
	keepalive time.Duration
	log       *slog.Logger

	// run's alone
	epoch string
	seq   uint64
	sent  map[string]State
	lost  int64 // the sum of the counts the last report said lost
	full  bool
	last  time.Time
}

// NewReporter returns a Reporter of t's entries to src, as relayID,
// reporting at least every keepalive.
func NewReporter(t *Table, src wire.PresenceReporter, relayID string, keepalive time.Duration, log *slog.Logger) *Reporter {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Reporter{t: t, src: src, relayID: relayID, keepalive: max(keepalive, ReportEvery), log: log,
		epoch: strconv.FormatUint(rand.Uint64(), 36), full: true}
}

// farewellTimeout bounds the report a relay sends as it stops.
const farewellTimeout = time.Second

// Run reports until ctx ends; then it tells the upstream, within
// farewellTimeout, that every client left (a relay that stops ends
// their streams): they show gone there, not stale.
func (r *Reporter) Run(ctx context.Context) {
	tick := time.NewTicker(ReportEvery)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			r.farewell(context.WithoutCancel(ctx))
			return
		case <-tick.C:
		}
		if err := r.Tick(ctx); err != nil && ctx.Err() == nil {
			r.log.Debug("relay: presence report not delivered; the whole set goes next", "err", err)
		}
	}
}

// Tick sends what changed since the last report (everything when the
// upstream must hear the whole set), or a keepalive when it is due.
func (r *Reporter) Tick(ctx context.Context) error {
	return r.tick(ctx, false)
}

// farewell sends a full report that lists no client, once a report went.
func (r *Reporter) farewell(ctx context.Context) {
	if r.last.IsZero() || !r.src.PresenceOffered() {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, farewellTimeout)
	defer cancel()
	if err := r.tick(ctx, true); err != nil {
		r.log.Debug("relay: the presence report of its stop not delivered; its clients show stale upstream until forgotten", "err", err)
	}
}

func (r *Reporter) tick(ctx context.Context, stopping bool) error {
	if stopping {
		r.full = true
	}
	if !r.src.PresenceOffered() {
		r.full = true // an upstream that comes to offer it hears everything
		return nil
	}
	entries := r.t.Entries()
	if stopping {
		entries = nil // a full report of none: every client left
	}
	type change struct {
		id string
		st State
	}
	var changes []change
	for id, e := range entries {
		if st := e.State; r.full || r.sent[id] != st {
			changes = append(changes, change{id, st})
		}
	}
	// What was lost goes whole in every report; a new loss is a change.
	lost := reportLost(r.t.Lost(), r.relayID)
	var lostN int64
	for _, l := range lost {
		lostN += l.N
	}
	now := time.Now()
	if !r.full && len(changes) == 0 && lostN == r.lost && now.Sub(r.last) < r.keepalive {
		return nil
	}
	slices.SortFunc(changes, func(x, y change) int { return strings.Compare(x.id, y.id) })
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	first := true
	for len(changes) > 0 || first {
		n := min(len(changes), wire.MaxPresenceClients)
		rep := wire.PresenceReport{RelayID: r.relayID, Epoch: r.epoch, Seq: r.seq + 1, Full: r.full && first,
			EveryMillis: r.keepalive.Milliseconds(), Lost: lost}
		for _, c := range changes[:n] {
			switch c.st {
			case Live:
				rep.Live = append(rep.Live, c.id)
			case Stale:
				rep.Stale = append(rep.Stale, c.id)
			default:
				rep.Gone = append(rep.Gone, c.id)
			}
		}
		body, err := json.Marshal(rep)
		if err != nil {
			return err
		}
		if err := r.src.ReportPresence(ctx, body); err != nil {
			r.full = true
			return err
		}
		r.seq++
		changes, first = changes[n:], false
	}
	sent := make(map[string]State, len(entries))
	for id, e := range entries {
		sent[id] = e.State
	}
	r.sent, r.full, r.last, r.lost = sent, false, now, lostN
	return nil
}
