package dataplane

import (
	"cmp"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"time"

	"github.com/holdfast-dev/holdfast/internal/wire"
	"github.com/holdfast-dev/holdfast/transport"
)

// relayCohort is what a relay's cohort reports said (one epoch of them):
// per namespace, its clients by slot and what each last reported.
type relayCohort struct {
	ns map[string]*cohortTable
}

// cohortKey names one epoch of one relay's cohorts.
type cohortKey struct{ relay, epoch string }

// maxRelayEpochs bounds the epochs kept of one relay id: past it, the
// oldest is folded into per-client records. More than one: two relays
// configured with the same id, each of one epoch, must not fold each
// other's at every report (and hear each other's 409s).
const maxRelayEpochs = 4

// maxRelays bounds the relays whose cohorts are kept (cohort reports name
// any relay id): past it, the one that reported longest ago is folded into
// the per-client records. Folding costs the rollouts nothing: what they
// count went as acks of each client when the report came (expand), and a
// folded relay's next report names slots the server no longer knows, so
// the relay names its members again and its outcomes come whole
// (TestFoldedRelayLosesNoOutcome).
const maxRelays = 1024

type cohortTable struct {
	ids    []string
	states []ackState // by slot; zero: nothing reported yet
}

// handleAckCohort is POST /sdk/ack/cohort (capability ack-cohort): a
// relay's clients' outcomes by slot. The origin records them as it
// records acks, at a cost of what the report holds, not of how many
// clients it speaks for; a relay hands them on, as acks of each client,
// to its own forwarder. Parts about namespaces outside the request's
// scope, or that do not exist, are dropped; a report naming slots the
// server does not know is refused whole (409, CodeCohortUnknown).
func (s *Server) handleAckCohort(w http.ResponseWriter, r *http.Request) {
	s.stats.acks.Add(1)
	s.stats.cohorts.Add(1)
	if !s.gate(w, r, false) {
		return
	}
	bp := ackBuffers.Get().(*[]byte)
	defer ackBuffers.Put(bp)
	data, err := readBodyInto(w, r, maxAckBatch, bp)
	var rep wire.CohortReport
	if err == nil {
		err = s.mayReportCohort(r)
	}
	if err == nil {
		err = decodeCohortReport(data, &rep)
	}
	if err == nil {
		s.keepCohortParts(r, &rep)
		var acks []transport.Ack
		acks, err = s.acks.recordCohort(&rep, time.Now(), s.expandsCohort)
		switch {
		case len(acks) == 0:
		case s.opts.ackSink != nil:
			s.opts.ackSink(acks, true)
		case s.opts.observe != nil:
			s.opts.observe(acks) // recorded already, as the cohort's
		}
	}
	if err != nil {
		s.planeError(w, r, "", err)
		return
	}
	defer s.speak(r)()
	s.planeHeaders(w, "")
	w.WriteHeader(http.StatusNoContent)
}

