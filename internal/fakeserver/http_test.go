package fakeserver

import (
	"bytes"
	"compress/gzip"
	"encoding/json"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/holdfast-dev/holdfast/controlapi"
	"github.com/holdfast-dev/holdfast/internal/testutil"
	"github.com/holdfast-dev/holdfast/internal/testutil/ssetest"
	"github.com/holdfast-dev/holdfast/internal/wire"
	"github.com/holdfast-dev/holdfast/transport"
)

// TestEndpoints drives every endpoint and its error cases over real HTTP.
func TestEndpoints(t *testing.T) {
	s := start(t, WithMaxPublishBytes(1024))
	c := newClient(t)
	u := s.URL()
	if _, err := s.Publish("other", map[string]any{"x": 1}); err != nil { // revision 1
		t.Fatal(err)
	}
	r2, err := s.Publish("app", map[string]any{"a": 1, "b": "two"}) // revision 2
	if err != nil {
		t.Fatal(err)
	}
	id := s.StoreID()
	etag := wire.ETag(id, r2)
	big := `{"puts":{"k":"` + strings.Repeat("x", 2000) + `"}}`
	longKey := strings.Repeat("k", transport.MaxKeyLen+1)

	tests := []struct {
		name   string
		method string
		path   string
		body   string
		hdr    []string
		status int
		code   string // error code, for error replies
	}{
		{"snapshot", "GET", "/sdk/snapshot?ns=app", "", nil, 200, ""},
		{"snapshot not modified", "GET", "/sdk/snapshot?ns=app", "", []string{"If-None-Match", etag}, 304, ""},
		{"snapshot weak list match", "GET", "/sdk/snapshot?ns=app", "", []string{"If-None-Match", `"x.1", W/` + etag}, 304, ""},
		{"snapshot stale etag", "GET", "/sdk/snapshot?ns=app", "", []string{"If-None-Match", wire.ETag(id, 1)}, 200, ""},
		{"snapshot unknown ns", "GET", "/sdk/snapshot?ns=nope", "", nil, 404, transport.CodeNotFound},
		{"snapshot bad ns", "GET", "/sdk/snapshot?ns=..", "", nil, 400, transport.CodeBadRequest},
		{"snapshot missing ns", "GET", "/sdk/snapshot", "", nil, 400, transport.CodeBadRequest},
		{"snapshot upper-case ns", "GET", "/sdk/snapshot?ns=App", "", nil, 400, transport.CodeBadRequest},
		{"snapshot wrong method", "POST", "/sdk/snapshot?ns=app", "", nil, 405, transport.CodeBadRequest},
		{"events immediate", "GET", "/sdk/events?ns=app&since=0", "", nil, 200, ""},
		{"events no wait", "GET", "/sdk/events?ns=app&since=2&wait=0s", "", nil, 200, ""},
		{"events bad since", "GET", "/sdk/events?ns=app&since=abc", "", nil, 400, transport.CodeBadRequest},
		{"events negative since", "GET", "/sdk/events?ns=app&since=-1", "", nil, 400, transport.CodeBadRequest},
		{"events future since", "GET", "/sdk/events?ns=app&since=99", "", nil, 400, transport.CodeCursorAhead},
		{"events bad wait", "GET", "/sdk/events?ns=app&since=0&wait=soon", "", nil, 400, transport.CodeBadRequest},
		{"events unknown ns", "GET", "/sdk/events?ns=nope&since=0", "", nil, 404, transport.CodeNotFound},
		{"watch future since", "GET", "/sdk/watch?ns=app&since=99", "", nil, 400, transport.CodeCursorAhead},
		{"watch future last-event-id", "GET", "/sdk/watch?ns=app", "", []string{"Last-Event-ID", "99"}, 400, transport.CodeCursorAhead},
		{"events future since, v1 client", "GET", "/sdk/events?ns=app&since=99", "", []string{transport.HeaderProtocol, "1"}, 409, transport.CodeCursorAhead},
		{"watch future since, v1 client", "GET", "/sdk/watch?ns=app&since=99", "", []string{transport.HeaderProtocol, "1"}, 409, transport.CodeCursorAhead},
		{"watch future since, v2 client", "GET", "/sdk/watch?ns=app&since=99", "", []string{transport.HeaderProtocol, "2"}, 409, transport.CodeCursorAhead},
		{"watch future since, garbled version", "GET", "/sdk/watch?ns=app&since=99", "", []string{transport.HeaderProtocol, "one"}, 400, transport.CodeCursorAhead},
		{"events bad since, v1 client", "GET", "/sdk/events?ns=app&since=abc", "", []string{transport.HeaderProtocol, "1"}, 400, transport.CodeBadRequest},
		{"watch bad last-event-id", "GET", "/sdk/watch?ns=app", "", []string{"Last-Event-ID", "x"}, 400, transport.CodeBadRequest},
		{"watch unknown ns", "GET", "/sdk/watch?ns=nope&since=0", "", nil, 404, transport.CodeNotFound},
		{"watch bad ns", "GET", "/sdk/watch?ns=a/b&since=0", "", nil, 400, transport.CodeBadRequest},
		{"ack", "POST", "/sdk/ack", `{"client_id":"c1","ns":"app","revision":2,"status":"ack"}`, nil, 204, ""},
		{"nack", "POST", "/sdk/ack", `{"client_id":"c2","ns":"app","revision":2,"status":"nack","error":"schema says no"}`, nil, 204, ""},
		{"ack unknown field ok", "POST", "/sdk/ack", `{"client_id":"c3","ns":"app","revision":1,"status":"ack","extra":1}`, nil, 204, ""},
		{"ack bad json", "POST", "/sdk/ack", `{"client_id":`, nil, 400, transport.CodeBadRequest},
		{"ack bad status", "POST", "/sdk/ack", `{"client_id":"c1","ns":"app","revision":2,"status":"maybe"}`, nil, 400, transport.CodeBadRequest},
		{"ack no client", "POST", "/sdk/ack", `{"ns":"app","revision":2,"status":"ack"}`, nil, 400, transport.CodeBadRequest},
		{"ack unknown ns", "POST", "/sdk/ack", `{"client_id":"c1","ns":"nope","revision":2,"status":"ack"}`, nil, 404, transport.CodeNotFound},
		{"ack too large", "POST", "/sdk/ack", `{"client_id":"` + strings.Repeat("c", 70000) + `"}`, nil, 413, transport.CodeTooLarge},
		{"publish", "POST", "/control/namespaces/app/publish", `{"puts":{"c":{"deep":[1,2]}},"deletes":["a"]}`, nil, 200, ""},
		{"publish creates ns", "POST", "/control/namespaces/fresh/publish", `{}`, nil, 200, ""},
		{"publish bad key", "POST", "/control/namespaces/app/publish", `{"puts":{"a b":1}}`, nil, 400, transport.CodeBadRequest},
		{"publish long key", "POST", "/control/namespaces/app/publish", `{"deletes":["` + longKey + `"]}`, nil, 400, transport.CodeBadRequest},
		{"publish put and delete", "POST", "/control/namespaces/app/publish", `{"puts":{"a":1},"deletes":["a"]}`, nil, 400, transport.CodeBadRequest},
		{"publish bad json", "POST", "/control/namespaces/app/publish", `{"puts":`, nil, 400, transport.CodeBadRequest},
		{"publish unknown field", "POST", "/control/namespaces/app/publish", `{"put":{"a":1}}`, nil, 400, transport.CodeBadRequest},
		{"publish trailing data", "POST", "/control/namespaces/app/publish", `{} {}`, nil, 400, transport.CodeBadRequest},
		{"publish too large", "POST", "/control/namespaces/app/publish", big, nil, 413, transport.CodeTooLarge},
		{"publish bad ns", "POST", "/control/namespaces/Bad!/publish", `{}`, nil, 400, transport.CodeBadRequest},
		{"publish wrong method", "GET", "/control/namespaces/app/publish", "", nil, 405, transport.CodeBadRequest},
		{"rollback unknown ns", "POST", "/control/namespaces/nope/rollback", `{"to_revision":1}`, nil, 404, transport.CodeNotFound},
		{"rollback future", "POST", "/control/namespaces/app/rollback", `{"to_revision":1000}`, nil, 404, transport.CodeNotFound},
		{"rollback missing", "POST", "/control/namespaces/app/rollback", `{}`, nil, 400, transport.CodeBadRequest},
		{"schema invalid", "PUT", "/control/namespaces/app/schema", `{"type":12}`, nil, 400, transport.CodeBadRequest},
		{"schema not json", "PUT", "/control/namespaces/app/schema", `{`, nil, 400, transport.CodeBadRequest},
		{"schema external ref", "PUT", "/control/namespaces/app/schema", `{"$ref":"file:///etc/passwd"}`, nil, 400, transport.CodeBadRequest},
		{"compact future", "POST", "/control/compact", `{"revision":1000}`, nil, 400, transport.CodeBadRequest},
		{"compact bad body", "POST", "/control/compact", `{"rev":1}`, nil, 400, transport.CodeBadRequest},
		{"clients", "GET", "/control/clients", "", nil, 200, ""},
		{"status", "GET", "/control/namespaces/app/status", "", nil, 200, ""},
		{"status unknown", "GET", "/control/namespaces/nope/status", "", nil, 404, transport.CodeNotFound},
		{"faults bad status", "POST", "/control/faults", `{"fail":{"count":1,"status":200}}`, nil, 400, transport.CodeBadRequest},
		{"faults bad latency", "POST", "/control/faults", `{"latency":"slow"}`, nil, 400, transport.CodeBadRequest},
		{"faults unknown field", "POST", "/control/faults", `{"blackhole_all":true}`, nil, 400, transport.CodeBadRequest},
		{"faults empty", "POST", "/control/faults", `{}`, nil, 200, ""},
		{"no such path", "GET", "/nope", "", nil, 404, transport.CodeNotFound},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			resp, body := do(t, c, tc.method, u+tc.path, tc.body, tc.hdr...)
			if resp.StatusCode != tc.status {
				t.Fatalf("status %d, want %d; body %s", resp.StatusCode, tc.status, body)
			}
			if strings.HasPrefix(tc.path, "/sdk/") && resp.Header.Get(transport.HeaderStoreID) != id {
				t.Errorf("store id header %q, want %q", resp.Header.Get(transport.HeaderStoreID), id)
			}
			// What the server speaks, on every data-plane reply, whatever
			// the client's version: a client of version 0 ignores it.
			if strings.HasPrefix(tc.path, "/sdk/") && (resp.Header.Get(transport.HeaderProtocol) != "1" ||
				resp.Header.Get(transport.HeaderHeartbeat) != strconv.FormatInt(DefaultHeartbeat.Milliseconds(), 10)) {
				t.Errorf("protocol headers %q, %q; want 1 and the heartbeat in ms",
					resp.Header.Get(transport.HeaderProtocol), resp.Header.Get(transport.HeaderHeartbeat))
			}
			if tc.code != "" {
				eb := decode[transport.ErrorBody](t, body)
				if eb.Error != tc.code || eb.Message == "" {
					t.Fatalf("error body %s, want code %q and a message", body, tc.code)
				}
				if tc.code == transport.CodeCursorAhead && eb.StoreID != id {
					t.Fatalf("error body %s, want store_id %q", body, id)
				}
			}
		})
	}

	t.Run("snapshot body and headers", func(t *testing.T) {
		resp, body := do(t, c, "GET", u+"/sdk/snapshot?ns=other", "")
		snap := decode[transport.Snapshot](t, body)
		if snap.Namespace != "other" || snap.StoreID != id || snap.Revision != 1 || snap.Cursor != s.Head() || string(valuesOf(t, snap)["x"]) != "1" {
			t.Fatalf("snapshot %s", body)
		}
		if resp.Header.Get("ETag") != wire.ETag(id, 1) || resp.Header.Get(transport.HeaderRevision) != "1" ||
			resp.Header.Get(transport.HeaderCursor) != strconv.FormatInt(s.Head(), 10) {
			t.Fatalf("headers %v", resp.Header)
		}
		resp, _ = do(t, c, "GET", u+"/sdk/snapshot?ns=other", "", "If-None-Match", wire.ETag(id, 1))
		if resp.StatusCode != 304 || resp.Header.Get(transport.HeaderCursor) != strconv.FormatInt(s.Head(), 10) ||
			resp.Header.Get(transport.HeaderRevision) != "1" {
			t.Fatalf("304 %d headers %v", resp.StatusCode, resp.Header)
		}
	})

	t.Run("snapshot gzip", func(t *testing.T) {
		resp, body := do(t, c, "GET", u+"/sdk/snapshot?ns=app", "", "Accept-Encoding", "br, gzip;q=0.8")
		if resp.Header.Get("Content-Encoding") != "gzip" {
			t.Fatalf("no gzip: %v", resp.Header)
		}
		zr, err := gzip.NewReader(bytes.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		plain, err := io.ReadAll(zr)
		if err != nil {
			t.Fatal(err)
		}
		if snap := decode[transport.Snapshot](t, plain); snap.Namespace != "app" {
			t.Fatalf("gzip snapshot %s", plain)
		}
		resp, _ = do(t, c, "GET", u+"/sdk/snapshot?ns=app", "", "Accept-Encoding", "gzip;q=0")
		if resp.Header.Get("Content-Encoding") != "" {
			t.Fatal("gzip despite q=0")
		}
	})

	t.Run("acks listed", func(t *testing.T) {
		_, body := do(t, c, "GET", u+"/control/clients", "")
		got := decode[struct {
			Clients []ClientState `json:"clients"`
		}](t, body)
		if len(got.Clients) != 3 {
			t.Fatalf("clients %s", body)
		}
		c1, c2 := got.Clients[0], got.Clients[1]
		head, _ := s.store.NsRevision("app")
		if c1.ClientID != "c1" || c1.AckedRevision != 2 || c1.HeadRevision != head || c1.Behind != (head > 2) {
			t.Fatalf("c1 %+v", c1)
		}
		if c2.NackedRevision != 2 || c2.NackError != "schema says no" || c2.AckedRevision != 0 {
			t.Fatalf("c2 %+v", c2)
		}
	})
}

