package dataplane

import (
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/holdfast-dev/holdfast/controlapi"
	"github.com/holdfast-dev/holdfast/transport"
)

// acks records what clients applied and rejected.
type acks struct {
	mu sync.Mutex
	m  map[ackKey]*ackState
	// cohorts are the relays' cohort reports, by relay and epoch;
	// epochs lists each relay's, oldest first (cohort.go).
	cohorts map[cohortKey]*relayCohort
	epochs  map[string][]string
}

type ackKey struct{ client, ns string }

type ackState struct {
	acked, nacked int64
	nackErr       string
	at            time.Time
}

// record keeps what acks report, all under one short lock: map work
// only, the decoding done before.
func (a *acks) record(acks []transport.Ack, now time.Time) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.m == nil {
		a.m = make(map[ackKey]*ackState)
	}
	for _, ack := range acks {
		if ack.Status == transport.AckWouldReject {
			continue // the rollout's alone: the client applied nothing, rejected nothing
		}
		k := ackKey{ack.ClientID, ack.Namespace}
		st := a.m[k]
		if st == nil {
			st = &ackState{}
			a.m[k] = st
		}
		if ack.Status == transport.AckApplied {
			st.acked = ack.Revision
		} else {
			st.nacked, st.nackErr = ack.Revision, ack.Error
		}
		st.at = now
	}
}

func (a *acks) reset() {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.m, a.cohorts, a.epochs = nil, nil, nil
}

// rewind forgets what clients reported about revisions after rev.
func (a *acks) rewind(rev int64) {
	a.mu.Lock()
	defer a.mu.Unlock()
	for k, st := range a.m {
		if st.rewind(rev) {
			delete(a.m, k)
		}
	}
	a.rewindCohortsLocked(rev)
}

// rewind forgets what st says of revisions after rev; it reports whether
// that was all st said.
func (st *ackState) rewind(rev int64) (gone bool) {
	lost := st.acked > rev || st.nacked > rev
	if st.acked > rev {
		st.acked = 0
	}
	if st.nacked > rev {
		st.nacked, st.nackErr = 0, ""
	}
	return lost && st.acked == 0 && st.nacked == 0
}

// Clients returns every client's state, as the acks recorded at an origin
// (no WithAckSink) say, sorted by client id and namespace.
func (s *Server) Clients() []controlapi.ClientState {
	s.acks.mu.Lock()
	merged := make(map[ackKey]ackState, len(s.acks.m))
	s.acks.eachLocked(func(k ackKey, st ackState) {
		if had, ok := merged[k]; ok {
			st = newer(had, st)
		}
		merged[k] = st
	})
	s.acks.mu.Unlock()
	out := make([]controlapi.ClientState, 0, len(merged))
	for k, st := range merged {
		out = append(out, controlapi.ClientState{
			ClientID: k.client, Namespace: k.ns, AckedRevision: st.acked,
			NackedRevision: st.nacked, NackError: st.nackErr, UpdatedAt: st.at,
		})
	}
	for i := range out {
		head, _ := s.be.NsRevision(out[i].Namespace)
		out[i].HeadRevision = head
		out[i].Behind = out[i].AckedRevision < head
		out[i].Lag = max(head-out[i].AckedRevision, 0)
	}
	slices.SortFunc(out, func(a, b controlapi.ClientState) int {
		if c := strings.Compare(a.ClientID, b.ClientID); c != 0 {
			return c
		}
		return strings.Compare(a.Namespace, b.Namespace)
	})
	return out
}

// KnownClients returns the clients that reported on ns.
func (s *Server) KnownClients(ns string) []string {
	a := &s.acks
	a.mu.Lock()
	defer a.mu.Unlock()
	seen := make(map[string]bool)
	var out []string
	a.eachLocked(func(k ackKey, _ ackState) {
		if k.ns == ns && !seen[k.client] {
			seen[k.client] = true
			out = append(out, k.client)
		}
	})
	return out
}

// ResetAcks forgets every ack (a new store: a new history).
func (s *Server) ResetAcks() { s.acks.reset() }

// RewindAcks forgets what clients reported about revisions after rev (the
// store restored to rev).
func (s *Server) RewindAcks(rev int64) { s.acks.rewind(rev) }

// RecordAcks takes acks as the data plane takes those it receives: at an
// origin recorded (Clients) and handed to WithAckObserver's observer, at
// a relay handed to WithAckSink's sink.
func (s *Server) RecordAcks(acks []transport.Ack) { s.recordAcks(acks) }
