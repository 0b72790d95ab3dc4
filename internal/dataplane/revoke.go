package dataplane

import (
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/holdfast-dev/holdfast/access"
	"github.com/holdfast-dev/holdfast/internal/wire"
	"github.com/holdfast-dev/holdfast/transport"
)

// A request is authenticated on its way in; a watcher (a stream, a held
// long-poll) lives on, so the guard checks it again whenever what its
// identity authenticated against may have changed: on each change the
// token table tells (access.Notifier: a revocation, a new scope, a record
// gone; a relay's table hears of it through its token sync), for the
// watchers of the identities it names, and at each identity's earliest
// expiry (a timer per identity). A watcher whose request no longer
// authenticates ends with unauthorized (a stream first writes an ended
// event per namespace, which its client reports as
// transport.ErrUnauthorized); one whose identity lost the data scope of a
// namespace it carries ends with forbidden.

// revokeGrace bounds the writes of the ended events of a revoked
// stream: a reader that does not take them within it is cut all the
// same.
const revokeGrace = 2 * time.Second

// revocation is why a watcher's credentials ended it: the status a new
// request would get (401, 403), and the namespaces it names.
type revocation struct {
	err   *accessError
	names []string
}

// ended returns the ended events of a stream revoked so.
func (rv *revocation) ended() []wire.NamespaceEndedBody {
	out := make([]wire.NamespaceEndedBody, len(rv.names))
	for i, ns := range rv.names {
		out[i] = wire.NamespaceEndedBody{Namespace: ns, Code: rv.err.code(), Message: rv.err.msg}
	}
	return out
}

// guard keeps, by identity name, the watchers each identity opened, and
// checks them again on a change of the token table or an expiry.
type guard struct {
	tokens *access.Tokens
	// notified: the table tells its changes; without, nothing but
	// expiry can end a watcher, and a fixed set has none.
	notified bool
	stop     func()
	kick     chan struct{}
	quit     chan struct{}
	wg       sync.WaitGroup

	mu      sync.Mutex
	byName  map[string]*guarded
	pending map[string]bool // identities to check again
	all     bool            // every identity
	checks  int64           // watchers checked again, for tests

	// gen counts the table's changes, for what the guard does not
	// track (an ack stream authenticates again when it moved).
	gen atomic.Int64
}

// guarded is the watchers of one identity, and the timer of their
// earliest expiry.
type guarded struct {
	ws    map[*watcher]*http.Request
	timer *time.Timer
	at    time.Time // when timer fires; zero: no timer
}

func newGuard(tokens *access.Tokens) *guard {
	g := &guard{tokens: tokens, byName: make(map[string]*guarded), pending: make(map[string]bool),
		kick: make(chan struct{}, 1), quit: make(chan struct{})}
	g.stop, g.notified = tokens.NotifyChanges(g.changed)
	g.wg.Add(1)
	go g.run()
	return g
}

// changed is the table's notification: mark, and leave the checks to run.
func (g *guard) changed(c access.Change) {
	g.gen.Add(1)
	g.mu.Lock()
	if c.All {
		g.all = true
	}
	for _, name := range c.Names {
		if g.byName[name] != nil {
			g.pending[name] = true
		}
	}
	g.mu.Unlock()
	g.wake()
}

// generation returns the count of the table's changes so far.
func (g *guard) generation() int64 {
	if g == nil {
		return 0
	}
	return g.gen.Load()
}

func (g *guard) wake() {
	select {
	case g.kick <- struct{}{}:
	default:
	}
}

func (g *guard) run() {
	defer g.wg.Done()
	for {
		select {
		case <-g.kick:
		case <-g.quit:
			return
		}
		type member struct {
			w *watcher
			r *http.Request
		}
		var due []member
		g.mu.Lock()
		for name, e := range g.byName {
			if !g.all && !g.pending[name] {
				continue
			}
			for w, r := range e.ws {
				due = append(due, member{w, r})
			}
		}
		clear(g.pending)
		g.all = false
		g.mu.Unlock()
		for _, m := range due {
			g.check(m.w, m.r)
		}
	}
}

// track puts w, which request r opened, under watch: it is checked again
// at once (a change told before it was tracked is not missed), then on
// each change of its identity and at its expiry.
func (g *guard) track(w *watcher, r *http.Request) {
	if g == nil {
		return
	}
	id, ok := access.FromContext(r.Context())
	if !ok || !g.notified && id.Expires().IsZero() {
		return // nothing can end it
	}
	g.mu.Lock()
	g.add(w, r, id)
	g.mu.Unlock()
	if g.notified {
		g.check(w, r)
	}
}

