package watchcache

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/holdfast-dev/holdfast/internal/dataplane"
	"github.com/holdfast-dev/holdfast/internal/wire"
	"github.com/holdfast-dev/holdfast/transport"
)

// A follower is a cache's backend: the namespaces it follows from its
// upstream, each with its live content and a bounded window of the change
// sets that led to it, under the upstream's store id and revisions. The
// cache feeds it what its syncers learn (Load, Apply, Confirm, Fail);
// the data-plane handlers read it as they read the MVCC store.
type follower struct {
	mu         sync.Mutex
	id         string // the upstream's store id; "" before any data
	gen        uint64
	nss        map[string]*followerNS
	head       int64 // every namespace with data is complete up to it
	maxChanges int
	maxBytes   int64
	// seq numbers what is handed to the hub (changes, head moves), in
	// order; headSeq is the last head's. A watcher keeps them from its
	// subscription (see watcher.seq).
	seq, headSeq uint64
	// waiting counts, by name, the requests in demand: a namespace a
	// request waits for is not idle.
	waiting map[string]int
	// want is the relay's: start following ns (it must not block), or
	// refuse it with a *dataplane.RefusedError.
	want    func(ns string) error
	changed chan struct{} // closed and replaced on every change of state
	now     func() time.Time

	// pending are the hub items (changes, resets, head moves, the beat
	// a confirmation asks for) of the operation under way, handed to out
	// as one batch before f.mu is released (unlock): the hub then sees a
	// change and the head move that covers it together, and a relay's
	// stream sends both in one write, before the beat.
	pending []dataplane.HubItem
	out     func([]dataplane.HubItem)
	// confirms counts the upstream's confirmations: a stream that told
	// progress since the last one has nothing new to beat for.
	confirms uint64
	// flips counts the changes of a namespace's unconfirmed flag (a
	// confirmation's, Fail's): a beat that tells one always goes.
	flips uint64
	// backfill, when set, reads the upstream's change sets of a namespace
	// after a cursor older than the window (SetBackfill).
	backfill Backfill
	// confirmer, when set, confirms a namespace up to the upstream's head
	// for a request whose cursor is ahead of the follower's (SetConfirmer).
	confirmer Confirm
}

// SetConfirmer sets the follower's Confirm (see Config.Confirm); call it
// before serving.
func (f *follower) SetConfirmer(c Confirm) {
	f.mu.Lock()
	defer f.unlock()
	f.confirmer = c
}

// SeedStoreID names the upstream's store before it has sent any data
// (holdfast server knows its store's id from the start), so that a reply
// before the first data, a 404 of a namespace the store lacks, names
// its store as every reply must.
func (f *follower) SeedStoreID(id string) {
	f.mu.Lock()
	defer f.unlock()
	if f.id == "" {
		f.id = id
	}
}

// SetBackfill sets the follower's Backfill (see Config.Backfill); call it
// before serving.
func (f *follower) SetBackfill(b Backfill) {
	f.mu.Lock()
	defer f.unlock()
	f.backfill = b
}

// fill extends the windows of reqs' namespaces back to their cursors
// where the window does not reach them, through the backfill; a
// namespace it cannot fill is left as it is (the request then gets
// compacted, and the client resnapshots).
func (f *follower) fill(ctx context.Context, reqs []dataplane.SinceReq) {
	type gap struct {
		name         string
		since, floor int64
		gen          uint64
	}
	var gaps []gap
	f.mu.Lock()
	for _, r := range reqs {
		if n := f.nss[r.Name]; f.backfill != nil && n != nil && n.ready && r.Since >= 0 && r.Since < n.floor && r.Since <= n.cursor {
			gaps = append(gaps, gap{r.Name, r.Since, n.floor, f.gen})
		}
	}
	b := f.backfill
	f.unlock()
	for _, g := range gaps {
		css, err := b(ctx, g.name, g.since, g.floor, f.maxChanges)
		if err != nil || len(css) > 0 && css[len(css)-1].Revision > g.floor {
			continue
		}
		f.mu.Lock()
		// The window may have grown back meanwhile (another request's
		// fill): what it lacks is what css holds up to its floor now.
		if n := f.nss[g.name]; f.gen == g.gen && n != nil && n.ready && g.since < n.floor && n.floor <= g.floor {
			older := make([]*dataplane.Change, 0, len(css)+len(n.changes))
			for _, cs := range css {
				if cs.Revision > n.floor {
					break
				}
				// seq 0: history, never handed to the hub.
				c := &dataplane.Change{Gen: f.gen, CS: cs}
				older = append(older, c)
				n.bytes += int64(c.Size())
			}
			n.changes = append(older, n.changes...)
			n.floor = g.since
		}
		f.unlock()
	}
}

