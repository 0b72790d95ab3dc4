package dataplane

import (
	"container/list"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"sync"
	"time"

	"github.com/holdfast-dev/holdfast/access"
	"github.com/holdfast-dev/holdfast/internal/wire"
	"github.com/holdfast-dev/holdfast/transport"
)

// Acks bound to an identity (docs/PROTOCOL.md, "Acks and identities"):
// with WithTokens, a client's acks are taken only from the identity its
// reads came with. Every data-plane read that names its client id
// (transport.HeaderClientID) binds that id to the request's identity,
// and so does an ack request, unless that client has a stream open under
// another identity (bindAckSender); an ack of a client id its identity
// never bound is refused (a single ack: 403) or dropped (a batch's), and
// counted (Stats.UnboundAcks). An identity with the relay scope speaks
// for the clients behind it, which its own data plane bound; an open
// server (no tokens) binds nothing and takes every ack.

// The bounds of the table of bindings: in all, and per identity, so that
// one token that names made-up ids churns its own bindings only.
const (
	maxClientBindings   = 200_000
	maxIdentityBindings = 100_000
)

// bindings remembers, per identity, the client ids its reads named: the
// most recent first, those of an open stream or long-poll pinned.
type bindings struct {
	mu      sync.Mutex
	byIdent map[string]*identBindings
	total   int
	max     int // in all (0: maxClientBindings)
	maxPer  int // per identity (0: maxIdentityBindings)
	evicted int64
	refused int64 // binds refused: every binding of the identity pinned
	unbound int64 // acks refused or dropped for want of a binding
	// log hears of evictions, at most once a minute (loggedAt).
	log      *slog.Logger
	loggedAt time.Time
}

// identBindings are one identity's bindings. Identities are few: only
// an authenticated request binds, so there are at most as many as the
// token records.
type identBindings struct {
	name  string
	m     map[string]*list.Element // of *clientBinding
	order *list.List               // most recent first
}

type clientBinding struct {
	client string
	open   int // streams and held long-polls open with it: not evicted
}

// bind notes that identity ident read as client; with open, a stream
// or long-poll that stays open until unbind.
func (b *bindings) bind(ident, client string, open bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.byIdent == nil {
		b.byIdent = make(map[string]*identBindings)
	}
	ib := b.byIdent[ident]
	if ib == nil {
		ib = &identBindings{name: ident, m: make(map[string]*list.Element), order: list.New()}
		b.byIdent[ident] = ib
	}
	if el := ib.m[client]; el != nil {
		if open {
			el.Value.(*clientBinding).open++
		}
		if ib.order.Front() != el {
			ib.order.MoveToFront(el)
		}
		return
	}
	switch {
	case ib.order.Len() >= cmpOr(b.maxPer, maxIdentityBindings):
		if !b.evictLocked(ib) {
			b.refused++
			return
		}
	case b.total >= cmpOr(b.max, maxClientBindings):
		// Full: an identity that has bindings makes room among its own
		// (one that names made-up ids churns itself only); a newcomer
		// takes the room of the one with the most.
		if !b.evictLocked(ib) && !b.evictLocked(b.largestLocked(ib)) {
			b.refused++
			return
		}
	}
	cb := &clientBinding{client: client}
	if open {
		cb.open = 1
	}
	ib.m[client] = ib.order.PushFront(cb)
	b.total++
}

// unbind ends an open read's pin of client.
func (b *bindings) unbind(ident, client string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if ib := b.byIdent[ident]; ib != nil {
		if el := ib.m[client]; el != nil {
			if cb := el.Value.(*clientBinding); cb.open > 0 {
				cb.open--
			}
		}
	}
}

// evictLocked drops the least recent unpinned binding of ib; it reports
// whether one went. b.mu is held.
func (b *bindings) evictLocked(ib *identBindings) bool {
	if ib == nil || ib.order.Len() == 0 {
		return false
	}
	// Pinned ones are skipped (moved to the front); a bounded look.
	for range min(ib.order.Len(), 64) {
		el := ib.order.Back()
		cb := el.Value.(*clientBinding)
		if cb.open > 0 {
			ib.order.MoveToFront(el)
			continue
		}
		ib.order.Remove(el)
		delete(ib.m, cb.client)
		b.total--
		b.evicted++
		if now := time.Now(); b.log != nil && now.Sub(b.loggedAt) >= time.Minute {
			b.loggedAt = now
			b.log.Warn("dataplane: the table of client bindings is full; the least recent leave it (their clients bind again at their next read)",
				"max", cmpOr(b.max, maxClientBindings), "evicted", b.evicted)
		}
		if ib.order.Len() == 0 {
			delete(b.byIdent, ib.name)
		}
		return true
	}
	return false
}

// largestLocked returns the identity with the most bindings, other than
// not.
func (b *bindings) largestLocked(not *identBindings) *identBindings {
	var big *identBindings
	for _, ib := range b.byIdent {
		if ib != not && (big == nil || ib.order.Len() > big.order.Len()) {
			big = ib
		}
	}
	return big
}

// openElsewhereLocked reports whether client has a stream or held long-poll
// open under an identity other than ident. b.mu is held.
func (b *bindings) openElsewhereLocked(ident, client string) bool {
	for name, ib := range b.byIdent {
		if name == ident {
			continue
		}
		if el := ib.m[client]; el != nil && el.Value.(*clientBinding).open > 0 {
			return true
		}
	}
	return false
}

// bindAcker binds client to ident as a read does, unless client has a
// stream open under another identity: an ack may come before any read
// of its client on this server (after a failover or a restart), and one
// snapshot read would bind the id all the same; an open stream's client
// is not taken over.
func (b *bindings) bindAcker(ident, client string) {
	b.mu.Lock()
	elsewhere := b.openElsewhereLocked(ident, client)
	b.mu.Unlock()
	if !elsewhere {
		b.bind(ident, client, false)
	}
}