// add files w under id; g.mu is held.
func (g *guard) add(w *watcher, r *http.Request, id access.Identity) {
	e := g.byName[id.Name]
	if e == nil {
		e = &guarded{ws: make(map[*watcher]*http.Request)}
		g.byName[id.Name] = e
	}
	e.ws[w] = r
	w.ident = id.Name
	g.arm(id.Name, e, id.Expires())
}

// untrack forgets w (its handler returns).
func (g *guard) untrack(w *watcher) {
	if g == nil {
		return
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	g.drop(w)
}

// drop takes w out of its identity's set; g.mu is held.
func (g *guard) drop(w *watcher) {
	e := g.byName[w.ident]
	if e == nil {
		return
	}
	delete(e.ws, w)
	if len(e.ws) == 0 {
		if e.timer != nil {
			e.timer.Stop()
		}
		delete(g.byName, w.ident)
	}
}

// arm makes sure e's timer fires by exp (zero: no expiry); g.mu is held.
func (g *guard) arm(name string, e *guarded, exp time.Time) {
	if exp.IsZero() || e.timer != nil && !e.at.After(exp) {
		return
	}
	if e.timer != nil {
		e.timer.Stop()
	}
	d := time.Until(exp)
	if d <= 0 {
		// Expired by this clock, yet it authenticated (a table on a
		// clock of its own): look again in a while, not in a loop.
		d = time.Second
	}
	e.at = exp
	e.timer = time.AfterFunc(d, func() {
		g.mu.Lock()
		if g.byName[name] == e && e.at.Equal(exp) {
			e.timer, e.at = nil, time.Time{}
			g.pending[name] = true
		}
		g.mu.Unlock()
		g.wake()
	})
}

// check authenticates w's request again and ends w if its credentials no
// longer let it read what it carries.
func (g *guard) check(w *watcher, r *http.Request) {
	g.mu.Lock()
	g.checks++
	g.mu.Unlock()
	id, ok := g.tokens.AuthenticateRequest(r)
	if !ok {
		name, _ := access.FromContext(r.Context())
		w.revoke(&revocation{
			err:   &accessError{http.StatusUnauthorized, fmt.Sprintf("token %q was revoked or has expired", name.Name)},
			names: w.names(),
		})
		return
	}
	var lost []string
	for _, ns := range w.names() {
		if !id.MayRead(ns) {
			lost = append(lost, ns)
		}
	}
	if len(lost) > 0 {
		w.revoke(&revocation{
			err:   &accessError{http.StatusForbidden, fmt.Sprintf("token %q may no longer read namespace %q", id.Name, lost[0])},
			names: lost,
		})
		return
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if e := g.byName[w.ident]; e == nil || e.ws[w] == nil {
		return // its handler returned meanwhile
	}
	if id.Name != w.ident { // the same secret, renamed: follow it
		g.drop(w)
		g.add(w, r, id)
		return
	}
	g.arm(id.Name, g.byName[id.Name], id.Expires())
}

// close stops the notifications, the timers and the checks.
func (g *guard) close() {
	if g == nil {
		return
	}
	g.stop()
	g.mu.Lock()
	select {
	case <-g.quit:
	default:
		close(g.quit)
	}
	for _, e := range g.byName {
		if e.timer != nil {
			e.timer.Stop()
		}
	}
	g.mu.Unlock()
	g.wg.Wait()
}

// guardChecks counts the watchers checked again since New (for tests:
// a change checks only its identities' watchers).
func (s *Server) guardChecks() int64 {
	if s.guard == nil {
		return 0
	}
	s.guard.mu.Lock()
	defer s.guard.mu.Unlock()
	return s.guard.checks
}

// revoke ends the watcher for its credentials: like kill, but a stream's
// pending write gets revokeGrace, so that its ended events can still go
// out to a reader that reads.
func (w *watcher) revoke(rv *revocation) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.killed {
		return
	}
	w.killed = true
	w.revoked = rv
	close(w.done)
	if w.deadline != nil && !w.finished {
		_ = w.deadline(time.Now().Add(revokeGrace))
	}
}

// revocation returns why the watcher's credentials ended it; nil when
// they did not.
func (w *watcher) revocation() *revocation {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.revoked
}

// refuseRevoked answers a held long-poll whose credentials ended it as a
// new request with them would be answered.
func (s *Server) refuseRevoked(w http.ResponseWriter, r *http.Request, rv *revocation) {
	defer s.speak(r)()
	if rv.err.status == http.StatusUnauthorized {
		w.Header().Set("WWW-Authenticate", `Bearer realm="holdfast"`)
	}
	s.planeHeaders(w, "")
	writeError(w, rv.err.status, transport.ErrorBody{Error: rv.err.code(), Message: rv.err.msg, StoreID: s.StoreID()})
}

// unwatch takes a watcher out of the hub and the guard: its handler
// returns.
func (s *Server) unwatch(w *watcher) {
	s.hub.remove(w)
	s.guard.untrack(w)
}