func (f *follower) StreamState(names ...string) dataplane.StreamState {
	f.mu.Lock()
	defer f.unlock()
	st := dataplane.StreamState{Confirms: f.confirms, Flips: f.flips, AtReceipt: true}
	for _, ns := range names {
		if n := f.nss[ns]; n != nil && n.ready {
			if st.Dated.IsZero() || n.confirmedAt.Before(st.Dated) {
				st.Dated = n.confirmedAt
			}
			st.Unconfirmed = st.Unconfirmed || n.unconfirmed
			st.AtReceipt = st.AtReceipt && n.atReceipt
		}
	}
	if !st.Dated.IsZero() {
		st.Age = max(f.now().Sub(st.Dated), 0)
	}
	return st
}

// unlock hands the pending hub items over, in order, and releases f.mu.
func (f *follower) unlock() {
	if len(f.pending) > 0 {
		if f.out != nil {
			f.out(f.pending)
		}
		clear(f.pending)
		f.pending = f.pending[:0]
	}
	f.mu.Unlock()
}

// followerNS is one namespace of a follower.
type followerNS struct {
	ready   bool // it has data of the current store
	rev     int64
	live    map[string]json.RawMessage // replaced, never mutated
	changes []*dataplane.Change        // the window, oldest first
	bytes   int64                      // of changes' JSON
	// floor: the window holds every change after it; an older cursor is
	// compacted away here.
	floor       int64
	cursor      int64
	confirmedAt time.Time // when the upstream last confirmed the data
	// atReceipt: that confirmation came with no age (a change or a
	// progress of its upstream's own data, not a resnapshot or a relay's
	// aged progress): the data is dated when this relay received it.
	atReceipt   bool
	unconfirmed bool      // the upstream is not confirming it now
	demanded    time.Time // the last downstream request for it
	// leaving: its relay is dropping it (Leave): no request may join it
	// until Drop, as nothing will follow it.
	leaving bool
	// absent: the upstream says it has no such namespace (Absent); while
	// there is no data of it, a request for it is refused as unknown.
	absent bool
}

// newFollower returns an empty follower whose windows keep at most
// maxChanges change sets and maxBytes of them per namespace. want is
// called, without the follower's lock, for a namespace a request names
// that is not followed yet.
func newFollower(maxChanges int, maxBytes int64, want func(ns string) error) *follower {
	return &follower{
		gen: 1, nss: make(map[string]*followerNS), maxChanges: max(maxChanges, 1), maxBytes: maxBytes,
		want: want, changed: make(chan struct{}), now: time.Now, waiting: make(map[string]int),
	}
}

// changedLocked wakes every request waiting for the follower's state.
func (f *follower) changedLocked() {
	close(f.changed)
	f.changed = make(chan struct{})
}

func (f *follower) get(ns string) *followerNS {
	n := f.nss[ns]
	if n == nil {
		n = &followerNS{}
		f.nss[ns] = n
	}
	return n
}

// Load serves data read from a last-good file until the upstream speaks:
// unconfirmed, confirmed at confirmedAt. It is ignored for a namespace
// that has data, or of another store than data already loaded.
func (f *follower) Load(ns, storeID string, rev, cursor int64, values map[string]json.RawMessage, confirmedAt time.Time) {
	f.mu.Lock()
	defer f.unlock()
	if f.id != "" && f.id != storeID {
		return
	}
	n := f.get(ns)
	if n.ready {
		return
	}
	f.id = storeID
	*n = followerNS{ready: true, rev: rev, live: values, floor: cursor, cursor: cursor,
		confirmedAt: confirmedAt, unconfirmed: true, demanded: n.demanded}
	f.flips++
	f.advanceLocked()
	f.changedLocked()
}

