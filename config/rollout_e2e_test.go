package config_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/holdfast-dev/holdfast/config"
	"github.com/holdfast-dev/holdfast/internal/cachedir"
	"github.com/holdfast-dev/holdfast/internal/fakeserver"
	"github.com/holdfast-dev/holdfast/internal/rollout"
	"github.com/holdfast-dev/holdfast/internal/sdksuite"
	"github.com/holdfast-dev/holdfast/internal/testutil"
	"github.com/holdfast-dev/holdfast/internal/testutil/nstest"
	"github.com/holdfast-dev/holdfast/transport"
)

// stageRollout puts rollout s on ns's data at srv, and is the one place
// these tests do so, with a cut of their choosing (the server's controller
// picks cuts from the clients it knows; see internal/rollout's proof): s nil
// ends the rollout, dropping the key; base, when set, is published into
// the base in the same revision (a promotion: the staged change becomes
// the base as the key goes). It returns the revision.
func stageRollout(t testing.TB, srv *fakeserver.Server, ns string, s *rollout.Staged, base map[string]json.RawMessage) int64 {
	t.Helper()
	rev, err := srv.PublishStaged(ns, s, base)
	if err != nil {
		t.Fatal(err)
	}
	return rev
}

// ackRecorder is the HTTP source with every report the client sends
// recorded on its way to the server (which may refuse a kind it does not
// know: the record is what the client said).
type ackRecorder struct {
	*transport.HTTPSource
	mu   sync.Mutex
	acks []transport.Ack
}

func (r *ackRecorder) Ack(ctx context.Context, a transport.Ack) error {
	r.record(a)
	return r.HTTPSource.Ack(ctx, a)
}

func (r *ackRecorder) AckBatch(ctx context.Context, acks []transport.Ack) error {
	r.record(acks...)
	return r.HTTPSource.AckBatch(ctx, acks)
}

func (r *ackRecorder) record(acks ...transport.Ack) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.acks = append(r.acks, acks...)
}

// find returns the first report of revision with status, waiting for it.
func (r *ackRecorder) find(t *testing.T, revision int64, status string) transport.Ack {
	t.Helper()
	var found transport.Ack
	testutil.Eventually(t, waitLimit, func() bool {
		r.mu.Lock()
		defer r.mu.Unlock()
		i := slices.IndexFunc(r.acks, func(a transport.Ack) bool { return a.Revision == revision && a.Status == status })
		if i >= 0 {
			found = r.acks[i]
		}
		return i >= 0
	}, "a "+status+" of the revision")
	return found
}

// none fails if the client reported revision with status.
func (r *ackRecorder) none(t *testing.T, revision int64, status string) {
	t.Helper()
	r.mu.Lock()
	defer r.mu.Unlock()
	if i := slices.IndexFunc(r.acks, func(a transport.Ack) bool { return a.Revision == revision && a.Status == status }); i >= 0 {
		t.Errorf("reported %+v", r.acks[i])
	}
}