// decodeCohortReport decodes and checks a cohort report's body.
func decodeCohortReport(data []byte, rep *wire.CohortReport) error {
	if err := json.Unmarshal(data, rep); err != nil {
		return fmt.Errorf("%w: cohort report: %v", ErrInvalid, err)
	}
	if err := wire.CheckCohortReport(rep); err != nil {
		return fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	return nil
}

// keepCohortParts drops the parts of rep about namespaces the request
// may not read or that do not exist, and at the origin the outcomes above
// its head (of history a restore undid, as its Backend.Known drops such acks):
// one namespace's trouble does not refuse the others.
func (s *Server) keepCohortParts(r *http.Request, rep *wire.CohortReport) {
	var head int64
	if s.follow == nil {
		_, head, _ = s.be.Info()
	}
	kept := rep.Namespaces[:0]
	for _, n := range rep.Namespaces {
		if s.opts.tokens != nil && s.mayRead(r, n.Namespace) != nil {
			continue
		}
		if s.follow == nil { // a relay follows on demand: any name may come
			if _, ok := s.be.NsRevision(n.Namespace); !ok {
				continue
			}
			n.Outcomes = slices.DeleteFunc(n.Outcomes, func(o wire.CohortOutcome) bool { return o.Revision > head })
		}
		kept = append(kept, n)
	}
	rep.Namespaces = kept
}

// expandsCohort reports whether outcomes of ns at rev are needed as acks
// of each client: at a relay (its forwarder numbers them anew), or when
// a rollout of ns counts them.
func (s *Server) expandsCohort(ns string, rev int64) bool {
	return s.opts.ackSink != nil || s.opts.expand != nil && s.opts.expand(ns, rev)
}

// recordCohort records rep, and returns as acks the outcomes of the
// namespaces and revisions expand asks for. Nothing is recorded when rep
// names a slot, or continues a list of members, beyond what the server
// knows of the relay's epoch (transport.ErrCohortUnknown). A relay's
// epochs past maxRelayEpochs fold into per-client records, oldest first,
// which Clients merges with the cohorts' alike.
func (a *acks) recordCohort(rep *wire.CohortReport, now time.Time, expand func(ns string, rev int64) bool) ([]transport.Ack, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	key := cohortKey{rep.RelayID, rep.Epoch}
	rc := a.cohorts[key] // nil: a new epoch, which knows no slots yet
	for _, n := range rep.Namespaces {
		known := 0
		if rc != nil && rc.ns[n.Namespace] != nil {
			known = len(rc.ns[n.Namespace].ids)
		}
		if len(n.Members) > 0 {
			if n.From > known {
				return nil, fmt.Errorf("%w: the members of %q from slot %d, after the %d known", transport.ErrCohortUnknown, n.Namespace, n.From, known)
			}
			known = max(known, n.From+len(n.Members))
		}
		for _, o := range n.Outcomes {
			if last := o.Runs[len(o.Runs)-2] + o.Runs[len(o.Runs)-1]; last > known {
				return nil, fmt.Errorf("%w: slot %d of %q, of %d known", transport.ErrCohortUnknown, last-1, n.Namespace, known)
			}
		}
	}
	if rc == nil {
		if a.cohorts == nil {
			a.cohorts, a.epochs, a.relayAt = make(map[cohortKey]*relayCohort), make(map[string][]string), make(map[string]time.Time)
		}
		if _, ok := a.epochs[rep.RelayID]; !ok && len(a.epochs) >= cmp.Or(a.maxRelayCount, maxRelays) {
			a.dropRelayLocked()
		}
		rc = &relayCohort{ns: make(map[string]*cohortTable)}
		a.cohorts[key] = rc
		epochs := append(a.epochs[rep.RelayID], rep.Epoch)
		if len(epochs) > maxRelayEpochs {
			old := cohortKey{rep.RelayID, epochs[0]}
			a.foldLocked(a.cohorts[old])
			delete(a.cohorts, old)
			epochs = slices.Delete(epochs, 0, 1)
		}
		a.epochs[rep.RelayID] = epochs
	}
	a.relayAt[rep.RelayID] = now
	var acks []transport.Ack
	for _, n := range rep.Namespaces {
		t := rc.ns[n.Namespace]
		if t == nil {
			t = &cohortTable{}
			rc.ns[n.Namespace] = t
		}
		for i, id := range n.Members {
			slot := n.From + i
			if slot == len(t.ids) {
				t.ids, t.states = append(t.ids, id), append(t.states, ackState{})
			} else if t.ids[slot] != id {
				t.ids[slot], t.states[slot] = id, ackState{} // another client: a relay that renumbered
			}
		}
		for _, o := range n.Outcomes {
			o.Slots(func(slot int) {
				st := &t.states[slot]
				if o.Status == transport.AckApplied {
					st.acked = o.Revision
				} else {
					st.nacked, st.nackErr = o.Revision, o.Error
				}
				st.at = now
				if o.SDKVersion != "" {
					st.sdkVersion = o.SDKVersion
				}
			})
			if expand(n.Namespace, o.Revision) {
				o.Slots(func(slot int) {
					acks = append(acks, transport.Ack{ClientID: t.ids[slot], Namespace: n.Namespace, Revision: o.Revision, Status: o.Status, Error: o.Error,
						SDKVersion: o.SDKVersion})
				})
			}
		}
	}
	return acks, nil
}

// dropRelayLocked makes room for a relay: the one that reported longest
// ago has its cohorts folded into the per-client records (bounded) and is
// forgotten; should it report again, it is a relay the server does not
// know (it hears every member again, once). a.mu must be held.
func (a *acks) dropRelayLocked() {
	var oldest string
	var at time.Time
	for id, t := range a.relayAt {
		if oldest == "" || t.Before(at) {
			oldest, at = id, t
		}
	}
	for _, epoch := range a.epochs[oldest] {
		k := cohortKey{oldest, epoch}
		a.foldLocked(a.cohorts[k])
		delete(a.cohorts, k)
	}
	delete(a.epochs, oldest)
	delete(a.relayAt, oldest)
}

// foldLocked moves what a relay's cohort said into the per-client
// records, each keeping the newer of what it had and what the cohort
// said. a.mu must be held.
func (a *acks) foldLocked(rc *relayCohort) {
	for ns, t := range rc.ns {
		for slot, st := range t.states {
			if st.at.IsZero() {
				continue
			}
			rec := a.pairLocked(ackKey{t.ids[slot], ns})
			*rec = newer(*rec, st)
		}
	}
}

// newer merges two reports about one client's namespace: the later
// applied revision, the later rejected one with its error, the later time
// and the SDK version said last.
// Both grow (a rollback or reset forgets what is past, in both alike).
func newer(x, y ackState) ackState {
	if y.acked > x.acked {
		x.acked = y.acked
	}
	if y.nacked > x.nacked {
		x.nacked, x.nackErr = y.nacked, y.nackErr
	}
	if y.at.After(x.at) {
		x.at = y.at
		if y.sdkVersion != "" { // the later report's version: a client upgraded
			x.sdkVersion = y.sdkVersion
		}
	}
	if x.sdkVersion == "" {
		x.sdkVersion = y.sdkVersion
	}
	return x
}

// eachLocked calls fn for every client's state of every namespace: the
// per-client records, then the cohorts' (a client may be in both, and in
// several relays' cohorts: Clients merges them). a.mu must be held.
func (a *acks) eachLocked(fn func(k ackKey, st ackState)) {
	if a.order != nil {
		for el := a.order.Front(); el != nil; el = el.Next() {
			r := el.Value.(*ackRec)
			fn(r.key, r.st)
		}
	}
	for _, rc := range a.cohorts {
		for ns, t := range rc.ns {
			for slot, st := range t.states {
				if !st.at.IsZero() {
					fn(ackKey{t.ids[slot], ns}, st)
				}
			}
		}
	}
}

// rewindCohortsLocked is rewind for the cohorts' states.
func (a *acks) rewindCohortsLocked(rev int64) {
	for _, rc := range a.cohorts {
		for _, t := range rc.ns {
			for i := range t.states {
				if t.states[i].rewind(rev) {
					t.states[i] = ackState{} // as a record deleted
				}
			}
		}
	}
}
