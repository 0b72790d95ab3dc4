package acks

import (
	"cmp"
	"context"
	"errors"
	"math/rand/v2"
	"slices"
	"strconv"

	"github.com/holdfast-dev/holdfast/internal/wire"
	"github.com/holdfast-dev/holdfast/transport"
)

// cohorts is a relay's numbering of its clients, per namespace, for
// cohort reports (transport.CapabilityAckCohort): a client's slot is its
// place in the order the relay first forwarded an outcome of it. Only
// run's goroutine touches it.
type cohorts struct {
	epoch string
	ns    map[string]*cohort
	// scratch, reused report after report
	marks []slotMark
}

type cohort struct {
	slot map[string]int // client id → slot
	ids  []string       // slot → client id
	told int            // slots the server knows of (under epoch)
}

// slotMark is one client's outcome, to be grouped with the others of the
// same outcome into runs of slots.
type slotMark struct {
	ns   string
	out  outcome
	slot int
}

type outcome struct {
	status, err, sdkVersion string
	revision                int64
}

func newCohorts() *cohorts {
	return &cohorts{epoch: strconv.FormatUint(rand.Uint64(), 36), ns: make(map[string]*cohort)}
}

// inCohort reports whether a goes in a cohort report: a plain outcome,
// whose every field a cohort carries (its SDK version in its outcome's). Reports about a rollout, of a kind
// this version does not know, or with fields it does not know go one by
// one, as each client made them.
func inCohort(a *transport.Ack) bool {
	return (a.Status == transport.AckApplied || a.Status == transport.AckRejected) && a.Rollout == "" && a.Extra == ""
}

// send reports the outcomes of acks that fit a cohort through src, and
// returns the others, for the caller to send one by one (all of them when
// the server takes no cohorts). A server that does not know the slots
// (it restarted, or reset) hears every member again, once.
func (c *cohorts) send(ctx context.Context, src wire.CohortAcker, relayID string, acks []transport.Ack) ([]transport.Ack, error) {
	if !src.CohortsOffered() {
		return acks, nil
	}
	rest, err := c.sendOnce(ctx, src, relayID, acks)
	if errors.Is(err, transport.ErrCohortUnknown) {
		for _, ch := range c.ns {
			ch.told = 0
		}
		rest, err = c.sendOnce(ctx, src, relayID, acks)
	}
	if errors.Is(err, transport.ErrStreamUnsupported) {
		return acks, nil
	}
	return rest, err
}

func (c *cohorts) sendOnce(ctx context.Context, src wire.CohortAcker, relayID string, acks []transport.Ack) ([]transport.Ack, error) {
	var rest []transport.Ack // allocated only for reports that do not fit
	marks := c.marks[:0]
	for i := range acks {
		a := &acks[i]
		slot, ok := c.slotOf(a)
		if !ok {
			rest = append(rest, *a)
			continue
		}
		marks = append(marks, slotMark{ns: a.Namespace, out: outcome{a.Status, wire.TruncateAckError(a.Error), a.SDKVersion, a.Revision}, slot: slot})
	}
	c.marks = marks
	if len(marks) == 0 && len(rest) == len(acks) {
		return rest, nil
	}
	slices.SortFunc(marks, func(x, y slotMark) int {
		return cmp.Or(cmp.Compare(x.ns, y.ns), cmp.Compare(x.out.status, y.out.status),
			cmp.Compare(x.out.revision, y.out.revision), cmp.Compare(x.out.err, y.out.err), cmp.Compare(x.out.sdkVersion, y.out.sdkVersion),
			cmp.Compare(x.slot, y.slot))
	})
	// The members the server has not heard of go first, in reports of
	// their own while they are more than one report holds.
	b := reportBuilder{c: c, report: wire.CohortReport{RelayID: relayID, Epoch: c.epoch}}
	b.reset()
	for _, ns := range c.names() {
		ch := c.ns[ns]
		for ch.told < len(ch.ids) {
			from, end := ch.told, ch.told
			b.size += len(ns) + 32
			for end < len(ch.ids) && b.room > 0 && b.size < maxReportBytes {
				b.size += quotedLen(ch.ids[end]) + 1
				b.room--
				end++
			}
			b.report.Namespaces = append(b.report.Namespaces, wire.CohortNamespace{Namespace: ns, From: from, Members: ch.ids[from:end]})
			if end == len(ch.ids) && b.room > 0 && b.size < maxReportBytes {
				break
			}
			if err := b.post(ctx, src); err != nil {
				return nil, err
			}
		}
	}
	// Then the outcomes, beside the members' tail: in one report, unless
	// their runs or bytes are more than one holds.
	for i, n := range b.report.Namespaces {
		b.part[n.Namespace] = i
	}
	for i := 0; i < len(marks); {
		m := marks[i]
		o := wire.CohortOutcome{Revision: m.out.revision, Status: m.out.status, Error: m.out.err, SDKVersion: m.out.sdkVersion}
		head := 80 + quotedLen(o.Error) + len(o.SDKVersion) + len(m.ns) + 32 // the outcome's fields, its part's
		for ; i < len(marks) && marks[i].ns == m.ns && marks[i].out == m.out; i++ {
			if k := len(o.Runs); k > 0 && o.Runs[k-2]+o.Runs[k-1] == marks[i].slot {
				o.Runs[k-1]++
				continue
			}
			if b.runs+len(o.Runs)/2+1 > transport.MaxCohortRuns || b.size+head+8*len(o.Runs)+16 > maxReportBytes {
				// This report is full: the outcome goes on in the next.
				if len(o.Runs) > 0 {
					b.add(m.ns, o, head)
					o.Runs = nil
				}
				if err := b.post(ctx, src); err != nil {
					return nil, err
				}
			}
			o.Runs = append(o.Runs, marks[i].slot, 1)
		}
		b.add(m.ns, o, head)
	}
	if err := b.post(ctx, src); err != nil {
		return nil, err
	}
	return rest, nil
}