// rolloutClient is a client of srv with client id id, its reports
// recorded.
func rolloutClient(t *testing.T, srv *fakeserver.Server, id string, opts ...config.Option) (*config.Client, *ackRecorder) {
	t.Helper()
	hs, err := transport.NewHTTPSource(srv.URL(), transport.WithWatchMode(transport.WatchSSE), transport.WithIdleTimeout(relaxedIdle))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = hs.Close() }) // after the client's Close (cleanups run last first)
	rec := &ackRecorder{HTTPSource: hs}
	base := []config.Option{config.WithSource(rec), config.WithClientID(id), config.WithLogger(sdksuite.Logger(t)),
		config.WithReconnectBackoff(5*time.Millisecond, 50*time.Millisecond)}
	c, err := config.New(append(base, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c, rec
}

// changeLog keeps every ChangeSet a namespace delivers.
type changeLog struct {
	mu   sync.Mutex
	sets []config.ChangeSet
}

func logChanges(ns *config.Namespace) *changeLog {
	l := &changeLog{}
	ns.OnAnyChange(func(cs config.ChangeSet) {
		l.mu.Lock()
		defer l.mu.Unlock()
		l.sets = append(l.sets, cs)
	})
	return l
}

// at waits for the change set of revision rev and returns it as
// "key:old>new" items, sorted; it fails if an earlier revision after
// since came in between (a callback for a revision that changes nothing
// served).
func (l *changeLog) at(t *testing.T, since, rev int64) string {
	t.Helper()
	var got config.ChangeSet
	testutil.Eventually(t, waitLimit, func() bool {
		l.mu.Lock()
		defer l.mu.Unlock()
		for _, cs := range l.sets {
			if cs.Revision > since && cs.Revision < rev {
				t.Fatalf("a change set at revision %d, between %d and %d: %+v", cs.Revision, since, rev, cs)
			}
			if cs.Revision == rev {
				got = cs
				return true
			}
		}
		return false
	}, "the change set of the revision")
	var items []string
	for _, ch := range got.Changes {
		items = append(items, ch.Key+":"+raw(ch.Old)+">"+raw(ch.New))
	}
	return strings.Join(items, " ")
}

func raw(v config.Value) string {
	if v.Kind() == config.KindInvalid {
		return "-"
	}
	return string(v.Raw())
}

// split orders two client ids by their place in rollout id: a cut at
// the first's hash takes it and leaves the second out.
func split(id, a, b string) (in, out string) {
	if rollout.Hash(id, a) > rollout.Hash(id, b) {
		return b, a
	}
	return a, b
}

var stagedChange = map[string]json.RawMessage{"a": json.RawMessage(`"2"`), "new": json.RawMessage(`"n"`)}

// serves describes what ns serves: its keys and values, sorted.
func serves(ns *config.Namespace) string {
	snap := ns.Snapshot()
	keys := snap.Keys()
	slices.Sort(keys)
	var items []string
	for _, k := range keys {
		v, _ := snap.Get(k)
		items = append(items, k+"="+string(v.Raw()))
	}
	return strings.Join(items, " ")
}

// TestRolloutStagesFlipRevertPromote: a member serves the staged change,
// a non-member the base, neither the key; a stage that takes the other in
// is a change for it alone; the revert takes the members back; a
// promotion is a change for the non-members alone. Each is an ordinary
// revision: OnChange with the diff of what is served, no callback where
// nothing served changes, Status shows the rollout, acks name it for the
// members.
func TestRolloutStagesFlipRevertPromote(t *testing.T) {
	srv := sdksuite.StartReference(t)
	base := sdksuite.Publish(t, srv, "app", map[string]any{"a": "1", "b": "x"})
	in, out := split("r1", "client-a", "client-b")
	cm, am := rolloutClient(t, srv, in)
	cn, an := rolloutClient(t, srv, out)
	m, n := sdksuite.Open(t, cm, "app"), sdksuite.Open(t, cn, "app")
	lm, ln := logChanges(m), logChanges(n)

	// Stage 1: the member alone.
	r1 := stageRollout(t, srv, "app", &rollout.Staged{ID: "r1", Stage: 1, Cut: rollout.Hash("r1", in), Puts: stagedChange, Deletes: []string{"b"}}, nil)
	nstest.WaitRevision(t, m, r1, waitLimit)
	nstest.WaitRevision(t, n, r1, waitLimit)
	if got := serves(m); got != `a="2" new="n"` {
		t.Errorf("member serves %s", got)
	}
	if got := serves(n); got != `a="1" b="x"` {
		t.Errorf("non-member serves %s", got)
	}
	if got := lm.at(t, base, r1); got != `a:"1">"2" b:"x">- new:->"n"` {
		t.Errorf("member's change at stage 1: %s", got)
	}
	if st := m.Status().Rollout; st != (config.RolloutStatus{ID: "r1", Stage: 1, Staged: true}) {
		t.Errorf("member's Status.Rollout %+v", st)
	}
	if st := n.Status(); st.Rollout != (config.RolloutStatus{ID: "r1", Stage: 1}) || !strings.Contains(st.String(), `rollout "r1" at 1%, serving the base`) {
		t.Errorf("non-member's Status %s", st)
	}
	if a := am.find(t, r1, transport.AckApplied); a.Rollout != "r1" {
		t.Errorf("member's ack %+v: want rollout r1", a)
	}
	if a := an.find(t, r1, transport.AckApplied); a.Rollout != "" {
		t.Errorf("non-member's ack %+v: want no rollout", a)
	}

	// Stage 100: the other joins; for the member nothing served changes.
	r2 := stageRollout(t, srv, "app", &rollout.Staged{ID: "r1", Stage: 100, Cut: math.MaxUint64, Puts: stagedChange, Deletes: []string{"b"}}, nil)
	nstest.WaitRevision(t, m, r2, waitLimit)
	if got := ln.at(t, base, r2); got != `a:"1">"2" b:"x">- new:->"n"` {
		t.Errorf("non-member's change when its stage came: %s", got)
	}
	if !n.Status().Rollout.Staged {
		t.Errorf("Status.Rollout after joining: %+v", n.Status().Rollout)
	}

	// The revert: both back to the base.
	r3 := stageRollout(t, srv, "app", nil, nil)
	if got := lm.at(t, r1, r3); got != `a:"2">"1" b:->"x" new:"n">-` {
		t.Errorf("member's change at the revert: %s", got)
	}
	if got := ln.at(t, r2, r3); got != `a:"2">"1" b:->"x" new:"n">-` {
		t.Errorf("the other's change at the revert: %s", got)
	}
	if serves(m) != `a="1" b="x"` || m.Status().Rollout != (config.RolloutStatus{}) {
		t.Errorf("after the revert: serves %s, rollout %+v", serves(m), m.Status().Rollout)
	}
	if a := am.find(t, r3, transport.AckApplied); a.Rollout != "" {
		t.Errorf("ack of the revert %+v: no rollout runs", a)
	}

	// A second rollout, promoted from its first stage: the change becomes
	// the base, which changes nothing for the member.
	id2 := sameOrder(t, in, out)
	r4 := stageRollout(t, srv, "app", &rollout.Staged{ID: id2, Stage: 1, Cut: rollout.Hash(id2, in), Puts: stagedChange}, nil)
	if got := lm.at(t, r3, r4); got != `a:"1">"2" new:->"n"` {
		t.Errorf("member's change at the second rollout: %s", got)
	}
	r5 := stageRollout(t, srv, "app", nil, stagedChange)
	if got := ln.at(t, r3, r5); got != `a:"1">"2" new:->"n"` {
		t.Errorf("non-member's change at the promotion: %s", got)
	}
	if serves(m) != serves(n) || serves(n) != `a="2" b="x" new="n"` || n.Status().Rollout != (config.RolloutStatus{}) {
		t.Errorf("after the promotion: member %s, non-member %s", serves(m), serves(n))
	}
	// A later publish reaches the member's callbacks with nothing of the
	// promotion's before it.
	r6 := sdksuite.Publish(t, srv, "app", map[string]any{"c": "3"})
	if got := lm.at(t, r4, r6); got != `c:->"3"` {
		t.Errorf("member's change after the promotion: %s", got)
	}
}

// sameOrder returns a rollout id in which in comes before out, as in r1.
func sameOrder(t *testing.T, in, out string) string {
	for _, id := range []string{"r2", "r3", "r4", "r5", "r6", "r7", "r8", "r9"} {
		if rollout.Hash(id, in) < rollout.Hash(id, out) {
			return id
		}
	}
	t.Fatal("no id orders the clients so")
	return ""
}

const strictSchema2 = `{"type":"object","additionalProperties":{"type":"string","not":{"pattern":"new-field"}}}`

// TestRolloutMemberNacksStagedChange: a member whose checks reject the
// staged change nacks the revision, naming the rollout, and keeps serving
// the base; the revert needs no change of it.
func TestRolloutMemberNacksStagedChange(t *testing.T) {
	srv := sdksuite.StartReference(t)
	sdksuite.Publish(t, srv, "app", map[string]any{"a": "1"})
	c, rec := rolloutClient(t, srv, "strict-1")
	ns := sdksuite.Open(t, c, "app", config.Schema([]byte(strictSchema2)))
	rejected := make(chan *config.RejectedError, 10)
	ns.OnReject(func(e *config.RejectedError) { rejected <- e })
	log := logChanges(ns)

	r1 := stageRollout(t, srv, "app", &rollout.Staged{ID: "r1", Stage: 100, Cut: math.MaxUint64,
		Puts: map[string]json.RawMessage{"a": json.RawMessage(`"new-field"`)}}, nil)
	nack := rec.find(t, r1, transport.AckRejected)
	if nack.Rollout != "r1" || nack.Error == "" {
		t.Errorf("nack %+v: want rollout r1 and the error", nack)
	}
	select {
	case e := <-rejected:
		if e.Revision != r1 {
			t.Errorf("rejected %d, want %d", e.Revision, r1)
		}
	case <-time.After(waitLimit):
		t.Fatal("no OnReject")
	}
	testutil.Eventually(t, waitLimit, func() bool {
		cs := slices.IndexFunc(srv.Clients(), func(cs fakeserver.ClientState) bool { return cs.ClientID == "strict-1" && cs.NackedRevision == r1 })
		return cs >= 0
	}, "the server to hold the nack")
	if got := serves(ns); got != `a="1"` || ns.Status().Rollout != (config.RolloutStatus{}) {
		t.Errorf("serves %s, rollout %+v; want the base", got, ns.Status().Rollout)
	}
	r2 := stageRollout(t, srv, "app", nil, nil)
	nstest.WaitRevision(t, ns, r2, waitLimit)
	if got := serves(ns); got != `a="1"` {
		t.Errorf("after the revert: %s", got)
	}
	if a := rec.find(t, r2, transport.AckApplied); a.Rollout != "" {
		t.Errorf("ack of the revert %+v", a)
	}
	// Nothing served changed until a later publish: its change set is the
	// first.
	r3 := sdksuite.Publish(t, srv, "app", map[string]any{"c": "3"})
	if got := log.at(t, 0, r3); got != `c:->"3"` {
		t.Errorf("change at %d: %s", r3, got)
	}
}

// TestRolloutPrevalidation: with prevalidation, a client outside the
// stage whose checks reject the staged change reports a would-nack and
// serves the base; without it, it reports nothing of the kind.
func TestRolloutPrevalidation(t *testing.T) {
	srv := sdksuite.StartReference(t)
	sdksuite.Publish(t, srv, "app", map[string]any{"a": "1"})
	const id = "strict-out"
	if rollout.Hash("r1", id) == 0 || rollout.Hash("r2", id) == 0 {
		t.Fatal("the id's hash is 0: in a stage with cut 0")
	}
	c, rec := rolloutClient(t, srv, id)
	ns := sdksuite.Open(t, c, "app", config.Schema([]byte(strictSchema2)))
	bad := map[string]json.RawMessage{"a": json.RawMessage(`"new-field"`)}

	r1 := stageRollout(t, srv, "app", &rollout.Staged{ID: "r1", Stage: 1, Cut: 0, Puts: bad}, nil)
	nstest.WaitRevision(t, ns, r1, waitLimit)
	r2 := stageRollout(t, srv, "app", &rollout.Staged{ID: "r2", Stage: 1, Cut: 0, Puts: bad, Prevalidate: true}, nil)
	w := rec.find(t, r2, transport.AckWouldReject)
	if w.Rollout != "r2" || w.Error == "" || w.ClientID != id || w.Namespace != "app" {
		t.Errorf("would-nack %+v", w)
	}
	nstest.WaitRevision(t, ns, r2, waitLimit)
	if got := serves(ns); got != `a="1"` {
		t.Errorf("serves %s; want the base", got)
	}
	if a := rec.find(t, r2, transport.AckApplied); a.Rollout != "" {
		t.Errorf("ack of the base %+v: not a member", a)
	}
	rec.none(t, r1, transport.AckWouldReject)
	rec.none(t, r2, transport.AckRejected)
	if ns.Rejected() != 0 || ns.Status().LastError.Kind != config.ErrorNone {
		t.Errorf("a would-reject counted as a rejection: %d, %v", ns.Rejected(), ns.Status().LastError)
	}
}

// TestRolloutRestartMidStage: the last-good file keeps the content as it
// came, the rollout key and all; a client restarted from it with an id
// outside the stage serves the base at once, from disk, and with the
// network converges (a later stage that takes it in serves it the
// change); one restarted with a member's id serves the staged change.
func TestRolloutRestartMidStage(t *testing.T) {
	srv := sdksuite.StartReference(t)
	sdksuite.Publish(t, srv, "app", map[string]any{"a": "1", "b": "x"})
	in, out := split("r1", "client-a", "client-b")
	dir := t.TempDir()
	a, _ := rolloutClient(t, srv, in, config.WithCacheDir(dir))
	r1 := stageRollout(t, srv, "app", &rollout.Staged{ID: "r1", Stage: 10, Cut: rollout.Hash("r1", in), Puts: stagedChange}, nil)
	nsA := sdksuite.Open(t, a, "app")
	nstest.WaitRevision(t, nsA, r1, waitLimit)
	if got := serves(nsA); got != `a="2" b="x" new="n"` {
		t.Fatalf("member serves %s", got)
	}
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	cd, err := cachedir.OpenDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	rec, err := cd.Load("app")
	if err != nil {
		t.Fatal(err)
	}
	if v, ok := rec.Snapshot.Get(rollout.Key); !ok || rec.Revision != r1 {
		t.Fatalf("the file holds revision %d, keys %v; want the wire content of %d", rec.Revision, rec.Snapshot.Keys(), r1)
	} else if _, err := rollout.Decode(v.Raw()); err != nil {
		t.Fatalf("the file's rollout: %v", err)
	}
	if got, _ := rec.Snapshot.Get("a"); string(got.Raw()) != `"1"` {
		t.Fatalf("the file holds a=%s: the served view, not the wire", got.Raw())
	}

	if err := srv.Stop(); err != nil {
		t.Fatal(err)
	}
	// Restarted with another id, the server down: the base, from disk.
	b, recB := rolloutClient(t, srv, out, config.WithCacheDir(dir))
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	nsB, err := b.Namespace(ctx, "app")
	if err != nil {
		t.Fatalf("open from disk with the server down: %v", err)
	}
	st := nsB.Status()
	if got := serves(nsB); got != `a="1" b="x"` || nsB.Revision() != r1 || st.Origin != config.OriginDisk ||
		st.Rollout != (config.RolloutStatus{ID: "r1", Stage: 10}) {
		t.Errorf("restarted outside the stage: serves %s at %d, %s", got, nsB.Revision(), st)
	}
	// Restarted with the member's id, from the same file: the change.
	cm, recM := rolloutClient(t, srv, in, config.WithCacheDir(dir))
	ctx2, cancel2 := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel2()
	nsM, err := cm.Namespace(ctx2, "app")
	if err != nil {
		t.Fatal(err)
	}
	if got := serves(nsM); got != `a="2" b="x" new="n"` || !nsM.Status().Rollout.Staged {
		t.Errorf("restarted in the stage: serves %s, %+v", got, nsM.Status().Rollout)
	}

	// The network again: B confirms what it serves, then a stage that
	// takes it in serves it the change.
	if err := srv.Restart(); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, waitLimit, func() bool {
		st := nsB.Status()
		return st.State == config.StateFresh && st.Origin == config.OriginNetwork
	}, "B fresh from the network")
	if got := serves(nsB); got != `a="1" b="x"` {
		t.Errorf("B confirmed: serves %s", got)
	}
	// Confirmed from the network, each tells the server what it serves
	// of the file's revision: the member, the staged change.
	if a := recB.find(t, r1, transport.AckApplied); a.Rollout != "" {
		t.Errorf("B's ack of the file's revision %+v: not a member", a)
	}
	if a := recM.find(t, r1, transport.AckApplied); a.Rollout != "r1" {
		t.Errorf("the member's ack of the file's revision %+v", a)
	}
	r2 := stageRollout(t, srv, "app", &rollout.Staged{ID: "r1", Stage: 100, Cut: math.MaxUint64, Puts: stagedChange}, nil)
	nstest.WaitRevision(t, nsB, r2, waitLimit)
	if got := serves(nsB); got != `a="2" b="x" new="n"` || !nsB.Status().Rollout.Staged {
		t.Errorf("B in the stage: serves %s, %+v", got, nsB.Status().Rollout)
	}
}