// Apply records new data of ns from its syncer: the change set that led to
// it from the data applied before (cs, nil when the data came whole as a
// snapshot), its store id, revision and content, the cursor it is
// complete up to, and, as Confirm, how long ago the upstream's upstream
// confirmed it and whether the upstream is confirming it now: in the
// same step, so that no reply tells the data without its age. A new
// store id is a store reset for every namespace: the others serve nothing
// until they have data of the new store; a revision behind the one served
// (history rewound) likewise.
func (f *follower) Apply(ns, storeID string, rev, cursor int64, values map[string]json.RawMessage, cs *transport.ChangeSet,
	age time.Duration, unconfirmed bool) {
	f.mu.Lock()
	defer f.unlock()
	f.applyLocked(ns, storeID, rev, cursor, values, cs, age, unconfirmed)
}

func (f *follower) applyLocked(ns, storeID string, rev, cursor int64, values map[string]json.RawMessage, cs *transport.ChangeSet,
	age time.Duration, unconfirmed bool) {
	n := f.get(ns)
	if storeID != f.id || (n.ready && rev < n.rev) {
		f.resetLocked(storeID)
	}
	switch {
	case !n.ready:
		n.ready, n.changes, n.bytes, n.floor, n.absent = true, nil, 0, cursor, false
	case rev == n.rev:
		// The same data again (a resnapshot that found nothing new).
	case cs != nil && cs.PrevRevision == n.rev:
		f.commitLocked(ns, n, *cs)
	default:
		// Whole data after a gap: downstream gets the difference as one
		// change set from the revision it holds.
		f.commitLocked(ns, n, diff(ns, storeID, n.rev, rev, n.live, values, f.now()))
	}
	n.rev, n.live = rev, values
	f.confirmLocked(n, cursor, age, unconfirmed)
}

// resetLocked starts a new generation of storeID: every namespace serves
// nothing until it has data of it, every watcher of the old one is ended.
func (f *follower) resetLocked(storeID string) {
	f.id = storeID
	f.gen++
	for _, n := range f.nss {
		*n = followerNS{demanded: n.demanded, leaving: n.leaving}
	}
	f.head = 0
	f.pending = append(f.pending, dataplane.HubItem{Gen: f.gen})
}

// commitLocked appends cs to ns's window (trimming it) and hands it to the
// hub.
func (f *follower) commitLocked(ns string, n *followerNS, cs transport.ChangeSet) {
	f.seq++
	c := &dataplane.Change{Gen: f.gen, Seq: f.seq, CS: cs}
	n.changes = append(n.changes, c)
	n.bytes += int64(c.Size())
	for len(n.changes) > f.maxChanges || (f.maxBytes > 0 && n.bytes > f.maxBytes && len(n.changes) > 1) {
		old := n.changes[0]
		n.floor = old.CS.Revision
		n.bytes -= int64(old.Size())
		n.changes = slices.Delete(slices.Clone(n.changes), 0, 1)
	}
	f.pending = append(f.pending, dataplane.HubItem{C: c, Gen: c.Gen})
}

// diff is the change set from content old at revision prev to content
// next at revision rev.
func diff(ns, storeID string, prev, rev int64, old, next map[string]json.RawMessage, at time.Time) transport.ChangeSet {
	cs := transport.ChangeSet{Namespace: ns, Revision: rev, PrevRevision: prev, StoreID: storeID, CommittedAt: at.UTC()}
	for k, v := range next {
		if o, ok := old[k]; !ok || !bytes.Equal(o, v) {
			if cs.Puts == nil {
				cs.Puts = make(map[string]json.RawMessage)
			}
			cs.Puts[k] = v
		}
	}
	for k := range old {
		if _, ok := next[k]; !ok {
			cs.Deletes = append(cs.Deletes, k)
		}
	}
	slices.Sort(cs.Deletes)
	return cs
}

