package dataplane

import (
	"cmp"
	"container/list"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/holdfast-dev/holdfast/controlapi"
	"github.com/holdfast-dev/holdfast/internal/presence"
	"github.com/holdfast-dev/holdfast/transport"
)

// acks records what clients applied and rejected.
type acks struct {
	mu sync.Mutex
	// m is the per-client records, at most maxPairs (0: maxAckPairs): when
	// full, the pair written longest ago makes room (order, of *ackRec,
	// the most recent at the front).
	m        map[ackKey]*list.Element
	order    *list.List
	maxPairs int
	// cohorts are the relays' cohort reports, by relay and epoch;
	// epochs lists each relay's, oldest first, and relayAt when each relay
	// last reported: at most maxRelayCount relays (0: maxRelays;
	// cohort.go).
	cohorts map[cohortKey]*relayCohort
	epochs  map[string][]string
	relayAt map[string]time.Time
	// maxRelayCount is maxRelays, but in tests.
	maxRelayCount int
	// evicted counts the pairs dropped to make room (Server.Dropped),
	// each drop logged at most once a minute (loggedAt) to log.
	evicted  int64
	loggedAt time.Time
	log      *slog.Logger
}

// maxAckPairs bounds the per-client records: (client, namespace) pairs.
const maxAckPairs = 200_000

type ackRec struct {
	key ackKey
	st  ackState
}

type ackKey struct{ client, ns string }

type ackState struct {
	acked, nacked int64
	nackErr       string
	at            time.Time
	// sdkVersion is the SDK version of the client's last report that
	// said one (transport.Ack.SDKVersion).
	sdkVersion string
}

// record keeps what acks report, all under one short lock: map work
// only, the decoding done before.
func (a *acks) record(acks []transport.Ack, now time.Time) {
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, ack := range acks {
		if ack.Status == transport.AckWouldReject {
			continue // the rollout's alone: the client applied nothing, rejected nothing
		}
		st := a.pairLocked(ackKey{ack.ClientID, ack.Namespace})
		if ack.Status == transport.AckApplied {
			st.acked = ack.Revision
		} else {
			st.nacked, st.nackErr = ack.Revision, ack.Error
		}
		st.at = now
		if ack.SDKVersion != "" {
			st.sdkVersion = ack.SDKVersion
		}
	}
}

// pairLocked returns k's record, made the most recent (a new one when k
// has none, the least recent dropped when the table is full). a.mu must
// be held.
func (a *acks) pairLocked(k ackKey) *ackState {
	if a.m == nil {
		a.m, a.order = make(map[ackKey]*list.Element), list.New()
	}
	if el := a.m[k]; el != nil {
		a.order.MoveToFront(el)
		return &el.Value.(*ackRec).st
	}
	if a.order.Len() >= cmp.Or(a.maxPairs, maxAckPairs) {
		oldest := a.order.Back()
		delete(a.m, oldest.Value.(*ackRec).key)
		a.order.Remove(oldest)
		a.evicted++
		if now := time.Now(); a.log != nil && now.Sub(a.loggedAt) >= time.Minute {
			a.loggedAt = now
			a.log.Warn("dataplane: the ack table is full; the clients heard longest ago leave it", "max", cmp.Or(a.maxPairs, maxAckPairs), "dropped", a.evicted)
		}
	}
	el := a.order.PushFront(&ackRec{key: k})
	a.m[k] = el
	return &el.Value.(*ackRec).st
}

func (a *acks) reset() {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.m, a.order, a.cohorts, a.epochs, a.relayAt = nil, nil, nil, nil, nil
}

// rewind forgets what clients reported about revisions after rev.
func (a *acks) rewind(rev int64) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.order != nil {
		for el := a.order.Front(); el != nil; {
			next, r := el.Next(), el.Value.(*ackRec)
			if r.st.rewind(rev) {
				delete(a.m, r.key)
				a.order.Remove(el)
			}
			el = next
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
// (no WithAckSink) say, with its presence (gone clients past
// presence.Forget left out), sorted by client id and namespace.
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
			NackedRevision: st.nacked, NackError: st.nackErr, UpdatedAt: st.at, SDKVersion: st.sdkVersion,
		})
	}
	for i := range out {
		head, _ := s.be.NsRevision(out[i].Namespace)
		out[i].HeadRevision = head
		out[i].Behind = out[i].AckedRevision < head
		out[i].Lag = max(head-out[i].AckedRevision, 0)
	}
	out = presence.Annotate(out, s.presence.Entries(), time.Now())
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

// Dropped counts the entries the server's per-client tables could not
// keep since New: ack pairs evicted from a full table, client bindings
// evicted (WithTokens), new clients a full presence table did not take.
func (s *Server) Dropped() int64 {
	s.acks.mu.Lock()
	n := s.acks.evicted
	s.acks.mu.Unlock()
	return n + s.Bindings().Evicted + s.presence.Stats().Dropped
}
