package fakeserver

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/holdfast-dev/holdfast/config"
	"github.com/holdfast-dev/holdfast/internal/rollout"
	"github.com/holdfast-dev/holdfast/internal/testutil"
	"github.com/holdfast-dev/holdfast/internal/testutil/ssetest"
	"github.com/holdfast-dev/holdfast/internal/wire"
	"github.com/holdfast-dev/holdfast/transport"
)

// publishReserved commits puts and deletes to ns, reserved keys and all,
// through the store's Go publish path, below the checks of a plain publish
// (which refuse reserved keys): the one place these tests put a reserved
// key in content. Values must be compact JSON.
func publishReserved(t testing.TB, s *Server, ns string, puts map[string]json.RawMessage, deletes ...string) int64 {
	t.Helper()
	c, err := s.store.publish(ns, puts, deletes)
	if err != nil {
		t.Fatal(err)
	}
	return c.CS.Revision
}

// stagedFor is a valid value of rollout.Key for rollout id.
func stagedFor(t testing.TB, id string) json.RawMessage {
	t.Helper()
	v, err := rollout.Encode(&rollout.Staged{ID: id, Stage: 10, Cut: 1 << 60, Puts: map[string]json.RawMessage{"a": json.RawMessage(`"staged"`)}})
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// The Holdfast-Capabilities of a client that evaluates rollouts, and of
// one that predates them.
const (
	newCaps = "stream,ack-batch,ack-stream,rollout"
	oldCaps = "stream,ack-batch,ack-stream"
)

// baseETag is the ETag of a snapshot without reserved keys, as
// docs/PROTOCOL.md gives it: "<store_id>.base.<revision>".
func baseETag(storeID string, rev int64) string {
	return `"` + storeID + ".base." + strconv.FormatInt(rev, 10) + `"`
}

// asClient returns the request headers of a client with caps ("" : none).
func asClient(caps string, hdr ...string) []string {
	if caps == "" {
		return hdr
	}
	return append([]string{transport.HeaderCapabilities, caps}, hdr...)
}

// snapshotOf fetches ns's snapshot as a client with caps, conditional on
// inm when it is set.
func snapshotOf(t *testing.T, c *http.Client, s *Server, ns, caps, inm string) (*http.Response, transport.Snapshot, map[string]json.RawMessage) {
	t.Helper()
	var hdr []string
	if inm != "" {
		hdr = []string{"If-None-Match", inm}
	}
	resp, data := do(t, c, "GET", s.URL()+"/sdk/snapshot?ns="+ns, "", asClient(caps, hdr...)...)
	var snap transport.Snapshot
	var values map[string]json.RawMessage
	if resp.StatusCode == http.StatusOK {
		snap = decode[transport.Snapshot](t, data)
		values = decode[map[string]json.RawMessage](t, snap.Values)
	}
	return resp, snap, values
}

func TestSnapshotWithoutReservedKeysForOldClients(t *testing.T) {
	s := start(t)
	c := newClient(t)
	id := s.StoreID()
	if _, err := s.Publish("plain", map[string]any{"a": 1}); err != nil {
		t.Fatal(err)
	}
	publishReserved(t, s, "app", map[string]json.RawMessage{"a": json.RawMessage(`1`)})
	rev := publishReserved(t, s, "app", map[string]json.RawMessage{rollout.Key: stagedFor(t, "r1")})
	full, base := wire.ETag(id, rev), baseETag(id, rev)
	if base == full || !strings.HasSuffix(base, "."+strconv.FormatInt(rev, 10)+`"`) {
		t.Fatalf("base ETag %s: the part after the last . is not the revision %d, or it is the full content's", base, rev)
	}

	for _, caps := range []string{"", oldCaps} {
		resp, snap, values := snapshotOf(t, c, s, "app", caps, "")
		if resp.StatusCode != 200 || snap.Revision != rev {
			t.Fatalf("old client (%q): %d revision %d", caps, resp.StatusCode, snap.Revision)
		}
		if _, ok := values[rollout.Key]; ok || string(values["a"]) != "1" || len(values) != 1 {
			t.Fatalf("old client (%q) got values %s", caps, snap.Values)
		}
		if got := resp.Header.Get("ETag"); got != base {
			t.Fatalf("old client (%q): ETag %s, want %s", caps, got, base)
		}
		if v := resp.Header.Get("Vary"); !strings.Contains(v, transport.HeaderCapabilities) {
			t.Fatalf("Vary %q does not name %s", v, transport.HeaderCapabilities)
		}
	}
	resp, snap, values := snapshotOf(t, c, s, "app", newCaps, "")
	if resp.StatusCode != 200 || string(values[rollout.Key]) != string(stagedFor(t, "r1")) || len(values) != 2 {
		t.Fatalf("new client: %d %s", resp.StatusCode, snap.Values)
	}
	if got := resp.Header.Get("ETag"); got != full {
		t.Fatalf("new client: ETag %s, want %s", got, full)
	}

	for _, tc := range []struct {
		name, caps, inm string
		status          int
		etag            string
	}{
		// An SDK client names the revision it holds with wire.ETag:
		// an old one holds only the base of it.
		{"old client, its revision", "", full, 304, base},
		{"old client, the base's tag (an HTTP cache's)", oldCaps, base, 304, base},
		{"old client, an older revision", "", wire.ETag(id, rev-1), 200, base},
		{"new client, its revision", newCaps, full, 304, full},
		// What it holds is the base: it needs the reserved key.
		{"new client, the base's tag", newCaps, base, 200, full},
		{"new client, an older revision", newCaps, wire.ETag(id, rev-1), 200, full},
	} {
		resp, _, values := snapshotOf(t, c, s, "app", tc.caps, tc.inm)
		if resp.StatusCode != tc.status || resp.Header.Get("ETag") != tc.etag {
			t.Errorf("%s: %d ETag %s, want %d %s", tc.name, resp.StatusCode, resp.Header.Get("ETag"), tc.status, tc.etag)
		}
		if resp.StatusCode == 200 {
			if _, ok := values[rollout.Key]; ok != (tc.caps == newCaps) {
				t.Errorf("%s: values %v", tc.name, slices.Sorted(func(yield func(string) bool) {
					for k := range values {
						yield(k)
					}
				}))
			}
		}
	}

	// The base of each revision, however often asked for: none once the
	// key is gone, a new one when it is back.
	for i, step := range []struct {
		puts    map[string]json.RawMessage
		deletes []string
		base    bool
	}{
		{map[string]json.RawMessage{"b": json.RawMessage(`2`)}, []string{rollout.Key}, false},
		{map[string]json.RawMessage{rollout.Key: stagedFor(t, "r2")}, nil, true},
		{map[string]json.RawMessage{"b": json.RawMessage(`3`)}, nil, true},
		{nil, []string{rollout.Key}, false},
	} {
		rev := publishReserved(t, s, "app", step.puts, step.deletes...)
		want := wire.ETag(id, rev)
		if step.base {
			want = baseETag(id, rev)
		}
		for range 2 {
			resp, snap, values := snapshotOf(t, c, s, "app", "", "")
			if _, has := values[rollout.Key]; resp.Header.Get("ETag") != want || snap.Revision != rev || len(values) != 2 || has {
				t.Fatalf("step %d: old client: %s %d %s, want %s", i, resp.Header.Get("ETag"), snap.Revision, snap.Values, want)
			}
		}
	}

	// Without a reserved key both kinds of client get the same reply.
	for _, caps := range []string{"", newCaps} {
		resp, _, values := snapshotOf(t, c, s, "plain", caps, "")
		rev, _ := s.store.NsRevision("plain")
		if resp.StatusCode != 200 || resp.Header.Get("ETag") != wire.ETag(id, rev) || string(values["a"]) != "1" {
			t.Fatalf("plain (%q): %d %s %v", caps, resp.StatusCode, resp.Header.Get("ETag"), values)
		}
		if resp, _, _ := snapshotOf(t, c, s, "plain", caps, wire.ETag(id, rev)); resp.StatusCode != 304 {
			t.Fatalf("plain (%q): %d to its own revision", caps, resp.StatusCode)
		}
	}
}

// reservedHistory publishes to app: an ordinary change (1), one with a
// reserved key too (2), one of only a reserved key (3), its delete (4),
// an ordinary one (5). It returns their revisions.
func reservedHistory(t *testing.T, s *Server) []int64 {
	t.Helper()
	return []int64{
		publishReserved(t, s, "app", map[string]json.RawMessage{"a": json.RawMessage(`1`)}),
		publishReserved(t, s, "app", map[string]json.RawMessage{"a": json.RawMessage(`2`), rollout.Key: stagedFor(t, "r1")}),
		publishReserved(t, s, "app", map[string]json.RawMessage{rollout.Key: stagedFor(t, "r2")}),
		publishReserved(t, s, "app", nil, rollout.Key),
		publishReserved(t, s, "app", map[string]json.RawMessage{"b": json.RawMessage(`true`)}),
	}
}

// checkHistory checks the changes a client saw of reservedHistory after
// its first revision: the same revisions, each chained to the one before,
// with reserved keys for a new client only (an old one sees revisions 3
// and 4 as empty changes).
func checkHistory(t *testing.T, who string, revs []int64, got []transport.ChangeSet, aware bool) {
	t.Helper()
	if len(got) != len(revs)-1 {
		t.Fatalf("%s: %d changes, want %d: %+v", who, len(got), len(revs)-1, got)
	}
	for i, cs := range got {
		if cs.Revision != revs[i+1] || cs.PrevRevision != revs[i] || cs.Namespace != "app" || cs.StoreID == "" {
			t.Fatalf("%s: change %d is revision %d after %d, want %d after %d", who, i, cs.Revision, cs.PrevRevision, revs[i+1], revs[i])
		}
		reserved := false
		for k := range cs.Puts {
			reserved = reserved || rollout.Reserved(k)
		}
		for _, k := range cs.Deletes {
			reserved = reserved || rollout.Reserved(k)
		}
		if reserved != (aware && i < 3) {
			t.Fatalf("%s: change %d: puts %v deletes %v", who, cs.Revision, cs.Puts, cs.Deletes)
		}
	}
	// What is not reserved is the same for both.
	if string(got[0].Puts["a"]) != "2" || string(got[3].Puts["b"]) != "true" {
		t.Fatalf("%s: %+v", who, got)
	}
	if !aware && (len(got[1].Puts)+len(got[1].Deletes)+len(got[2].Puts)+len(got[2].Deletes) != 0) {
		t.Fatalf("%s: the reserved-only changes are not empty: %+v %+v", who, got[1], got[2])
	}
}

func TestLongPollWithoutReservedKeysForOldClients(t *testing.T) {
	s := start(t)
	c := newClient(t)
	revs := reservedHistory(t, s)
	for _, tc := range []struct {
		caps  string
		aware bool
	}{{"", false}, {oldCaps, false}, {newCaps, true}} {
		resp, data := do(t, c, "GET", s.URL()+"/sdk/events?ns=app&since="+strconv.FormatInt(revs[0], 10), "", asClient(tc.caps)...)
		if resp.StatusCode != 200 {
			t.Fatalf("%d %s", resp.StatusCode, data)
		}
		ev := decode[transport.EventsResponse](t, data)
		if ev.Revision != revs[4] || ev.Cursor != revs[4] {
			t.Fatalf("%q: revision %d cursor %d", tc.caps, ev.Revision, ev.Cursor)
		}
		checkHistory(t, "long-poll "+tc.caps, revs, ev.Changes, tc.aware)

		resp, data = do(t, c, "GET", s.URL()+"/sdk/stream/events?ns=app:"+strconv.FormatInt(revs[0], 10), "", asClient(tc.caps)...)
		if resp.StatusCode != 200 {
			t.Fatalf("%d %s", resp.StatusCode, data)
		}
		checkHistory(t, "stream long-poll "+tc.caps, revs, decode[wire.StreamEventsResponse](t, data).Changes, tc.aware)
	}

	// A poll that waits, woken by a change of only a reserved key: the
	// old client gets it empty, at its revision.
	head := strconv.FormatInt(revs[4], 10)
	waits := map[string]<-chan pollResult{}
	for _, caps := range []string{"", newCaps} {
		for _, path := range []string{"/sdk/events?ns=app&since=" + head + "&wait=10s", "/sdk/stream/events?ns=app:" + head + "&wait=10s"} {
			waits[caps+" "+path] = pollWith(c, s.URL()+path, asClient(caps)...)
		}
	}
	testutil.Eventually(t, waitLimit, func() bool { return s.Watchers("app") == 4 }, "four waiting polls")
	rev := publishReserved(t, s, "app", map[string]json.RawMessage{rollout.Key: stagedFor(t, "r3")})
	for name, ch := range waits {
		r := <-ch
		if r.err != nil || r.status != 200 {
			t.Fatalf("%s: %v %d %s", name, r.err, r.status, r.body)
		}
		var changes []transport.ChangeSet
		if strings.Contains(name, "/sdk/stream/") {
			changes = decode[wire.StreamEventsResponse](t, r.body).Changes
		} else {
			changes = decode[transport.EventsResponse](t, r.body).Changes
		}
		if len(changes) != 1 || changes[0].Revision != rev || changes[0].PrevRevision != revs[4] {
			t.Fatalf("%s: %s", name, r.body)
		}
		_, has := changes[0].Puts[rollout.Key]
		if aware := strings.HasPrefix(name, newCaps); has != aware || (!aware && len(changes[0].Puts) != 0) {
			t.Fatalf("%s: %s", name, r.body)
		}
	}
}

// pollWith is pollAsync with request headers.
// pollResult is one long-poll's outcome.
type pollResult struct {
	status int
	body   []byte
	err    error
}

func pollWith(c *http.Client, url string, hdr ...string) <-chan pollResult {
	ch := make(chan pollResult, 1)
	go func() {
		req, err := http.NewRequest(http.MethodGet, url, nil)
		if err != nil {
			ch <- pollResult{err: err}
			return
		}
		for i := 0; i+1 < len(hdr); i += 2 {
			req.Header.Set(hdr[i], hdr[i+1])
		}
		resp, err := c.Do(req)
		if err != nil {
			ch <- pollResult{err: err}
			return
		}
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		ch <- pollResult{status: resp.StatusCode, body: body, err: err}
	}()
	return ch
}

// streamChanges reads a watch's or a stream's events until it has seen
// change revision upto and returns the changes.
func streamChanges(t *testing.T, st *ssetest.Stream, upto int64) []transport.ChangeSet {
	t.Helper()
	var out []transport.ChangeSet
	for {
		ev := st.MustNext(t)
		if ev.Event != transport.EventChange {
			continue
		}
		var cs transport.ChangeSet
		if err := json.Unmarshal([]byte(ev.Data), &cs); err != nil {
			t.Fatalf("change %q: %v", ev.Data, err)
		}
		if ev.ID != strconv.FormatInt(cs.Revision, 10) {
			t.Fatalf("event id %s of change %d", ev.ID, cs.Revision)
		}
		out = append(out, cs)
		if cs.Revision >= upto {
			return out
		}
	}
}

func TestWatchAndStreamWithoutReservedKeysForOldClients(t *testing.T) {
	s := start(t, WithHeartbeat(time.Hour))
	c := newClient(t)
	publishReserved(t, s, "app", map[string]json.RawMessage{"a": json.RawMessage(`0`)})
	since := strconv.FormatInt(s.Head(), 10)
	type reader struct {
		name  string
		aware bool
		st    *ssetest.Stream
	}
	var readers []reader
	for _, caps := range []string{"", oldCaps, newCaps} {
		readers = append(readers,
			reader{"watch " + caps, caps == newCaps, ssetest.Open(t, c, s.URL()+"/sdk/watch?ns=app&since="+since, "", asClient(caps)...)},
			reader{"stream " + caps, caps == newCaps, ssetest.Open(t, c, s.URL()+"/sdk/stream?ns=app:"+since+"&ns=other:0", "", asClient(caps)...)})
	}
	testutil.Eventually(t, waitLimit, func() bool { return s.OpenStreams() == 6 }, "six streams")
	// Live, then the same history again from each one's backlog.
	revs := reservedHistory(t, s)
	for _, r := range readers {
		got := streamChanges(t, r.st, revs[len(revs)-1])
		if got[0].Revision != revs[0] {
			t.Fatalf("%s: first change %+v", r.name, got[0])
		}
		checkHistory(t, r.name+" (live)", revs, got[1:], r.aware)
	}
	for _, caps := range []string{"", newCaps} {
		since := strconv.FormatInt(revs[0], 10)
		for _, path := range []string{"/sdk/watch?ns=app&since=" + since, "/sdk/stream?ns=app:" + since} {
			st := ssetest.Open(t, c, s.URL()+path, "", asClient(caps)...)
			checkHistory(t, path+" "+caps+" (backlog)", revs, streamChanges(t, st, revs[len(revs)-1]), caps == newCaps)
			st.Close()
		}
	}
}

// The relay's upstream source is the SDK's HTTP source: it lists the
// capability, so that a relay receives and keeps the reserved key.
func TestHTTPSourceReceivesReservedKeys(t *testing.T) {
	s := start(t)
	rev := publishReserved(t, s, "app", map[string]json.RawMessage{"a": json.RawMessage(`1`), rollout.Key: stagedFor(t, "r1")})
	src, err := transport.NewHTTPSource(s.URL())
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	snap, err := src.Snapshot(ctx, transport.SnapshotRequest{Namespace: "app"})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(snap.Values), rollout.Key) {
		t.Fatalf("the HTTP source got %s", snap.Values)
	}
	next := publishReserved(t, s, "app", map[string]json.RawMessage{rollout.Key: stagedFor(t, "r2")})
	err = src.Watch(ctx, transport.WatchRequest{Namespace: "app", Since: rev}, func(ev transport.Event) error {
		if ev.Change == nil {
			return nil
		}
		if ev.Change.Revision != next || string(ev.Change.Puts[rollout.Key]) != string(stagedFor(t, "r2")) ||
			!strings.Contains(string(ev.Change.Raw), rollout.Key) {
			t.Fatalf("the HTTP source got %+v", ev.Change)
		}
		return io.EOF
	})
	if err != io.EOF {
		t.Fatal(err)
	}
}