// Confirm records that the upstream confirmed ns as current up to cursor,
// age ago (its own upstream's age), unconfirmed if it said so. It reports
// false when the follower has no data of ns to confirm (see Refill).
func (f *follower) Confirm(ns string, cursor int64, age time.Duration, unconfirmed bool) bool {
	f.mu.Lock()
	defer f.unlock()
	n := f.nss[ns]
	if n == nil || !n.ready {
		return false
	}
	f.confirmLocked(n, cursor, age, unconfirmed)
	return true
}

// confirmLocked records that n's data is complete up to cursor and was
// confirmed by the upstream age ago (unconfirmed: not now), moves the
// head, wakes the requests waiting and asks the streams to beat.
func (f *follower) confirmLocked(n *followerNS, cursor int64, age time.Duration, unconfirmed bool) {
	n.cursor = max(n.cursor, cursor)
	if n.unconfirmed != unconfirmed {
		f.flips++
	}
	n.confirmedAt, n.atReceipt, n.unconfirmed = f.now().Add(-max(age, 0)), age <= 0, unconfirmed
	f.advanceLocked()
	f.changedLocked()
	f.confirms++
	f.pending = append(f.pending, dataplane.HubItem{Beat: true})
}

// Refill serves again the data ns's syncer holds, of storeID, when ns has
// none because of a reset another namespace brought (a new store, history
// rewound): a syncer whose data is still good applies nothing until it
// changes, and only confirms it. It does nothing while the follower is of
// another store (the syncer resnapshots once it learns of it).
func (f *follower) Refill(ns, storeID string, rev, cursor int64, values map[string]json.RawMessage, age time.Duration, unconfirmed bool) {
	f.mu.Lock()
	defer f.unlock()
	if n := f.nss[ns]; n != nil && !n.ready && f.id == storeID {
		f.applyLocked(ns, storeID, rev, cursor, values, nil, age, unconfirmed)
	}
}

// Fail records that the upstream is not confirming ns right now.
func (f *follower) Fail(ns string) {
	f.mu.Lock()
	defer f.unlock()
	if n := f.nss[ns]; n != nil && !n.unconfirmed {
		n.unconfirmed = true
		f.flips++ // a beat already asked for must now go: it carries the flag
		f.pending = append(f.pending, dataplane.HubItem{Beat: true})
		f.changedLocked()
	}
}

// Absent records that the upstream has no namespace ns: until it has
// data of it, the follower answers a request for it as the upstream
// would (404, ended not_found), at once.
func (f *follower) Absent(ns string) {
	f.mu.Lock()
	defer f.unlock()
	if n := f.nss[ns]; n != nil && !n.ready && !n.absent {
		n.absent = true
		f.changedLocked()
	}
}

func errAbsent(ns string) error {
	return fmt.Errorf("%w: %q: the relay's upstream has no such namespace", dataplane.ErrUnknownNamespace, ns)
}

// Drop stops serving ns (its relay no longer follows it).
func (f *follower) Drop(ns string) {
	f.mu.Lock()
	defer f.unlock()
	delete(f.nss, ns)
	f.advanceLocked()
	f.changedLocked()
}

// Idle returns the namespaces no request named within d, whose data the
// hub carries to nobody (busy reports whether it does), and that no
// request waits for.
func (f *follower) Idle(d time.Duration, busy func(ns string) bool) []string {
	f.mu.Lock()
	defer f.unlock()
	var out []string
	cut := f.now().Add(-d)
	for ns, n := range f.nss {
		if f.idleLocked(ns, n, cut, busy) {
			out = append(out, ns)
		}
	}
	sort.Strings(out)
	return out
}

func (f *follower) idleLocked(ns string, n *followerNS, cut time.Time, busy func(ns string) bool) bool {
	return n.demanded.Before(cut) && f.waiting[ns] == 0 && !busy(ns)
}