// TestRolloutMalformedFromTheNetwork: a revision whose rollout value does
// not decode is rejected whole; the last good keeps serving.
func TestRolloutMalformedFromTheNetwork(t *testing.T) {
	src := &scripted{}
	c := sdksuite.NewClient(t, sdksuite.Source(src), config.WithClientID("c1"))
	ns := sdksuite.Open(t, c, "app")
	if got := serves(ns); got != `a="1"` {
		t.Fatalf("serves %s", got)
	}
	rejected := make(chan *config.RejectedError, 1)
	ns.OnReject(func(e *config.RejectedError) { rejected <- e })
	src.events <- transport.Event{Change: &transport.ChangeSet{Namespace: "app", StoreID: "s", Revision: 2, PrevRevision: 1,
		Puts: map[string]json.RawMessage{rollout.Key: json.RawMessage(`{"id":"r1"}`)}}}
	select {
	case e := <-rejected:
		if e.Revision != 2 || !errors.Is(e, rollout.ErrMalformed) {
			t.Errorf("rejected %d: %v", e.Revision, e)
		}
	case <-time.After(waitLimit):
		t.Fatal("the malformed rollout was not rejected")
	}
	if got := serves(ns); got != `a="1"` || ns.Revision() != 1 {
		t.Errorf("after the rejection: serves %s at %d", got, ns.Revision())
	}
}

