package presence

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/holdfast-dev/holdfast/internal/wire"
)

// What a table knows lost: the clients it did not track (full), what its
// process lost of its clients' reports past its other bounds (a relay's
// ack queue: NoteLost), and what the relays behind it report lost
// (wire.PresenceReport.Lost). A relay's Reporter sends it all upstream;
// a server counts it as reports missing (Missing): a rollout whose
// namespace lost a report since it started holds, and says who lost it.

type lostKey struct{ relay, kind, ns string }

// NoteLost counts n reports of ns, of kind (wire.LostAcks,
// wire.LostUnbound), that this process dropped past a bound, now. A nil
// Table ignores it.
func (t *Table) NoteLost(kind, ns string, n int64) {
	if t == nil || n <= 0 {
		return
	}
	now := t.now()
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.lost == nil {
		t.lost = make(map[lostKey]wire.LostReports)
	}
	k := lostKey{"", kind, ns}
	l := t.lost[k]
	t.lost[k] = wire.LostReports{Kind: kind, Namespace: ns, N: l.N + n, Last: now}
}

// mergeLost returns what a relay's report says lost, each entry's Last
// taken on this table's clock: now when it lasts (Current) or its count
// changed (grew, or the relay restarted), the report's when new to the
// table (at most now), else as it was.
func mergeLost(had map[lostKey]wire.LostReports, rep []wire.LostReports, now time.Time) map[lostKey]wire.LostReports {
	if len(rep) == 0 {
		return nil
	}
	out := make(map[lostKey]wire.LostReports, len(rep))
	for _, l := range rep {
		k := lostKey{l.Relay, l.Kind, l.Namespace}
		old, ok := had[k]
		switch {
		case l.Current:
			l.Last = now
		case !ok:
			if l.Last.IsZero() || l.Last.After(now) {
				l.Last = now
			}
		case l.N != old.N:
			l.Last = now
		default:
			l.Last = old.Last
		}
		out[k] = l
	}
	return out
}

// Lost returns what the table knows lost, this process's own with Relay
// empty, in no order. Relays unheard past Forget say nothing.
func (t *Table) Lost() []wire.LostReports {
	if t == nil {
		return nil
	}
	now := t.now()
	t.mu.Lock()
	defer t.mu.Unlock()
	var out []wire.LostReports
	untracked := t.untracked
	for _, l := range t.lost {
		out = append(out, l)
	}
	for _, r := range t.relays {
		if now.Sub(r.heard) > Forget {
			continue
		}
		untracked += r.untracked
		for _, l := range r.lost {
			if l.Current {
				l.Last = r.heard // as of its last report
			}
			out = append(out, l)
		}
	}
	switch {
	case untracked > 0:
		// Clients connected now that the table does not track: they
		// count as missing for every rollout while they last.
		out = append(out, wire.LostReports{Kind: wire.LostPresence, N: int64(untracked), Last: now, Current: true})
	case t.dropped > 0:
		out = append(out, wire.LostReports{Kind: wire.LostPresence, N: t.dropped, Last: t.droppedAt})
	}
	return out
}

// reportLost returns lost as a relay reports it upstream: its own named
// relayID, at most wire.MaxPresenceLost entries (the newest; the rest
// summed into one of relayID's of kind wire.LostPresence, which every
// namespace's rollouts count).
func reportLost(lost []wire.LostReports, relayID string) []wire.LostReports {
	for i := range lost {
		if lost[i].Relay == "" {
			lost[i].Relay = relayID
		}
		if wire.ValidateNamespace(lost[i].Namespace) != nil {
			lost[i].Namespace = "" // of any namespace: never a report the upstream refuses whole
		}
	}
	if len(lost) <= wire.MaxPresenceLost {
		return lost
	}
	slices.SortFunc(lost, func(x, y wire.LostReports) int { return y.Last.Compare(x.Last) })
	rest := wire.LostReports{Relay: relayID, Kind: wire.LostPresence}
	for _, l := range lost[wire.MaxPresenceLost-1:] {
		rest.N += l.N
		if l.Last.After(rest.Last) {
			rest.Last = l.Last
		}
	}
	return append(lost[:wire.MaxPresenceLost-1], rest)
}

// countsFor reports whether l counts against ns's rollouts: lost of ns,
// or of any namespace (clients untracked).
func countsFor(l *wire.LostReports, ns string) bool {
	return l.Namespace == "" || l.Namespace == ns
}

// LostOf returns how many reports the table knows lost that count
// against ns's rollouts (see Lost), and when the last was lost.
func (t *Table) LostOf(ns string) (n int64, last time.Time) {
	for _, l := range t.Lost() {
		if countsFor(&l, ns) {
			n += l.N
			if l.Last.After(last) {
				last = l.Last
			}
		}
	}
	return n, last
}

// maxLostNamed bounds the losers Missing names.
const maxLostNamed = 3

// Missing is controller.Config.Missing over what the table knows lost
// (Lost): the reports counting against ns, when the last of them was
// lost at or after since; its reason names who lost them, the latest
// first. self names this process in it ("this server").
func (t *Table) Missing(ns string, since time.Time, self string) (int64, string) {
	var n int64
	var hits []wire.LostReports
	for _, l := range t.Lost() {
		if countsFor(&l, ns) {
			n += l.N
			hits = append(hits, l)
		}
	}
	if !slices.ContainsFunc(hits, func(l wire.LostReports) bool { return !l.Last.Before(since) }) {
		return 0, ""
	}
	slices.SortFunc(hits, func(x, y wire.LostReports) int {
		return cmp.Or(y.Last.Compare(x.Last), strings.Compare(x.Relay, y.Relay))
	})
	whys := make([]string, 0, min(len(hits), maxLostNamed)+1)
	for i, l := range hits {
		if i == maxLostNamed {
			whys = append(whys, fmt.Sprintf("and %d more", len(hits)-i))
			break
		}
		who := "relay " + l.Relay
		if l.Relay == "" {
			who = self
		}
		var what string
		switch l.Kind {
		case wire.LostPresence:
			if l.Current {
				what = fmt.Sprintf("holds up to %d client(s) connected that its full presence table does not track", l.N)
			} else {
				what = fmt.Sprintf("did not track %d client(s) past its full presence table", l.N)
			}
		case wire.LostAcks:
			what = fmt.Sprintf("dropped %d outcome(s) of %q past its full ack queue", l.N, l.Namespace)
		case wire.LostUnbound:
			what = fmt.Sprintf("dropped %d outcome(s) of %q of clients its full table of token bindings could not bind", l.N, l.Namespace)
		default:
			what = fmt.Sprintf("lost %d report(s) (%s)", l.N, wire.Truncate(l.Kind, 64))
		}
		whys = append(whys, fmt.Sprintf("%s %s, the last at %s", who, what, l.Last.UTC().Format(time.RFC3339)))
	}
	return n, strings.Join(whys, "; ")
}