func TestEventsLongPoll(t *testing.T) {
	s := start(t, WithMaxWait(5*time.Second))
	c := newClient(t)
	rev, _ := s.Publish("app", map[string]any{"a": 1})

	t.Run("timeout advances cursor", func(t *testing.T) {
		other, _ := s.Publish("other", map[string]any{"x": 1})
		resp, body := do(t, c, "GET", s.URL()+"/sdk/events?ns=app&since="+strconv.FormatInt(rev, 10)+"&wait=50ms", "")
		er := decode[transport.EventsResponse](t, body)
		if resp.StatusCode != 200 || er.Changes == nil || len(er.Changes) != 0 || er.Cursor < other || er.Revision != rev {
			t.Fatalf("%d %s", resp.StatusCode, body)
		}
		if !strings.Contains(string(body), `"changes":[]`) {
			t.Fatalf("empty changes not a list: %s", body)
		}
	})

	t.Run("woken by publish", func(t *testing.T) {
		since := s.Head()
		var wg sync.WaitGroup
		var body []byte
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, body = do(t, c, "GET", s.URL()+"/sdk/events?ns=app&since="+strconv.FormatInt(since, 10)+"&wait=5s", "")
		}()
		next, _ := s.Publish("app", map[string]any{"b": 2})
		wg.Wait()
		er := decode[transport.EventsResponse](t, body)
		if len(er.Changes) != 1 || er.Changes[0].Revision != next || er.Changes[0].PrevRevision != rev || er.Cursor < next || er.Revision != next {
			t.Fatalf("%s", body)
		}
	})

	t.Run("dropped", func(t *testing.T) {
		since := s.Head()
		var wg sync.WaitGroup
		var resp *http.Response
		var body []byte
		wg.Add(1)
		go func() {
			defer wg.Done()
			resp, body = do(t, c, "GET", s.URL()+"/sdk/events?ns=app&since="+strconv.FormatInt(since, 10)+"&wait=5s", "")
		}()
		testutil.Eventually(t, waitLimit, func() bool {
			return s.Watchers("app") == 1
		}, "a waiting long-poll")
		s.DropStreams()
		wg.Wait()
		er := decode[transport.EventsResponse](t, body)
		if resp.StatusCode != 200 || len(er.Changes) != 0 || er.Cursor != since {
			t.Fatalf("%d %s", resp.StatusCode, body)
		}
	})

	t.Run("compacted", func(t *testing.T) {
		s.Publish("app", map[string]any{"c": 3})
		k, err := s.Compact(0)
		if err != nil {
			t.Fatal(err)
		}
		resp, body := do(t, c, "GET", s.URL()+"/sdk/events?ns=app&since=0", "")
		eb := decode[transport.ErrorBody](t, body)
		if resp.StatusCode != 410 || eb.Error != transport.CodeCompacted || eb.CompactRevision != k {
			t.Fatalf("%d %s", resp.StatusCode, body)
		}
		resp, body = do(t, c, "GET", s.URL()+"/sdk/watch?ns=app&since=0", "")
		eb = decode[transport.ErrorBody](t, body)
		if resp.StatusCode != 410 || eb.Error != transport.CodeCompacted || eb.CompactRevision != k {
			t.Fatalf("watch: %d %s", resp.StatusCode, body)
		}
	})
}

