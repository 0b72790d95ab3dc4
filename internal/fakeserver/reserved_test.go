package fakeserver

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/holdfast-dev/holdfast/config"
	"github.com/holdfast-dev/holdfast/internal/rollout"
	"github.com/holdfast-dev/holdfast/internal/testutil"
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

// asClient returns the request headers of a client with caps ("" : none).
func asClient(caps string, hdr ...string) []string {
	if caps == "" {
		return hdr
	}
	return append([]string{transport.HeaderCapabilities, caps}, hdr...)
}

func TestRolloutAwareReadsTheCapabilityToken(t *testing.T) {
	for _, tc := range []struct {
		values []string
		want   bool
	}{
		{nil, false},
		{[]string{""}, false},
		{[]string{oldCaps}, false},
		{[]string{newCaps}, true},
		{[]string{"rollout"}, true},
		{[]string{" stream , rollout "}, true},
		{[]string{"stream", "rollout"}, true}, // the header given twice
		{[]string{"rollouts,x-rollout,rollout-v2,Rollout"}, false},
		{[]string{"stream,,"}, false},
	} {
		r, _ := http.NewRequest(http.MethodGet, "/", nil)
		for _, v := range tc.values {
			r.Header.Add(transport.HeaderCapabilities, v)
		}
		if got := rolloutAware(r); got != tc.want {
			t.Errorf("%q: aware %v, want %v", tc.values, got, tc.want)
		}
	}
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
	full, base := transport.ETag(id, rev), baseETag(id, rev)
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
		// An SDK client names the revision it holds with transport.ETag:
		// an old one holds only the base of it.
		{"old client, its revision", "", full, 304, base},
		{"old client, the base's tag (an HTTP cache's)", oldCaps, base, 304, base},
		{"old client, an older revision", "", transport.ETag(id, rev-1), 200, base},
		{"new client, its revision", newCaps, full, 304, full},
		// What it holds is the base: it needs the reserved key.
		{"new client, the base's tag", newCaps, base, 200, full},
		{"new client, an older revision", newCaps, transport.ETag(id, rev-1), 200, full},
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
		want := transport.ETag(id, rev)
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
		if resp.StatusCode != 200 || resp.Header.Get("ETag") != transport.ETag(id, rev) || string(values["a"]) != "1" {
			t.Fatalf("plain (%q): %d %s %v", caps, resp.StatusCode, resp.Header.Get("ETag"), values)
		}
		if resp, _, _ := snapshotOf(t, c, s, "plain", caps, transport.ETag(id, rev)); resp.StatusCode != 304 {
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
		checkHistory(t, "stream long-poll "+tc.caps, revs, decode[transport.StreamEventsResponse](t, data).Changes, tc.aware)
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
			changes = decode[transport.StreamEventsResponse](t, r.body).Changes
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
func streamChanges(t *testing.T, st *stream, upto int64) []transport.ChangeSet {
	t.Helper()
	var out []transport.ChangeSet
	for {
		ev := mustNext(t, st)
		if ev.event != transport.EventChange {
			continue
		}
		var cs transport.ChangeSet
		if err := json.Unmarshal([]byte(ev.data), &cs); err != nil {
			t.Fatalf("change %q: %v", ev.data, err)
		}
		if ev.id != strconv.FormatInt(cs.Revision, 10) {
			t.Fatalf("event id %s of change %d", ev.id, cs.Revision)
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
		st    *stream
	}
	var readers []reader
	for _, caps := range []string{"", oldCaps, newCaps} {
		readers = append(readers,
			reader{"watch " + caps, caps == newCaps, openStreamWith(t, c, s.URL()+"/sdk/watch?ns=app&since="+since, "", asClient(caps)...)},
			reader{"stream " + caps, caps == newCaps, openStreamWith(t, c, s.URL()+"/sdk/stream?ns=app:"+since+"&ns=other:0", "", asClient(caps)...)})
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
			st := openStreamWith(t, c, s.URL()+path, "", asClient(caps)...)
			checkHistory(t, path+" "+caps+" (backlog)", revs, streamChanges(t, st, revs[len(revs)-1]), caps == newCaps)
			st.close()
		}
	}
}

// A change that touches no reserved key is its own base view, at the cost
// of one scan of its keys; one that does has one base view for every old
// client, built once.
func TestBaseViewIsSharedAndFreeWithoutReservedKeys(t *testing.T) {
	s := start(t)
	publishReserved(t, s, "app", map[string]json.RawMessage{"a": json.RawMessage(`1`)})
	publishReserved(t, s, "app", map[string]json.RawMessage{"a": json.RawMessage(`2`), rollout.Key: stagedFor(t, "r1")})
	sub, err := s.store.Subscribe("app", 0, nil)
	if err != nil {
		t.Fatal(err)
	}
	plain, staged := sub.Backlog[0], sub.Backlog[1]
	if plain.view(false) != plain || plain.view(true) != plain {
		t.Fatal("a change without reserved keys has a view of its own")
	}
	if staged.view(true) != staged {
		t.Fatal("a new client's view is not the change itself")
	}
	base := staged.view(false)
	if base == staged || staged.view(false) != base {
		t.Fatal("the base view is not one, shared")
	}
	if string(base.json()) == string(staged.json()) || strings.Contains(string(base.frame()), rollout.ReservedPrefix) {
		t.Fatalf("base view %s", base.frame())
	}
	if base.CS.Revision != staged.CS.Revision || base.CS.PrevRevision != staged.CS.PrevRevision || base.Gen != staged.Gen {
		t.Fatalf("base view %+v of %+v", base.CS, staged.CS)
	}
}

// A relay's change carries its upstream's bytes: the base view keeps
// every field but the reserved keys, unknown ones too.
func TestFollowerServesTheBaseOfRawChanges(t *testing.T) {
	f, s := startFollower(t, 100, 0, WithHeartbeat(time.Hour))
	f.Apply("app", "st", 1, 1, raw("a", "1"), nil, 0, false)
	rawCS := `{"ns":"app","revision":2,"prev_revision":1,"store_id":"st","committed_at":"2026-01-01T00:00:00Z",` +
		`"puts":{"a":2,"` + rollout.Key + `":{"id":"r1"}},"deletes":["$holdfast/old","gone"],"future":{"x":[1,2]}}`
	var cs transport.ChangeSet
	if err := json.Unmarshal([]byte(rawCS), &cs); err != nil {
		t.Fatal(err)
	}
	cs.Raw = json.RawMessage(rawCS)
	f.Apply("app", "st", 2, 2, raw("a", "2", rollout.Key, `{"id":"r1"}`), &cs, 0, false)
	c := newClient(t)
	for _, caps := range []string{"", newCaps} {
		resp, data := do(t, c, "GET", s.URL()+"/sdk/events?ns=app&since=1", "", asClient(caps)...)
		if resp.StatusCode != 200 {
			t.Fatalf("%d %s", resp.StatusCode, data)
		}
		var body struct {
			Changes []json.RawMessage `json:"changes"`
		}
		if err := json.Unmarshal(data, &body); err != nil || len(body.Changes) != 1 {
			t.Fatalf("%s: %v", data, err)
		}
		got := string(body.Changes[0])
		if caps == newCaps {
			if got != rawCS {
				t.Fatalf("new client: %s, want the upstream's bytes %s", got, rawCS)
			}
			continue
		}
		want := `{"ns":"app","revision":2,"prev_revision":1,"store_id":"st","committed_at":"2026-01-01T00:00:00Z","future":{"x":[1,2]},"puts":{"a":2},"deletes":["gone"]}`
		if got != want {
			t.Fatalf("old client:\n got %s\nwant %s", got, want)
		}
		_, snap, values := snapshotOf(t, c, s, "app", caps, "")
		if _, ok := values[rollout.Key]; ok || snap.Revision != 2 {
			t.Fatalf("old client's snapshot from the relay: %s", snap.Values)
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

// The SSE reader of stream frames must not be fooled by a multi-line
// frame: a base view's data line is one line, as the change's.
func TestBaseViewFrameIsOneDataLine(t *testing.T) {
	s := start(t)
	publishReserved(t, s, "app", map[string]json.RawMessage{"a": json.RawMessage(`"x\ny"`), rollout.Key: stagedFor(t, "r1")})
	sub, err := s.store.Subscribe("app", 0, nil)
	if err != nil {
		t.Fatal(err)
	}
	base := sub.Backlog[0].view(false)
	sc := bufio.NewScanner(strings.NewReader(string(base.frame())))
	lines := 0
	for sc.Scan() {
		if strings.HasPrefix(sc.Text(), "data: ") {
			lines++
			if sc.Text()[len("data: "):] != string(base.json()) {
				t.Fatalf("data line %q, JSON %s", sc.Text(), base.json())
			}
		}
	}
	if lines != 1 {
		t.Fatalf("%d data lines in %q", lines, base.frame())
	}
}

// Run with: go test -run '^$' -bench 'ChangeView|SnapshotFor' -benchmem ./internal/fakeserver/
//
// What a client that predates rollouts costs: a change's bytes for it
// (its base view) against a new client's, and a 304 or a 200 of a
// namespace of 1,000 keys, with and without a reserved key.

func BenchmarkChangeView(b *testing.B) {
	s := start(b)
	publishReserved(b, s, "app", map[string]json.RawMessage{"a": json.RawMessage(`1`)})
	publishReserved(b, s, "app", map[string]json.RawMessage{"a": json.RawMessage(`2`), rollout.Key: stagedFor(b, "r1")})
	sub, err := s.store.Subscribe("app", 0, nil)
	if err != nil {
		b.Fatal(err)
	}
	for _, tc := range []struct {
		name  string
		c     *Change
		aware bool
	}{{"plain/aware", sub.Backlog[0], true}, {"plain/old", sub.Backlog[0], false}, {"reserved/aware", sub.Backlog[1], true}, {"reserved/old", sub.Backlog[1], false}} {
		b.Run(tc.name, func(b *testing.B) {
			b.ReportAllocs()
			n := 0
			for range b.N {
				n += len(tc.c.view(tc.aware).frame())
			}
			_ = n
		})
	}
	// The first use by an old client of a change with a reserved key:
	// building its base view (once per change, for all of them).
	b.Run("build", func(b *testing.B) {
		c := sub.Backlog[1]
		b.ReportAllocs()
		for range b.N {
			fresh := &Change{Gen: c.Gen, CS: c.CS}
			_ = fresh.view(false).frame()
		}
	})
}

func BenchmarkSnapshotFor(b *testing.B) {
	s := start(b)
	puts := make(map[string]json.RawMessage, 1000)
	for i := range 1000 {
		puts["cluster/c"+strconv.Itoa(i)] = json.RawMessage(`{"replicas":3,"image":"app:1.2.3"}`)
	}
	publishReserved(b, s, "plain", puts)
	puts[rollout.Key] = stagedFor(b, "r1")
	publishReserved(b, s, "staged", puts)
	h := s.routes()
	w := &nopWriter{h: make(http.Header)}
	for _, ns := range []string{"plain", "staged"} {
		rev, _ := s.store.NsRevision(ns)
		for _, caps := range []string{newCaps, oldCaps} {
			for _, inm := range []string{transport.ETag(s.StoreID(), rev), ""} {
				name := ns + "/old"
				if caps == newCaps {
					name = ns + "/aware"
				}
				if inm != "" {
					name += "/304"
				} else {
					name += "/200"
				}
				b.Run(name, func(b *testing.B) {
					req := httptest.NewRequest(http.MethodGet, "/sdk/snapshot?ns="+ns, nil)
					req.Header.Set(transport.HeaderCapabilities, caps)
					if inm != "" {
						req.Header.Set("If-None-Match", inm)
					}
					b.ReportAllocs()
					for range b.N {
						clear(w.h)
						h.ServeHTTP(w, req)
					}
				})
			}
		}
	}
}