// atBoundLocked reports whether the bindings are at their bound, in all
// or of identity ident: a bind of ident may be refused. b.mu is held.
func (b *bindings) atBoundLocked(ident string) bool {
	ib := b.byIdent[ident]
	return b.total >= cmpOr(b.max, maxClientBindings) || ib != nil && ib.order.Len() >= cmpOr(b.maxPer, maxIdentityBindings)
}

// bound reports whether identity ident read as client.
func (b *bindings) bound(ident, client string) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	ib := b.byIdent[ident]
	return ib != nil && ib.m[client] != nil
}

func cmpOr(v, def int) int {
	if v > 0 {
		return v
	}
	return def
}

// bindClient binds the client id a data-plane read names to its
// identity (see bindings); open: a watcher that stays open, whose
// returned release unpins it.
func (s *Server) bindClient(r *http.Request, open bool) (release func()) {
	if s.opts.tokens == nil {
		return func() {}
	}
	client := r.Header.Get(transport.HeaderClientID)
	id, ok := access.FromContext(r.Context())
	if client == "" || !ok || transport.ValidateClientID(client) != nil {
		return func() {}
	}
	s.clients.bind(id.Name, client, open)
	if !open {
		return func() {}
	}
	return func() { s.clients.unbind(id.Name, client) }
}

// bindAckSender binds the client id an ack request names
// (transport.HeaderClientID) to its identity, as a read would, unless
// that client has a stream open under another identity (see
// bindings.bindAcker). Acks that name other client ids than the
// header's still need their own binding (a relay's identity excepted).
func (s *Server) bindAckSender(r *http.Request) {
	if s.opts.tokens == nil {
		return
	}
	client := r.Header.Get(transport.HeaderClientID)
	id, ok := access.FromContext(r.Context())
	if client == "" || !ok || id.IsRelay() || transport.ValidateClientID(client) != nil {
		return
	}
	s.clients.bindAcker(id.Name, client)
}

// boundAcks keeps the acks of clients that read as the request's
// identity: a single ack of another is refused (403), a batch's are
// dropped, each counted. A relay's identity speaks for its clients.
//
// It also sets each ack's Identity (a rollout counts one identity's
// nacks once): the sender's token name; a relay's identity keeps what it
// forwarded, its clients' own; without tokens, none.
func (s *Server) boundAcks(r *http.Request, acks []transport.Ack, batch bool) ([]transport.Ack, error) {
	if s.opts.tokens == nil {
		for i := range acks {
			acks[i].Identity = ""
		}
		return acks, nil
	}
	id, _ := access.FromContext(r.Context())
	if id.IsRelay() {
		return acks, nil
	}
	ok := func(a transport.Ack) bool { return s.clients.bound(id.Name, a.ClientID) }
	if !batch {
		if !ok(acks[0]) {
			s.noteUnbound(id.Name, acks)
			return nil, &accessError{http.StatusForbidden, fmt.Sprintf("client %q has not connected with token %q: its acks are taken from the identity it reads as", truncate(acks[0].ClientID), id.Name)}
		}
		acks[0].Identity = id.Name
		return acks, nil
	}
	var unbound []transport.Ack // allocated only when some are
	acks = slices.DeleteFunc(acks, func(a transport.Ack) bool {
		if ok(a) {
			return false
		}
		unbound = append(unbound, a)
		return true
	})
	s.noteUnbound(id.Name, unbound)
	for i := range acks {
		acks[i].Identity = id.Name
	}
	return acks, nil
}

// noteUnbound counts the acks of identity ident refused or dropped for
// want of a binding. While the identity's bindings (or all) are at their
// bound, a client's may be one the table could not keep (a bind refused,
// every binding pinned), not an id the token never read as: its outcomes
// count as lost (presence.Table.NoteLost), so that a rollout of their
// namespace holds rather than deciding without them.
func (s *Server) noteUnbound(ident string, acks []transport.Ack) {
	if len(acks) == 0 {
		return
	}
	s.clients.mu.Lock()
	s.clients.unbound += int64(len(acks))
	full := s.clients.atBoundLocked(ident)
	s.clients.mu.Unlock()
	s.log.Debug("dataplane: acks of clients that did not connect with the sender's token dropped", "acks", len(acks), "bindings_full", full)
	if full {
		for _, a := range acks {
			s.presence.NoteLost(wire.LostUnbound, a.Namespace, 1)
		}
	}
}

// mayReportCohort refuses (403) a cohort or presence report from an
// identity without the relay scope (with WithTokens): both speak for a
// relay's clients.
func (s *Server) mayReportCohort(r *http.Request) error {
	if s.opts.tokens == nil {
		return nil
	}
	if id, _ := access.FromContext(r.Context()); !id.IsRelay() {
		return &accessError{http.StatusForbidden, fmt.Sprintf("token %q has no relay scope: cohort and presence reports come from relays", id.Name)}
	}
	return nil
}

// BindingStats are the counts of the table of client bindings.
type BindingStats struct {
	Bindings int   // client ids bound to an identity now
	Evicted  int64 // bindings dropped to make room (their clients bind again on their next read)
	Refused  int64 // binds refused: the identity's bindings were all of open streams
	Unbound  int64 // acks refused or dropped: their client id did not read as the sender's identity
}

// Bindings returns the counts of the table of client bindings.
func (s *Server) Bindings() BindingStats {
	s.clients.mu.Lock()
	defer s.clients.mu.Unlock()
	return BindingStats{Bindings: s.clients.total, Evicted: s.clients.evicted, Refused: s.clients.refused, Unbound: s.clients.unbound}
}
