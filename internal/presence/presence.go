// Package presence keeps which clients are connected to a server or a
// relay, directly or through the relays behind it (docs/SERVER.md,
// "Presence"): the data plane opens an entry per stream or held
// long-poll, a relay's presence reports (POST /sdk/presence) tell the
// clients behind it, and a Reporter sends a relay's own upstream, as
// changes. Servers share theirs through the store (server/control).
package presence

import (
	"cmp"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/holdfast-dev/holdfast/internal/wire"
	"github.com/holdfast-dev/holdfast/transport"
)

// State is a client's presence.
type State string

// The states of a client. A table's entries are Live, Stale or Gone as
// the connections say (Gone: disconnected, at Entry.At); what an
// operator sees (Entry.Shown) is Stale for a client disconnected less
// than GoneAfter ago, which may be reconnecting.
const (
	// Live: a connection open, directly or at a relay, and confirmed.
	Live State = "live"
	// Stale: connected but unconfirmed (no write to its stream went out
	// for Liveness), or behind a relay cut off from this server.
	Stale State = "stale"
	// Gone: disconnected.
	Gone State = "gone"
)

const (
	// GoneAfter is how long a client is disconnected before it shows
	// gone: a client that reconnects meanwhile (elsewhere too) never
	// does.
	GoneAfter = 5 * time.Second
	// Forget is how long a gone client is kept: past it, it leaves the
	// table (and /control/clients).
	Forget = 10 * time.Minute
	// DefaultMax bounds a table's entries: past it, a new client is not
	// kept, and counted (Stats.Dropped).
	DefaultMax = 1_000_000
)

// rank orders states for merging: the better one wins.
func (s State) rank() int {
	switch s {
	case Live:
		return 2
	case Stale:
		return 1
	}
	return 0
}

// Beats reports whether s is the better of s and o (live beats stale
// beats gone): a client is where its presence is best.
func (s State) Beats(o State) bool { return s.rank() > o.rank() }

// Connected reports whether the client is connected as far as anyone
// knows (live, or stale: its stream or relay unconfirmed): its liveness
// is its connection, not its reports' repeats.
func (s State) Connected() bool { return s == Live || s == Stale }

// Entry is one client's presence.
type Entry struct {
	State State
	// At is when it was last confirmed (Live, Stale) or when it
	// disconnected (Gone).
	At time.Time
	// Relay is the relay it is connected to ("" directly), and Epoch
	// that relay's run (wire.PresenceReport.Epoch): two relays that give
	// one id are told apart by it.
	Relay string
	Epoch string
}

// Shown is the state an operator sees at now: a client disconnected less
// than GoneAfter ago is stale, not yet gone.
func (e Entry) Shown(now time.Time) State {
	if e.State == Gone && now.Sub(e.At) < GoneAfter {
		return Stale
	}
	return cmp.Or(e.State, Gone)
}

// Merge returns the better of two reports of one client: the better
// state, of two alike the later. Two reports through one relay (to two
// servers: it moved from one to the other) are one source: the later
// speaks, so that the server it left, which holds its clients stale, does
// not hide that a client left it since.
func Merge(x, y Entry) Entry {
	if x.Relay != "" && x.Relay == y.Relay {
		if y.At.After(x.At) {
			return y
		}
		return x
	}
	switch rx, ry := x.State.rank(), y.State.rank(); {
	case ry > rx, ry == rx && y.At.After(x.At):
		return y
	}
	return x
}

// Table is a server's or relay's presence: its own connections, and
// what the relays behind it report. It is safe for concurrent use.
type Table struct {
	liveness time.Duration
	max      int
	log      *slog.Logger
	now      func() time.Time

	mu        sync.Mutex
	local     map[string]*conn
	relays    map[string]*relayRec
	size      int // entries in local and in every relay's clients
	dropped   int64
	droppedAt time.Time // when the last new client was not kept
	untracked int       // connections open of clients the table could not keep
	logged    time.Time // when a drop was last logged
	// lost is what this process lost of its clients' reports past its
	// other bounds (NoteLost); the relays behind it say theirs in their
	// reports (relayRec.lost). See lost.go.
	lost map[lostKey]wire.LostReports
}