// maxReportBytes bounds the JSON of one report, well within a server's
// 1 MiB body limit: a report refused as too large would be refused again
// at every retry, and with it every outcome of the relay.
const maxReportBytes = 768 << 10

// reportBuilder fills cohort reports within the limits of one: the
// members it names, its runs, its bytes (estimated from above).
type reportBuilder struct {
	c                *cohorts
	report           wire.CohortReport
	part             map[string]int // namespace → its part of report
	room, runs, size int
}

func (b *reportBuilder) reset() {
	b.report.Namespaces = b.report.Namespaces[:0]
	if b.part == nil {
		b.part = make(map[string]int)
	}
	clear(b.part)
	b.room, b.runs, b.size = wire.MaxCohortMembers, 0, 128
}

// add puts o (head estimated bytes besides its runs) in ns's part.
func (b *reportBuilder) add(ns string, o wire.CohortOutcome, head int) {
	n, ok := b.part[ns]
	if !ok {
		n = len(b.report.Namespaces)
		b.part[ns] = n
		b.report.Namespaces = append(b.report.Namespaces, wire.CohortNamespace{Namespace: ns})
	}
	b.report.Namespaces[n].Outcomes = append(b.report.Namespaces[n].Outcomes, o)
	b.runs += len(o.Runs) / 2
	b.size += head + 8*len(o.Runs) // a slot and a count of at most 7 digits, with their commas
}

func (b *reportBuilder) post(ctx context.Context, src wire.CohortAcker) error {
	err := b.c.post(ctx, src, &b.report)
	if err == nil {
		b.reset()
	}
	return err
}

// quotedLen bounds the length of s as a JSON string: encoding/json
// escapes <, > and & (and any byte not of valid UTF-8) in six bytes.
func quotedLen(s string) int {
	n := 2
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c == '"' || c == '\\':
			n += 2
		case c < ' ' || c == '<' || c == '>' || c == '&' || c >= 0x80:
			n += 6
		default:
			n++
		}
	}
	return n
}

// post sends report (when it says anything) and marks its members told;
// report is emptied for the next.
func (c *cohorts) post(ctx context.Context, src wire.CohortAcker, report *wire.CohortReport) error {
	if len(report.Namespaces) == 0 {
		return nil
	}
	if err := wire.SendCohort(ctx, src, report); err != nil {
		return err
	}
	for _, n := range report.Namespaces {
		ch := c.ns[n.Namespace]
		ch.told = max(ch.told, n.From+len(n.Members))
	}
	report.Namespaces = report.Namespaces[:0]
	return nil
}

// slotOf returns a's client's slot in the cohort of a's namespace, giving
// it one if it has none; ok false when a goes one by one.
func (c *cohorts) slotOf(a *transport.Ack) (slot int, ok bool) {
	if !inCohort(a) {
		return 0, false
	}
	ch := c.ns[a.Namespace]
	if ch == nil {
		ch = &cohort{slot: make(map[string]int)}
		c.ns[a.Namespace] = ch
	}
	if slot, ok := ch.slot[a.ClientID]; ok {
		return slot, true
	}
	if len(ch.ids) >= transport.MaxCohortSlots {
		return 0, false
	}
	ch.slot[a.ClientID] = len(ch.ids)
	ch.ids = append(ch.ids, a.ClientID)
	return len(ch.ids) - 1, true
}

// names returns the cohorts' namespaces with members not yet told, sorted.
func (c *cohorts) names() []string {
	var out []string
	for ns, ch := range c.ns {
		if ch.told < len(ch.ids) {
			out = append(out, ns)
		}
	}
	slices.Sort(out)
	return out
}