// Leave marks ns as leaving if it is still idle (see Idle), and reports
// whether it did: from then on no request joins it (they are refused as
// the relay's want refuses them) until Drop. The check and the mark are
// one step under the lock that subscriptions take, so that no watcher
// is left carrying a namespace nobody follows.
func (f *follower) Leave(ns string, d time.Duration, busy func(ns string) bool) bool {
	f.mu.Lock()
	defer f.unlock()
	n := f.nss[ns]
	if n == nil || !f.idleLocked(ns, n, f.now().Add(-d), busy) {
		return false
	}
	n.leaving = true
	return true
}

// followedStatus is what a follower serves of one namespace.
type followedStatus struct {
	Namespace   string
	StoreID     string
	Ready       bool
	Revision    int64
	Cursor      int64
	Floor       int64 // the oldest cursor the window resumes
	Changes     int   // in the window
	Age         time.Duration
	Unconfirmed bool
}

// Status returns what the follower serves, by namespace.
func (f *follower) Status() []followedStatus {
	f.mu.Lock()
	defer f.unlock()
	out := make([]followedStatus, 0, len(f.nss))
	now := f.now()
	for ns, n := range f.nss {
		st := followedStatus{Namespace: ns, Ready: n.ready}
		if n.ready {
			st.StoreID, st.Revision, st.Cursor, st.Floor, st.Changes = f.id, n.rev, n.cursor, n.floor, len(n.changes)
			st.Age, st.Unconfirmed = now.Sub(n.confirmedAt), n.unconfirmed
		}
		out = append(out, st)
	}
	slices.SortFunc(out, func(a, b followedStatus) int { return strings.Compare(a.Namespace, b.Namespace) })
	return out
}

// advanceLocked moves the head to the lowest cursor of the namespaces with
// data, and tells the hub when it moved: up, or down when a namespace
// joins below it.
func (f *follower) advanceLocked() {
	var low int64 = -1
	for _, n := range f.nss {
		if n.ready && (low < 0 || n.cursor < low) {
			low = n.cursor
		}
	}
	if low < 0 || low == f.head {
		return
	}
	f.head = low
	f.seq++
	f.headSeq = f.seq
	f.pending = append(f.pending, dataplane.HubItem{Gen: f.gen, Head: low, Seq: f.seq, Move: true})
}

// backend

func (f *follower) Info() (string, int64, int64) {
	f.mu.Lock()
	defer f.unlock()
	return f.id, f.head, 0
}

func (f *follower) NsRevision(ns string) (int64, bool) {
	f.mu.Lock()
	defer f.unlock()
	if n := f.nss[ns]; n != nil && n.ready {
		return n.rev, true
	}
	return 0, false
}

func (f *follower) Generation() uint64 {
	f.mu.Lock()
	defer f.unlock()
	return f.gen
}

// known: a relay forwards every ack; its upstream knows its namespaces.
func (f *follower) Known(acks []transport.Ack) []transport.Ack { return acks }

func (f *follower) Snapshot(ns string) (dataplane.Snapshot, error) {
	f.mu.Lock()
	defer f.unlock()
	n := f.nss[ns]
	if n != nil && !n.ready && n.absent {
		return dataplane.Snapshot{StoreID: f.id, Cursor: f.head}, errAbsent(ns)
	}
	if n == nil || !n.ready {
		return dataplane.Snapshot{StoreID: f.id, Cursor: f.head}, errNotReady(ns)
	}
	return dataplane.Snapshot{StoreID: f.id, Rev: n.rev, Cursor: n.cursor, Compact: n.floor, Values: n.live}, nil
}

func errNotReady(ns string) error {
	return &dataplane.RefusedError{Namespace: ns, Status: http.StatusServiceUnavailable, Code: transport.CodeUnavailable,
		Message: "the relay has no data of it yet"}
}