// conn is a client's connections to this process.
type conn struct {
	streams, held int
	confirmed     time.Time // the last write its streams took
	closed        time.Time // when the last one ended; zero while one is open
}

// relayRec is what one relay reported.
type relayRec struct {
	epoch   string
	seq     uint64
	every   time.Duration
	heard   time.Time
	clients map[string]Entry // Entry.At: when the report that said it came
	lost    map[lostKey]wire.LostReports
	// untracked counts the clients the relay's run of reports (since its
	// last full one) said connected and the table could not keep.
	untracked int
}

// NewTable returns a table whose streams are stale when unconfirmed for
// liveness (two heartbeats), of at most max entries (0: DefaultMax).
func NewTable(liveness time.Duration, max int, log *slog.Logger) *Table {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Table{liveness: liveness, max: cmp.Or(max, DefaultMax), log: log, now: time.Now,
		local: make(map[string]*conn), relays: make(map[string]*relayRec)}
}

// Handle is one connection's entry: Confirm it at each write its client
// took, Close it when it ends. The zero Handle does nothing.
type Handle struct {
	t      *Table
	client string
	stream bool
	told   time.Time // the last confirmation taken to the table
	// untracked: the table was full; the connection is only counted
	// (Table.Lost), until it ends.
	untracked bool
}

// Open notes a connection of client: a stream (stale unless confirmed
// within the liveness) or a held long-poll (live while held).
func (t *Table) Open(client string, stream bool) Handle {
	if t == nil || client == "" {
		return Handle{}
	}
	now := t.now()
	t.mu.Lock()
	defer t.mu.Unlock()
	c := t.local[client]
	if c == nil {
		if !t.roomLocked(now) {
			t.untracked++
			return Handle{t: t, client: client, untracked: true}
		}
		c = &conn{}
		t.local[client] = c
		t.size++
	}
	if stream {
		c.streams++
	} else {
		c.held++
	}
	c.confirmed, c.closed = now, time.Time{}
	return Handle{t: t, client: client, stream: stream, told: now}
}

// Confirm notes that the connection's client took a write. Of the writes
// of a quarter of the liveness, the first only takes the table's lock: a
// publish to ten thousand streams costs it nothing.
func (h *Handle) Confirm() {
	if h.t == nil || h.untracked {
		return
	}
	now := h.t.now()
	if now.Sub(h.told) < h.t.liveness/4 {
		return
	}
	h.told = now
	h.t.mu.Lock()
	if c := h.t.local[h.client]; c != nil {
		c.confirmed = now
	}
	h.t.mu.Unlock()
}

// Close ends the connection.
func (h Handle) Close() {
	if h.t == nil {
		return
	}
	now := h.t.now()
	h.t.mu.Lock()
	defer h.t.mu.Unlock()
	if h.untracked {
		h.t.untracked--
		return
	}
	c := h.t.local[h.client]
	if c == nil {
		return
	}
	if h.stream {
		c.streams--
	} else {
		c.held--
	}
	if c.streams <= 0 && c.held <= 0 {
		c.streams, c.held, c.closed = 0, 0, now
	}
}

// roomLocked reports whether one more entry fits; when not, it counts the
// drop and logs it at most once a minute. t.mu is held.
func (t *Table) roomLocked(now time.Time) bool {
	if t.size < t.max {
		return true
	}
	t.dropped, t.droppedAt = t.dropped+1, now
	if now.Sub(t.logged) >= time.Minute {
		t.logged = now
		t.log.Warn("presence: the table is full; new clients are not tracked (they show gone)", "max", t.max, "dropped", t.dropped)
	}
	return false
}

