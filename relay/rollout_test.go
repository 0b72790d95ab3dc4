package relay_test

import (
	"encoding/json"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/holdfast-dev/holdfast/config"
	"github.com/holdfast-dev/holdfast/internal/dataplane"
	"github.com/holdfast-dev/holdfast/internal/rollout"
	"github.com/holdfast-dev/holdfast/internal/testutil"
	"github.com/holdfast-dev/holdfast/internal/watchcache"
	"github.com/holdfast-dev/holdfast/internal/wire"
	"github.com/holdfast-dev/holdfast/transport"
)

// upstreamWithRollout serves, as a relay's upstream, namespace app whose
// content holds the reserved key: a follower store fed by hand, under
// store id "st" (a Go publish of a reserved key is refused).
func upstreamWithRollout(t *testing.T, staged json.RawMessage) (*watchcache.HandFed, string) {
	t.Helper()
	f, s := handFedUpstream(t, 100*time.Millisecond)
	f.Apply("app", "st", 1, 1, map[string]json.RawMessage{"a": json.RawMessage(`1`), rollout.Key: staged}, nil, 0, false)
	return f, "http://" + s.Addr()
}

// handFedUpstream serves a follower store fed by hand, as a relay's
// upstream would, heartbeating every heartbeat.
func handFedUpstream(t *testing.T, heartbeat time.Duration) (*watchcache.HandFed, *dataplane.Server) {
	t.Helper()
	f, s, err := watchcache.NewHandFed(100, heartbeat)
	if err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Listen(l); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return f, s
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

// getAs is a GET of url by a client that lists caps (none when empty).
func getAs(t *testing.T, url, caps string) (*http.Response, []byte) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	if caps != "" {
		req.Header.Set(transport.HeaderCapabilities, caps)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp, body
}

// TestRelayHidesReservedKeysFromOldClients: the relay's upstream source
// (the SDK's HTTP source) lists the rollout capability, so the relay
// receives and keeps the reserved key, and passes it on to clients that
// list it too; a client that predates rollouts gets the base, through
// snapshots and changes, unknown fields of the upstream's change sets
// kept, and its chain of revisions whole.
func TestRelayHidesReservedKeysFromOldClients(t *testing.T) {
	staged, err := rollout.Encode(&rollout.Staged{ID: "r1", Stage: 10, Cut: 1 << 60, Puts: map[string]json.RawMessage{"a": json.RawMessage(`2`)}})
	if err != nil {
		t.Fatal(err)
	}
	up, upURL := upstreamWithRollout(t, staged)
	_, url := startRelay(t, upURL)
	const newCaps = "stream,ack-batch,rollout"

	// Snapshots.
	resp, body := getAs(t, url+transport.PathSnapshot+"?ns=app", newCaps)
	if resp.StatusCode != 200 || !strings.Contains(string(body), rollout.Key) {
		t.Fatalf("a new client's snapshot through the relay: %d %s", resp.StatusCode, body)
	}
	if tag := resp.Header.Get("ETag"); tag != wire.ETag("st", 1) {
		t.Fatalf("a new client's ETag %s", tag)
	}
	resp, body = getAs(t, url+transport.PathSnapshot+"?ns=app", "")
	if resp.StatusCode != 200 || strings.Contains(string(body), rollout.ReservedPrefix) || !strings.Contains(string(body), `"a":1`) {
		t.Fatalf("an old client's snapshot through the relay: %d %s", resp.StatusCode, body)
	}
	if tag := resp.Header.Get("ETag"); tag == wire.ETag("st", 1) {
		t.Fatalf("an old client's ETag %s: the same as the full content's", tag)
	}

	// An SDK client that predates rollouts, with a strict schema.
	tr := &http.Transport{}
	t.Cleanup(tr.CloseIdleConnections)
	old := newClient(t, url, config.WithHTTPClient(&http.Client{Transport: dropRollout{tr}}))
	ns := openNamespace(t, old, "app", config.Schema([]byte(`{"properties":{"a":{},"b":{}},"additionalProperties":false}`)))
	if _, ok := ns.Get(rollout.Key); ok || ns.Status().Revision != 1 || valueOf(ns, "a") != "1" {
		t.Fatalf("the old client: %v", ns.Status())
	}

	// A change of only the reserved key, with a field this version does
	// not know.
	next, err := rollout.Encode(&rollout.Staged{ID: "r1", Stage: 100, Cut: 1<<64 - 1, Puts: map[string]json.RawMessage{"a": json.RawMessage(`2`)}})
	if err != nil {
		t.Fatal(err)
	}
	raw := `{"ns":"app","revision":2,"prev_revision":1,"store_id":"st","committed_at":"2026-01-01T00:00:00Z","puts":{"` + rollout.Key + `":` + string(next) + `},"future":[1]}`
	var cs transport.ChangeSet
	if err := json.Unmarshal([]byte(raw), &cs); err != nil {
		t.Fatal(err)
	}
	cs.Raw = json.RawMessage(raw)
	up.Apply("app", "st", 2, 2, map[string]json.RawMessage{"a": json.RawMessage(`1`), rollout.Key: next}, &cs, 0, false)
	testutil.Eventually(t, waitLimit, func() bool { return ns.Status().Revision == 2 }, "the old client at revision 2")
	if _, ok := ns.Get(rollout.Key); ok || valueOf(ns, "a") != "1" {
		t.Fatalf("the old client: %v", ns.Snapshot().Keys())
	}
	if st := ns.Status(); st.LastError.Err != nil || st.Origin != config.OriginNetwork {
		t.Fatalf("the old client: %v", st)
	}

	for _, caps := range []string{"", newCaps} {
		resp, body := getAs(t, url+transport.PathEvents+"?ns=app&since=1&wait=0s", caps)
		var ev struct {
			Changes []map[string]json.RawMessage `json:"changes"`
		}
		if err := json.Unmarshal(body, &ev); resp.StatusCode != 200 || err != nil || len(ev.Changes) != 1 {
			t.Fatalf("%q: %d %s", caps, resp.StatusCode, body)
		}
		ch := ev.Changes[0]
		if string(ch["future"]) != `[1]` || string(ch["revision"]) != "2" || string(ch["prev_revision"]) != "1" {
			t.Fatalf("%q: the change as relayed: %s", caps, body)
		}
		if _, has := ch["puts"]; has != (caps == newCaps) {
			t.Fatalf("%q: the change as relayed: %s", caps, body)
		}
	}
	resp, _ = getAs(t, url+transport.PathSnapshot+"?ns=app", "")
	if tag := resp.Header.Get("ETag"); !strings.Contains(tag, "."+strconv.Itoa(2)) {
		t.Fatalf("an old client's ETag %s at revision 2", tag)
	}
}