func TestControlRollbackCompactSchema(t *testing.T) {
	s := start(t)
	c := newClient(t)
	u := s.URL()
	post := func(path, body string) (int, []byte) {
		resp, data := do(t, c, "POST", u+path, body)
		return resp.StatusCode, data
	}
	st, body := post("/control/namespaces/app/publish", `{"puts":{"a":1,"b":2}}`)
	r1 := decode[controlapi.RevisionReply](t, body).Revision
	if st != 200 || r1 != 1 {
		t.Fatalf("%d %s", st, body)
	}
	post("/control/namespaces/app/publish", `{"puts":{"a":10,"c":3},"deletes":["b"]}`)
	st, body = post("/control/namespaces/app/rollback", `{"to_revision":1}`)
	if st != 200 || decode[controlapi.RevisionReply](t, body).Revision != 3 {
		t.Fatalf("rollback %d %s", st, body)
	}
	snap, _ := s.Snapshot("app")
	if string(snap.Values) != `{"a":1,"b":2}` || snap.Revision != 3 {
		t.Fatalf("after rollback %+v", snap)
	}

	st, body = post("/control/compact", `{"revision":2}`)
	if st != 200 || decode[controlapi.CompactReply](t, body).CompactRevision != 2 {
		t.Fatalf("compact %d %s", st, body)
	}
	st, body = post("/control/namespaces/app/rollback", `{"to_revision":1}`)
	if eb := decode[transport.ErrorBody](t, body); st != 410 || eb.CompactRevision != 2 {
		t.Fatalf("rollback below compaction %d %s", st, body)
	}

	// Schema: every failure is listed and nothing is committed.
	sch := `{"type":"object","properties":{"a":{"type":"integer","maximum":5},"name":{"type":"string"}},"required":["a"]}`
	resp, body := do(t, c, "PUT", u+"/control/namespaces/app/schema", sch)
	if resp.StatusCode != 204 {
		t.Fatalf("schema %d %s", resp.StatusCode, body)
	}
	head := s.Head()
	st, body = post("/control/namespaces/app/publish", `{"puts":{"a":"x","name":7}}`)
	eb := decode[transport.ErrorBody](t, body)
	if st != 422 || eb.Error != transport.CodeSchemaViolation || len(eb.Details) != 2 {
		t.Fatalf("schema violation %d %s", st, body)
	}
	if s.Head() != head {
		t.Fatal("a refused publish committed a revision")
	}
	st, body = post("/control/namespaces/app/publish", `{"deletes":["a"]}`)
	if st != 422 {
		t.Fatalf("deleting a required key: %d %s", st, body)
	}
	if st, body = post("/control/namespaces/app/publish", `{"puts":{"a":4,"name":"n"}}`); st != 200 {
		t.Fatalf("valid publish %d %s", st, body)
	}
	// A schema alone creates a namespace, at revision 0.
	if err := s.SetSchema("empty", []byte(`{"type":"object"}`)); err != nil {
		t.Fatal(err)
	}
	resp, body = do(t, c, "GET", u+"/sdk/snapshot?ns=empty", "")
	if snap := decode[transport.Snapshot](t, body); resp.StatusCode != 200 || snap.Revision != 0 || len(valuesOf(t, snap)) != 0 {
		t.Fatalf("schema-only namespace %d %s", resp.StatusCode, body)
	}
	// Ack statuses reach the namespace status: of clients connected (here,
	// as a relay reports them).
	reportPresence(t, c, u, "r1", "c1", "c2")
	do(t, c, "POST", u+"/sdk/ack", `{"client_id":"c1","ns":"app","revision":`+strconv.FormatInt(s.Head(), 10)+`,"status":"ack"}`)
	do(t, c, "POST", u+"/sdk/ack", `{"client_id":"c2","ns":"app","revision":1,"status":"ack"}`)
	status, err := s.Status("app")
	if err != nil || status.Clients != 2 || status.Acked != 1 || status.Behind != 1 {
		t.Fatalf("status %+v %v", status, err)
	}
}