// check is subscribe's verdict on one namespace: nil, or the error of its
// own watch.
func (f *follower) check(ns string, since int64) (*followerNS, error) {
	n := f.nss[ns]
	switch {
	case n != nil && !n.ready && n.absent:
		return nil, errAbsent(ns)
	case n == nil || !n.ready || n.leaving:
		return nil, errNotReady(ns)
	case since > n.cursor && n.unconfirmed:
		// Behind the client and cut off: not another history, as far as
		// the relay can tell. cursor_ahead would make the client
		// resnapshot and, the older data persisting, take it for
		// rewritten history and go back; 503 keeps what it holds.
		return nil, &dataplane.RefusedError{Namespace: ns, Status: http.StatusServiceUnavailable, Code: transport.CodeUnavailable,
			Message: fmt.Sprintf("cursor %d is above the relay's %d, and its upstream is not confirming it", since, n.cursor)}
	case since > n.cursor:
		return nil, fmt.Errorf("%w: cursor %d is above the relay's %d", transport.ErrCursorAhead, since, n.cursor)
	case since < n.floor:
		return nil, &transport.CompactedError{CompactRevision: n.floor}
	}
	return n, nil
}

func (f *follower) Subscribe(ns string, since int64, register func(dataplane.Subscription)) (dataplane.Subscription, error) {
	f.mu.Lock()
	defer f.unlock()
	sub := dataplane.Subscription{StoreID: f.id, Gen: f.gen, Head: f.head, Seq: f.seq, HeadSeq: f.headSeq}
	if n := f.nss[ns]; n != nil && n.ready {
		sub.Head, sub.NsRev = n.cursor, n.rev
		if since < 0 {
			since = n.cursor
		}
	}
	n, err := f.check(ns, since)
	if err != nil {
		return sub, err
	}
	i := sort.Search(len(n.changes), func(i int) bool { return n.changes[i].CS.Revision > since })
	sub.Backlog = n.changes[i:len(n.changes):len(n.changes)]
	if register != nil {
		register(sub)
	}
	return sub, nil
}

func (f *follower) SubscribeMany(reqs []dataplane.SinceReq, register func(dataplane.Subscription, []string)) (dataplane.Subscription, []wire.NamespaceEndedBody) {
	f.mu.Lock()
	defer f.unlock()
	sub := dataplane.Subscription{StoreID: f.id, Gen: f.gen, Head: f.head, Seq: f.seq, HeadSeq: f.headSeq}
	var ended []wire.NamespaceEndedBody
	names := make([]string, 0, len(reqs))
	low := int64(-1) // the lowest cursor of the namespaces subscribed
	for _, r := range reqs {
		n, err := f.check(r.Name, r.Since)
		if err != nil {
			_, body := dataplane.ErrorReply(err)
			ended = append(ended, wire.NamespaceEndedBody{Namespace: r.Name, Code: body.Error, Message: body.Message, CompactRevision: body.CompactRevision})
			continue
		}
		names = append(names, r.Name)
		if low < 0 || n.cursor < low {
			low = n.cursor
		}
		i := sort.Search(len(n.changes), func(i int) bool { return n.changes[i].CS.Revision > r.Since })
		sub.Backlog = append(sub.Backlog, n.changes[i:]...)
	}
	if low >= 0 {
		sub.Head = low
	}
	slices.SortFunc(sub.Backlog, func(a, b *dataplane.Change) int { return cmp.Compare(a.CS.Revision, b.CS.Revision) })
	if register != nil {
		register(sub, names)
	}
	return sub, ended
}

func (f *follower) Freshness(names ...string) (time.Duration, bool) {
	st := f.StreamState(names...)
	return st.Age, st.Unconfirmed
}

// demandWait bounds how long a request waits for a namespace's first
// data; catchUpWait how long for the relay to catch up with a cursor
// ahead of its own (a client that comes from a relay a little ahead: the
// upstream's prompt progress closes such a gap within a second). A cursor
// still ahead after it belongs to another history: cursor_ahead; unless
// the relay's upstream is not confirming it (see check): 503.
const (
	demandWait  = 10 * time.Second
	catchUpWait = time.Second
)