// dropRollout is the transport of an SDK that predates rollouts: the
// same requests, without the rollout capability.
type dropRollout struct{ base http.RoundTripper }

func (d dropRollout) RoundTrip(r *http.Request) (*http.Response, error) {
	if v := r.Header.Values(transport.HeaderCapabilities); len(v) > 0 {
		r = r.Clone(r.Context())
		var caps []string
		for _, c := range strings.Split(strings.Join(v, ","), ",") {
			if c = strings.TrimSpace(c); c != transport.CapabilityRollout && c != "" {
				caps = append(caps, c)
			}
		}
		r.Header.Set(transport.HeaderCapabilities, strings.Join(caps, ","))
	}
	return d.base.RoundTrip(r)
}

// An SDK client that predates rollouts, with a strict schema of its own
// (no key it does not know), over each watch mode: it never sees the
// reserved key, never nacks, and follows every revision as a change
// (a change of only a reserved key is an empty one, in the chain), never
// resnapshotting.
func TestOldSDKClientKeepsServingTheBase(t *testing.T) {
	for _, tc := range []struct {
		name string
		mode transport.WatchMode
		opts []Option
	}{
		{"stream", transport.WatchSSE, nil},
		{"stream long-poll", transport.WatchLongPoll, nil},
		{"watch", transport.WatchSSE, []Option{WithoutCapability(transport.CapabilityStream)}},
		{"long-poll", transport.WatchLongPoll, []Option{WithoutCapability(transport.CapabilityStream)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			mode := tc.mode
			s := start(t, append([]Option{WithHeartbeat(50 * time.Millisecond)}, tc.opts...)...)
			first := publishReserved(t, s, "app", map[string]json.RawMessage{"a": json.RawMessage(`1`), rollout.Key: stagedFor(t, "r0")})
			tr := &http.Transport{}
			t.Cleanup(tr.CloseIdleConnections)
			cl, err := config.New(config.WithEndpoint(s.URL()), config.WithClientID("old-1"),
				config.WithHTTPClient(&http.Client{Transport: dropRollout{tr}}), config.WithWatchMode(mode),
				config.WithReconnectBackoff(5*time.Millisecond, 50*time.Millisecond))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = cl.Close() })
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			ns, err := cl.Namespace(ctx, "app", config.Schema([]byte(`{"properties":{"a":{},"b":{}},"additionalProperties":false}`)))
			if err != nil {
				t.Fatal(err)
			}
			if got := ns.Status().Revision; got != first {
				t.Fatalf("revision %d, want %d", got, first)
			}
			snapshots := s.Stats().Snapshots
			var last int64
			for i, puts := range []map[string]json.RawMessage{
				{rollout.Key: stagedFor(t, "r1")},
				{"b": json.RawMessage(`2`)},
				{rollout.Key: stagedFor(t, "r2"), "a": json.RawMessage(`3`)},
			} {
				last = publishReserved(t, s, "app", puts)
				testutil.Eventually(t, waitLimit, func() bool { return ns.Status().Revision == last }, "revision "+strconv.FormatInt(last, 10))
				if _, ok := ns.Get(rollout.Key); ok {
					t.Fatalf("step %d: the old client serves %s", i, rollout.Key)
				}
			}
			last = publishReserved(t, s, "app", nil, rollout.Key)
			testutil.Eventually(t, waitLimit, func() bool { return ns.Status().Revision == last }, "the delete's revision")
			if keys := ns.Snapshot().Keys(); !slices.Equal(keys, []string{"a", "b"}) {
				t.Fatalf("keys %v", keys)
			}
			if n := s.Stats().Snapshots - snapshots; n != 0 {
				t.Fatalf("%d snapshots after the first: the chain of revisions broke", n)
			}
			testutil.Eventually(t, waitLimit, func() bool {
				for _, st := range s.Clients() {
					if st.ClientID == "old-1" && st.NackedRevision != 0 {
						t.Fatalf("the old client nacked: %+v", st)
					}
					if st.ClientID == "old-1" && st.AckedRevision == last {
						return true
					}
				}
				return false
			}, "the ack of the last revision")
		})
	}
}