func TestFaults(t *testing.T) {
	s := start(t)
	c := newClient(t)
	u := s.URL()
	s.Publish("app", map[string]any{"a": 1})

	t.Run("fail next", func(t *testing.T) {
		resp, body := do(t, c, "POST", u+"/control/faults", `{"fail":{"count":2,"status":503,"retry_after":"2s"}}`)
		if resp.StatusCode != 200 {
			t.Fatalf("%d %s", resp.StatusCode, body)
		}
		for i := range 2 {
			resp, body = do(t, c, "GET", u+"/sdk/snapshot?ns=app", "")
			if resp.StatusCode != 503 || resp.Header.Get("Retry-After") != "2" || decode[transport.ErrorBody](t, body).Error != transport.CodeUnavailable {
				t.Fatalf("request %d: %d %v %s", i, resp.StatusCode, resp.Header, body)
			}
		}
		if resp, _ = do(t, c, "GET", u+"/sdk/snapshot?ns=app", ""); resp.StatusCode != 200 {
			t.Fatalf("third request %d", resp.StatusCode)
		}
		s.FailNext(1, http.StatusTooManyRequests, 10*time.Millisecond)
		if resp, _ = do(t, c, "GET", u+"/sdk/events?ns=app&since=0", ""); resp.StatusCode != 429 || resp.Header.Get("Retry-After") != "0" {
			t.Fatalf("429: %d %v", resp.StatusCode, resp.Header)
		}
	})

	t.Run("latency", func(t *testing.T) {
		do(t, c, "POST", u+"/control/faults", `{"latency":"150ms"}`)
		t0 := time.Now()
		do(t, c, "GET", u+"/sdk/snapshot?ns=app", "")
		if d := time.Since(t0); d < 150*time.Millisecond {
			t.Fatalf("reply after %v", d)
		}
		do(t, c, "POST", u+"/control/faults", `{"latency":"0s"}`)
	})

	t.Run("reset store", func(t *testing.T) {
		old := s.StoreID()
		resp, body := do(t, c, "POST", u+"/control/faults", `{"reset_store":true}`)
		got := decode[struct {
			StoreID string `json:"store_id"`
		}](t, body)
		if resp.StatusCode != 200 || got.StoreID == old || got.StoreID != s.StoreID() || s.Head() != 0 {
			t.Fatalf("%d %s", resp.StatusCode, body)
		}
		if resp, _ = do(t, c, "GET", u+"/sdk/snapshot?ns=app", ""); resp.StatusCode != 404 {
			t.Fatalf("old namespace after reset: %d", resp.StatusCode)
		}
		if rev, _ := s.Publish("app", map[string]any{"a": 2}); rev != 1 {
			t.Fatalf("first revision after reset %d", rev)
		}
	})

	t.Run("bearer token", func(t *testing.T) {
		s := start(t, WithBearerToken("s3cret"))
		s.Publish("app", map[string]any{"a": 1})
		for _, hdr := range [][]string{nil, {"Authorization", "Bearer wrong"}, {"Authorization", "s3cret"}} {
			resp, body := do(t, c, "GET", s.URL()+"/sdk/snapshot?ns=app", "", hdr...)
			if resp.StatusCode != 401 || decode[transport.ErrorBody](t, body).Error != transport.CodeUnauthorized {
				t.Fatalf("%v: %d %s", hdr, resp.StatusCode, body)
			}
		}
		if resp, _ := do(t, c, "GET", s.URL()+"/sdk/snapshot?ns=app", "", "Authorization", "Bearer s3cret"); resp.StatusCode != 200 {
			t.Fatalf("with token: %d", resp.StatusCode)
		}
		if resp, _ := do(t, c, "POST", s.URL()+"/control/namespaces/app/publish", `{}`); resp.StatusCode != 200 {
			t.Fatalf("control with no token: %d", resp.StatusCode)
		}
	})
}