// scripted serves {"a":"1"} at revision 1 of store "s" and, to one
// watch at a time, the events sent on events.
type scripted struct {
	once   sync.Once
	events chan transport.Event
}

func (s *scripted) init() { s.once.Do(func() { s.events = make(chan transport.Event, 10) }) }

func (s *scripted) Snapshot(_ context.Context, req transport.SnapshotRequest) (*transport.Snapshot, error) {
	s.init()
	return &transport.Snapshot{Namespace: req.Namespace, StoreID: "s", Revision: 1, Cursor: 1, Values: []byte(`{"a":"1"}`)}, nil
}

func (s *scripted) Watch(ctx context.Context, _ transport.WatchRequest, fn func(transport.Event) error) error {
	s.init()
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case ev := <-s.events:
			if err := fn(ev); err != nil {
				return err
			}
		}
	}
}

// count returns how many reports the client sent.
func (r *ackRecorder) count() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.acks)
}

// TestRolloutReportsOncePerConnection: while a rollout runs, a client of
// a server that keeps reports (transport.CapabilityReportsKept) reports
// once per change and once per connection, never at its progress events;
// one of a server without (an older one) reports again at every progress
// event, at most once a second.
func TestRolloutReportsOncePerConnection(t *testing.T) {
	for _, kept := range []bool{true, false} {
		t.Run(fmt.Sprintf("kept=%t", kept), func(t *testing.T) {
			var opts []fakeserver.Option
			if !kept {
				opts = append(opts, fakeserver.WithoutCapability(transport.CapabilityReportsKept))
			}
			srv := sdksuite.StartReference(t, opts...)
			sdksuite.Publish(t, srv, "app", map[string]any{"a": "1"})
			c, rec := rolloutClient(t, srv, "client-a")
			ns := sdksuite.Open(t, c, "app")
			rev := stageRollout(t, srv, "app", &rollout.Staged{ID: "r1", Stage: 100, Cut: math.MaxUint64, Puts: stagedChange}, nil)
			nstest.WaitRevision(t, ns, rev, waitLimit)
			rec.find(t, rev, transport.AckApplied)
			// Three seconds of progress events (a heartbeat each), once
			// the stage's report went.
			waitConfirmedAfter := func(d time.Duration) {
				t.Helper()
				since := time.Now()
				testutil.Eventually(t, waitLimit, func() bool { return ns.Status().LastConfirmed.After(since.Add(d)) },
					"progress events for "+d.String())
			}
			waitConfirmedAfter(500 * time.Millisecond) // the ack's window passed
			n := rec.count()
			if !kept {
				testutil.Eventually(t, waitLimit, func() bool { return rec.count() >= n+2 }, "the client reports again at its progress events")
				return
			}
			waitConfirmedAfter(3 * time.Second)
			if got := rec.count(); got != n {
				t.Fatalf("%d reports in 3 s of progress events, want none: %+v", got-n, rec.acks[n:])
			}
			// A new connection: the server it now talks to may not have
			// heard it; it reports once.
			srv.DropStreams()
			testutil.Eventually(t, waitLimit, func() bool { return rec.count() > n }, "the client reports on its new connection")
			waitConfirmedAfter(2 * time.Second)
			rec.mu.Lock()
			defer rec.mu.Unlock()
			if again := rec.acks[n:]; len(again) != 1 || again[0].Revision != rev || again[0].Status != transport.AckApplied || again[0].Rollout != "r1" {
				t.Fatalf("reports after the reconnection: %+v, want one ack of revision %d naming r1", again, rev)
			}
		})
	}
}
