package controller

import (
	"time"

	"github.com/holdfast-dev/holdfast/transport"
)

// Report is what one client last reported on a namespace, merged over the
// servers that heard it: the soft state a controller counts.
type Report struct {
	ClientID string `json:"c"`
	// Acked is the highest revision it applied; Nacked the highest it
	// rejected, with its error.
	Acked     int64  `json:"a,omitempty"`
	Nacked    int64  `json:"n,omitempty"`
	NackError string `json:"ne,omitempty"`
	// Rollout is the rollout its reports named (the latest); Served the
	// highest revision it applied naming it, NackedRollout whether its
	// nack named it, Would the revision of its would-nack of it.
	Rollout       string `json:"r,omitempty"`
	Served        int64  `json:"s,omitempty"`
	NackedRollout bool   `json:"nr,omitempty"`
	Would         int64  `json:"w,omitempty"`
	WouldError    string `json:"we,omitempty"`
	// Seen is when it was last heard from.
	Seen time.Time `json:"t"`
	// SDKVersion is the client's SDK version, as its last report that
	// said one did (transport.Ack.SDKVersion).
	SDKVersion string `json:"v,omitempty"`
	// Identity is the token its reports came under (transport.Ack.Identity,
	// the latest that named one): a rollout counts the nacks of one
	// identity once. Empty on a server without tokens, and for the
	// clients behind a relay: each client id then counts.
	Identity string `json:"i,omitempty"`
}

// Observe folds one ack, heard at now, into r (a server's table of what
// its clients reported; the reference server's). ack's client is r's.
func (r *Report) Observe(ack *transport.Ack, now time.Time, maxErr int) {
	r.Seen = now
	if ack.SDKVersion != "" {
		r.SDKVersion = ack.SDKVersion
	}
	if ack.Identity != "" {
		r.Identity = ack.Identity
	}
	if ack.Rollout != "" && ack.Rollout != r.Rollout {
		r.Rollout, r.Served, r.Would, r.NackedRollout, r.WouldError = ack.Rollout, 0, 0, false, ""
	}
	switch ack.Status {
	case transport.AckRejected:
		if ack.Revision >= r.Nacked {
			r.Nacked, r.NackError = ack.Revision, clip(ack.Error, maxErr)
		}
		r.NackedRollout = r.NackedRollout || ack.Rollout != ""
	case transport.AckApplied:
		r.Acked = max(r.Acked, ack.Revision)
		if ack.Rollout != "" {
			r.Served = max(r.Served, ack.Revision)
		}
	case transport.AckWouldReject:
		if ack.Rollout != "" && ack.Revision >= r.Would {
			r.Would, r.WouldError = ack.Revision, clip(ack.Error, maxErr)
		}
	}
}

// Merge folds o (the same client's report through another server) into r.
func (r *Report) Merge(o Report) {
	if o.Acked > r.Acked {
		r.Acked = o.Acked
	}
	if o.Nacked > r.Nacked {
		r.Nacked, r.NackError = o.Nacked, o.NackError
	}
	if o.Rollout != "" && (r.Rollout == "" || o.Seen.After(r.Seen)) && o.Rollout != r.Rollout {
		r.Rollout, r.Served, r.NackedRollout, r.Would, r.WouldError = o.Rollout, o.Served, o.NackedRollout, o.Would, o.WouldError
	} else if o.Rollout == r.Rollout {
		r.Served = max(r.Served, o.Served)
		r.NackedRollout = r.NackedRollout || o.NackedRollout
		if o.Would > r.Would {
			r.Would, r.WouldError = o.Would, o.WouldError
		}
	}
	if o.SDKVersion != "" && (r.SDKVersion == "" || o.Seen.After(r.Seen)) {
		r.SDKVersion = o.SDKVersion // the later report's: a client upgraded
	}
	if o.Identity != "" && (r.Identity == "" || o.Seen.After(r.Seen)) {
		r.Identity = o.Identity
	}
	if o.Seen.After(r.Seen) {
		r.Seen = o.Seen
	}
}

// tally is what a rollout knows of its clients: rebuilt from reports.
type tally struct {
	clients []client         // in the order first observed
	index   map[string]int32 // client id → its place in clients
	// nackList is the distinct nackers: one identity's nacks count once
	// (Report.Identity), whatever client ids they name.
	nackList   []string
	nackIdents map[string]bool
	// reasons groups the nackers by what they rejected and why.
	reasons []NackReason
	acked   int
	nacked  int
	would   int
	served  int
}

type client struct {
	hash                                 uint64
	since, seen                          time.Time
	rev                                  int64 // highest revision of the rollout it reported
	acked, nacked, would, served, nacker bool
}

func newTally(n int) *tally {
	return &tally{clients: make([]client, 0, n), index: make(map[string]int32, n)}
}