func TestStopRestart(t *testing.T) {
	s := start(t, WithHeartbeat(50*time.Millisecond))
	c := newClient(t)
	rev, _ := s.Publish("app", map[string]any{"a": 1})
	url, id := s.URL(), s.StoreID()
	st := ssetest.Open(t, c, url+"/sdk/watch?ns=app&since="+strconv.FormatInt(rev, 10), "")
	if err := s.Stop(); err != nil {
		t.Fatal(err)
	}
	st.Ended(t)
	if _, err := c.Get(url + "/sdk/snapshot?ns=app"); err == nil {
		t.Fatal("a stopped server answered")
	}
	rev2, err := s.Publish("app", map[string]any{"a": 2}) // the store works while stopped
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Restart(); err != nil {
		t.Fatal(err)
	}
	if s.URL() != url {
		t.Fatalf("restarted on %s, want %s", s.URL(), url)
	}
	_, body := do(t, c, "GET", url+"/sdk/snapshot?ns=app", "")
	if snap := decode[transport.Snapshot](t, body); snap.StoreID != id || snap.Revision != rev2 {
		t.Fatalf("after restart: %s", body)
	}
	if err := s.Restart(); err != nil { // restart while running
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := s.Restart(); err != ErrClosed {
		t.Fatalf("Restart after Close: %v", err)
	}
	if err := s.Close(); err != nil {
		t.Fatal("second Close:", err)
	}
}

func TestStartOptions(t *testing.T) {
	for _, o := range []Option{WithHeartbeat(0), WithRetention(-1), WithWatcherBuffer(0), WithMaxPublishBytes(0), WithMaxWait(-1)} {
		if s, err := Start(o); err == nil || !strings.HasPrefix(err.Error(), "fakeserver: ") {
			if s != nil {
				s.Close()
			}
			t.Fatalf("bad option accepted: %v", err)
		}
	}
}

func TestGoAPIErrors(t *testing.T) {
	s := start(t)
	if _, err := s.Publish("Bad", nil); !errorsIs(err, ErrInvalid) {
		t.Fatalf("bad ns: %v", err)
	}
	if _, err := s.Publish("ok", map[string]any{"k": func() {}}); !errorsIs(err, ErrInvalid) {
		t.Fatalf("unencodable value: %v", err)
	}
	if _, err := s.PublishRaw("ok", map[string]json.RawMessage{"k": json.RawMessage("{")}, nil); !errorsIs(err, ErrInvalid) {
		t.Fatalf("bad raw value: %v", err)
	}
	if _, err := s.Rollback("nope", 0); !errorsIs(err, ErrUnknownNamespace) {
		t.Fatalf("rollback unknown: %v", err)
	}
	if err := s.SetSchema("ok", []byte(`nope`)); !errorsIs(err, ErrInvalid) {
		t.Fatalf("bad schema: %v", err)
	}
}