func (f *follower) Demand(ctx context.Context, reqs []dataplane.SinceReq) map[string]error {
	ctx, cancel := context.WithTimeout(ctx, demandWait)
	defer cancel()
	catchUp := time.NewTimer(catchUpWait)
	defer catchUp.Stop()
	caughtUp := false // catchUpWait is over: a cursor ahead waits no more
	var refused map[string]error
	wanted := make(map[string]bool)
	f.mu.Lock()
	for _, r := range reqs {
		f.waiting[r.Name]++
	}
	f.unlock()
	defer func() {
		f.mu.Lock()
		defer f.unlock()
		for _, r := range reqs {
			if f.waiting[r.Name]--; f.waiting[r.Name] <= 0 {
				delete(f.waiting, r.Name)
			}
		}
	}()
	// With a confirmer, a snapshot (no cursor) or a cursor ahead of ns's
	// reads the upstream once: then ns is complete up to the upstream's
	// head as soon as it holds the revision read there.
	type point struct{ head, rev int64 }
	read := make(map[string]*point)
	asked := make(map[string]bool)
	for {
		f.mu.Lock()
		var missing, ask []string
		waiting := false
		now := f.now()
		for _, r := range reqs {
			if refused[r.Name] != nil {
				continue
			}
			n := f.nss[r.Name]
			if n != nil {
				n.demanded = now
			}
			switch {
			case n == nil || n.leaving:
				// Not followed, or being dropped: the relay follows it
				// (again), or refuses it for now. Wanted once and gone
				// since (dropped as absent upstream): asked again, which
				// the relay refuses.
				if !wanted[r.Name] || n == nil {
					missing = append(missing, r.Name)
				}
				waiting = true
			case !n.ready && n.absent:
				// The upstream has none: answered now, as it would.
			case !n.ready:
				waiting = true
			case caughtUp:
			case f.confirmer != nil && (r.Since < 0 || r.Since > n.cursor):
				p := read[r.Name]
				switch {
				case p == nil && !asked[r.Name]:
					asked[r.Name] = true
					ask = append(ask, r.Name)
					waiting = true
				case p == nil:
					waiting = r.Since > n.cursor // the read failed: as without
				case n.rev < p.rev:
					waiting = true // the watch brings the change
				case n.rev == p.rev && n.cursor < p.head:
					f.confirmLocked(n, p.head, 0, false)
				}
				waiting = waiting || r.Since > n.cursor
			case r.Since > n.cursor:
				waiting = true
			}
		}
		changed := f.changed
		confirmer := f.confirmer
		f.unlock()
		for _, ns := range ask {
			if head, rev, err := confirmer(ctx, ns); err == nil {
				read[ns] = &point{head, rev}
			}
		}
		if len(ask) > 0 {
			continue
		}
		for _, ns := range missing {
			wanted[ns] = true
			if err := f.want(ns); err != nil {
				if refused == nil {
					refused = make(map[string]error)
				}
				refused[ns] = err
			}
		}
		if len(missing) > 0 {
			continue // the refusals, or the namespaces now followed
		}
		if !waiting {
			f.fill(ctx, reqs)
			return refused
		}
		select {
		case <-changed:
		case <-catchUp.C:
			caughtUp = true
		case <-ctx.Done():
			return refused // the handler answers with what there is: 503, cursor_ahead
		}
	}
}

// Follow registers ns as followed (no data yet), so that it counts
// against limits and a Drop can end it.
func (f *follower) Follow(ns string) {
	f.mu.Lock()
	defer f.unlock()
	n := f.get(ns)
	n.demanded = f.now()
}

// Followed returns the namespaces followed.
func (f *follower) Followed() []string {
	f.mu.Lock()
	defer f.unlock()
	return slices.Sorted(maps.Keys(f.nss))
}

var _ dataplane.Follower = (*follower)(nil)

// Data returns what the follower serves of ns: its store id, revision,
// cursor and content (shared: do not modify); ok false when it has none.
func (f *follower) Data(ns string) (storeID string, rev, cursor int64, values map[string]json.RawMessage, ok bool) {
	f.mu.Lock()
	defer f.unlock()
	n := f.nss[ns]
	if n == nil || !n.ready {
		return "", 0, 0, nil, false
	}
	return f.id, n.rev, n.cursor, n.live, true
}

// serve hands the follower's changes to s, the data plane that reads it;
// call it before serving.
func (f *follower) serve(s *dataplane.Server) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.out = func(items []dataplane.HubItem) { s.Enqueue(items...) }
}