// observe counts one client's report into st's tally; of gives a new
// client's hash and since when it is known.
func (t *tally) observe(st *State, r *Report, now time.Time, of func(id string) (uint64, time.Time)) {
	first, end := st.firstRev(), st.endRev()
	inRange := func(rev int64) bool { return first > 0 && rev >= first && (end == 0 || rev <= end) }
	explicit := r.Rollout == st.ID
	var c *client
	if i, ok := t.index[r.ClientID]; ok {
		c = &t.clients[i]
	} else {
		if st.State != Running && !explicit && !inRange(r.Acked) && !inRange(r.Nacked) {
			return
		}
		h, since := of(r.ClientID)
		t.index[r.ClientID] = int32(len(t.clients))
		t.clients = append(t.clients, client{hash: h, since: since})
		c = &t.clients[len(t.clients)-1]
	}
	if r.Seen.After(c.seen) {
		c.seen = r.Seen
	}
	if inRange(r.Acked) {
		c.rev = max(c.rev, r.Acked)
		if !c.acked {
			c.acked = true
			t.acked++
		}
	}
	if explicit && r.Served > 0 && !c.served || st.State == Promoted && r.Acked >= end && end > 0 && !c.served {
		c.served = true
		t.served++
	}
	if r.Nacked > 0 && (inRange(r.Nacked) || explicit && r.NackedRollout) {
		c.rev = max(c.rev, r.Nacked)
		if !c.nacked {
			c.nacked = true
			t.nacked++
		}
		// A nack rejects the change when it names the rollout, or comes
		// from a client in the stage; one outside it without the id
		// rejects the base, which the rollout does not change.
		if explicit && r.NackedRollout || c.hash <= st.cutAt(r.Nacked) {
			t.nack(c, r, "nack", r.Nacked, r.NackError)
		}
	}
	if explicit && r.Would > 0 {
		if !c.would {
			c.would = true
			t.would++
		}
		t.nack(c, r, "would_nack", r.Would, r.WouldError)
	}
}

// nack counts c (r's client) as a nacker, once, and once per identity:
// the holder of one token nacking under many client ids is one nacker.
func (t *tally) nack(c *client, r *Report, what string, rev int64, e string) {
	if c.nacker {
		return
	}
	c.nacker = true
	key := r.ClientID
	if r.Identity != "" {
		if t.nackIdents[r.Identity] {
			return
		}
		if t.nackIdents == nil {
			t.nackIdents = make(map[string]bool)
		}
		t.nackIdents[r.Identity] = true
		key = "identity:" + r.Identity
	}
	t.nackList = append(t.nackList, key)
	t.reasons = addReason(t.reasons, NackReason{What: what, Revision: rev, Error: clip(e, maxReasonErr), Count: 1, Sample: []string{r.ClientID}})
}

// members counts the clients of st's current stage: in it (and live),
// reported its revision, lagging, and gone (silent past window: they do
// not hold it). window 0: every known client is live. A stage gives its
// members its report timeout before any counts as gone: a fleet under
// load reports late, not never (10,000 clients on two shared cores: two
// thirds of a stage's members silent past a 3 s window a few seconds
// into it, every one of them reporting later), and a stage must not
// bake without the members that are merely slow.
func (t *tally) members(st *State, now time.Time, window time.Duration) (in, reported, lagging, gone int) {
	stageRev := st.stageRev()
	graced := now.Sub(st.StageAt) < st.Spec.ReportTimeout
	for i := range t.clients {
		c := &t.clients[i]
		if c.hash > st.Cut {
			continue
		}
		switch {
		case c.rev >= stageRev && stageRev > 0:
			in++
			reported++
		case window > 0 && !graced && now.Sub(later(c.seen, st.StageAt)) >= window:
			gone++
		default:
			in++
			if now.Sub(later(c.since, st.StageAt)) >= st.Spec.ReportTimeout {
				lagging++
			}
		}
	}
	return in, reported, lagging, gone
}

// liveHashes are the hashes of the clients a stage's cut is taken over:
// those live within window (0: every known client), or that reported
// st's stage.
func (t *tally) liveHashes(st *State, now time.Time, window time.Duration) []uint64 {
	out := make([]uint64, 0, len(t.clients))
	for i := range t.clients {
		cl := &t.clients[i]
		if window == 0 || now.Sub(cl.seen) < window || cl.rev >= st.stageRev() {
			out = append(out, cl.hash)
		}
	}
	return out
}

// waiting reports whether c is live and has not reported st's stage's
// revision (a prevalidating stage waits for the clients outside it).
func (t *tally) waiting(st *State, c *client, now time.Time, window time.Duration) bool {
	return c.rev < st.stageRev() && !(window > 0 && now.Sub(later(c.seen, st.StageAt)) >= window)
}

func (t *tally) counts(st *State, now time.Time, window time.Duration) Counts {
	c := Counts{Clients: len(t.clients), Served: t.served, Acked: t.acked, Nacked: t.nacked, WouldNack: t.would}
	c.InStage, c.Reported, c.Lagging, c.Gone = t.members(st, now, window)
	if !st.BakeEnd.IsZero() {
		c.Lagging = 0
	}
	return c
}

func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}