// Report records a relay's presence report, heard now. A report that
// continues a run the table does not know (another epoch, a seq not
// next) is refused whole with an error wrapping
// transport.ErrPresenceUnknown: the relay sends its set again.
func (t *Table) Report(rep *wire.PresenceReport) error {
	now := t.now()
	t.mu.Lock()
	defer t.mu.Unlock()
	r := t.relays[rep.RelayID]
	if !rep.Full && (r == nil || r.epoch != rep.Epoch || rep.Seq != r.seq+1) {
		return fmt.Errorf("%w: relay %q, epoch %q, report %d", transport.ErrPresenceUnknown, rep.RelayID, rep.Epoch, rep.Seq)
	}
	if r == nil {
		r = &relayRec{clients: make(map[string]Entry)}
		t.relays[rep.RelayID] = r
	}
	if rep.Full {
		r.untracked = 0 // counted afresh
		listed := make(map[string]bool, len(rep.Live)+len(rep.Stale)+len(rep.Gone))
		for _, ids := range [][]string{rep.Live, rep.Stale, rep.Gone} {
			for _, id := range ids {
				listed[id] = true
			}
		}
		for id, e := range r.clients {
			if !listed[id] && e.State != Gone {
				r.clients[id] = Entry{State: Gone, At: now, Relay: rep.RelayID, Epoch: rep.Epoch}
			}
		}
	}
	r.epoch, r.seq, r.every, r.heard = rep.Epoch, rep.Seq, time.Duration(rep.EveryMillis)*time.Millisecond, now
	r.lost = mergeLost(r.lost, rep.Lost, now)
	set := func(ids []string, st State) {
		for _, id := range ids {
			old, ok := r.clients[id]
			if ok && old.State == Gone && st == Gone {
				continue // gone already: as of then
			}
			if !ok && st == Gone && r.untracked > 0 {
				// A client the relay said connected before, which the
				// table could not keep, left (or one of them: the count
				// is at most; a change of state of one counts again, until
				// the relay's next full report).
				r.untracked--
				continue
			}
			if !ok && !t.roomLocked(now) {
				if st != Gone {
					r.untracked++
				}
				continue
			}
			if !ok {
				t.size++
			}
			r.clients[id] = Entry{State: st, At: now, Relay: rep.RelayID, Epoch: rep.Epoch}
		}
	}
	set(rep.Live, Live)
	set(rep.Stale, Stale)
	set(rep.Gone, Gone)
	return nil
}

// Entries returns every client's presence now, each the best of what its
// connections and the relays say; clients gone past Forget, and relays
// unheard past it, are forgotten on the way.
func (t *Table) Entries() map[string]Entry {
	now := t.now()
	t.mu.Lock()
	defer t.mu.Unlock()
	out := make(map[string]Entry, t.size)
	put := func(id string, e Entry) {
		if had, ok := out[id]; ok {
			e = Merge(had, e)
		}
		out[id] = e
	}
	for id, c := range t.local {
		switch {
		case c.held > 0:
			put(id, Entry{State: Live, At: now})
		case c.streams > 0 && now.Sub(c.confirmed) <= t.liveness:
			put(id, Entry{State: Live, At: c.confirmed})
		case c.streams > 0:
			put(id, Entry{State: Stale, At: c.confirmed})
		case now.Sub(c.closed) > Forget:
			delete(t.local, id)
			t.size--
		default:
			put(id, Entry{State: Gone, At: c.closed})
		}
	}
	for rid, r := range t.relays {
		if now.Sub(r.heard) > Forget {
			t.size -= len(r.clients)
			delete(t.relays, rid)
			continue
		}
		cut := now.Sub(r.heard) > 2*r.every
		for id, e := range r.clients {
			switch {
			case e.State == Gone && now.Sub(e.At) > Forget:
				delete(r.clients, id)
				t.size--
				continue
			case e.State != Gone && cut:
				e.State, e.At = Stale, r.heard // the relay is not heard: its clients are unconfirmed
			case e.State != Gone:
				e.At = r.heard
			}
			put(id, e)
		}
	}
	return out
}

// Stats are a table's counts.
type Stats struct {
	Entries int   // clients and relays' clients held
	Dropped int64 // new clients not kept: the table was full
}

// Stats returns the table's counts.
func (t *Table) Stats() Stats {
	if t == nil {
		return Stats{}
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	return Stats{Entries: t.size, Dropped: t.dropped}
}
