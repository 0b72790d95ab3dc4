package controlapi_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/holdfast-dev/holdfast/config"
	"github.com/holdfast-dev/holdfast/controlapi"
	"github.com/holdfast-dev/holdfast/transport"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// newClient returns a client of url whose connections close with the
// test.
func newClient(t *testing.T, url string, opts ...controlapi.ClientOption) *controlapi.Client {
	t.Helper()
	tr := &http.Transport{}
	t.Cleanup(tr.CloseIdleConnections)
	c, err := controlapi.NewClient(url, append([]controlapi.ClientOption{controlapi.WithHTTPClient(&http.Client{Transport: tr})}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// reply is a canned reply of a test server.
type reply struct {
	status int
	header map[string]string
	body   string
}

// serve starts a server that records each request and answers with r.
func serve(t *testing.T, r reply) (*httptest.Server, *[]*http.Request, *[]string) {
	t.Helper()
	var reqs []*http.Request
	var bodies []string
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		b, _ := io.ReadAll(req.Body)
		reqs, bodies = append(reqs, req), append(bodies, string(b))
		for k, v := range r.header {
			w.Header().Set(k, v)
		}
		w.WriteHeader(r.status)
		_, _ = io.WriteString(w, r.body)
	}))
	t.Cleanup(hs.Close)
	return hs, &reqs, &bodies
}

func TestNewClientChecksTheURL(t *testing.T) {
	for _, u := range []string{"", "ftp://h", "http://", "http://h/?q=1", "http://h/#f", "://"} {
		if _, err := controlapi.NewClient(u); err == nil || !strings.HasPrefix(err.Error(), "controlapi: ") {
			t.Errorf("NewClient(%q) = %v, want a controlapi error", u, err)
		}
	}
	for _, o := range []controlapi.ClientOption{controlapi.WithHTTPClient(nil), controlapi.WithMaxReplyBytes(0), controlapi.WithToken("a\nb")} {
		if _, err := controlapi.NewClient("http://h", o); err == nil {
			t.Errorf("an invalid option passed")
		}
	}
	c, err := controlapi.NewClient("https://h:1/prefix/", nil)
	if err != nil || c.BaseURL() != "https://h:1/prefix" {
		t.Errorf("NewClient with a prefix: %v, %v", c, err)
	}
}

// TestRequests: each method sends its route, query and body, with the
// client's headers, and decodes its reply.
func TestRequests(t *testing.T) {
	ctx := context.Background()
	ten := int64(10)
	at := time.Date(2026, 12, 1, 14, 3, 0, 0, time.UTC)
	for _, tc := range []struct {
		name        string
		call        func(*controlapi.Client) (any, error)
		reply       string
		method, uri string
		body        string // "" none
		want        any
	}{
		{"Publish", func(c *controlapi.Client) (any, error) {
			return c.Publish(ctx, "ns.a", controlapi.PublishRequest{Puts: map[string]json.RawMessage{"k": json.RawMessage(`1`)}, Actor: "alice", IfRevision: &ten})
		}, `{"revision":11}`, "POST", "/p/control/namespaces/ns.a/publish", `{"puts":{"k":1},"actor":"alice","if_revision":10}`, int64(11)},
		{"Rollback", func(c *controlapi.Client) (any, error) {
			return c.Rollback(ctx, "ns.a", controlapi.RollbackRequest{To: &ten, Reason: "undo"})
		}, `{"revision":12}`, "POST", "/p/control/namespaces/ns.a/rollback", `{"to_revision":10,"reason":"undo"}`, int64(12)},
		{"PutSchema", func(c *controlapi.Client) (any, error) {
			return nil, c.PutSchema(ctx, "ns.a", json.RawMessage(`{ "type": "object" }`))
		}, ``, "PUT", "/p/control/namespaces/ns.a/schema", `{"type":"object"}`, nil},
		{"GetSchema", func(c *controlapi.Client) (any, error) {
			s, err := c.GetSchema(ctx, "ns.a")
			return string(s), err
		}, `{ "type": "object" }`, "GET", "/p/control/namespaces/ns.a/schema", "", `{ "type": "object" }`},
		{"DeleteSchema", func(c *controlapi.Client) (any, error) { return nil, c.DeleteSchema(ctx, "ns.a") },
			``, "DELETE", "/p/control/namespaces/ns.a/schema", "", nil},
		{"Status", func(c *controlapi.Client) (any, error) { return c.Status(ctx, "ns.a") },
			`{"ns":"ns.a","revision":3,"head":5,"future":true}`, "GET", "/p/control/namespaces/ns.a/status", "", &controlapi.NamespaceStatus{Namespace: "ns.a", Revision: 3, Head: 5}},
		{"History", func(c *controlapi.Client) (any, error) {
			return c.History(ctx, "ns.a", controlapi.HistoryOptions{Limit: 2, Before: 9})
		}, `{"ns":"ns.a","revisions":[{"revision":8}]}`, "GET", "/p/control/namespaces/ns.a/history?before=9&limit=2", "",
			&controlapi.History{Namespace: "ns.a", Revisions: []controlapi.AuditRecord{{Revision: 8}}}},
		{"History, no options", func(c *controlapi.Client) (any, error) { return c.History(ctx, "ns.a", controlapi.HistoryOptions{}) },
			`{"ns":"ns.a","revisions":[]}`, "GET", "/p/control/namespaces/ns.a/history", "", &controlapi.History{Namespace: "ns.a", Revisions: []controlapi.AuditRecord{}}},
		{"ValuesAt", func(c *controlapi.Client) (any, error) { return c.ValuesAt(ctx, "ns.a", 7) },
			`{"ns":"ns.a","revision":6,"values":{"k":1}}`, "GET", "/p/control/namespaces/ns.a/values?revision=7", "",
			&controlapi.NamespaceValues{Namespace: "ns.a", Revision: 6, Values: map[string]json.RawMessage{"k": json.RawMessage(`1`)}}},
		{"ValuesAtTime", func(c *controlapi.Client) (any, error) { return c.ValuesAtTime(ctx, "ns.a", at) },
			`{"ns":"ns.a","revision":6}`, "GET", "/p/control/namespaces/ns.a/values?at=2026-12-01T14%3A03%3A00Z", "", &controlapi.NamespaceValues{Namespace: "ns.a", Revision: 6}},
		{"Diff", func(c *controlapi.Client) (any, error) { return c.Diff(ctx, "ns.a", 1, 4) },
			`{"ns":"ns.a","from":1,"to":4,"changes":[{"key":"k","new":2}]}`, "GET", "/p/control/namespaces/ns.a/diff?from=1&to=4", "",
			&controlapi.Diff{Namespace: "ns.a", From: 1, To: 4, Changes: []controlapi.KeyChange{{Key: "k", New: json.RawMessage(`2`)}}}},
		{"Compact", func(c *controlapi.Client) (any, error) { return c.Compact(ctx, 0) },
			`{"compact_revision":5}`, "POST", "/p/control/compact", `{"revision":0}`, int64(5)},
		{"Clients", func(c *controlapi.Client) (any, error) { return c.Clients(ctx) },
			`{"head":5,"clients":[{"client_id":"c1","ns":"ns.a"}]}`, "GET", "/p/control/clients", "",
			&controlapi.Clients{Head: 5, Clients: []controlapi.ClientState{{ClientID: "c1", Namespace: "ns.a"}}}},
		{"CreateToken", func(c *controlapi.Client) (any, error) {
			return c.CreateToken(ctx, controlapi.TokenCreateRequest{Name: "bot", Control: []string{"ns.*"}})
		}, `{"name":"bot","secret":"s"}`, "POST", "/p/control/tokens", `{"name":"bot","control":["ns.*"]}`,
			&controlapi.TokenCreated{TokenInfo: controlapi.TokenInfo{Name: "bot"}, Secret: "s"}},
		{"ListTokens", func(c *controlapi.Client) (any, error) { return c.ListTokens(ctx) },
			`{"tokens":[{"name":"a"}]}`, "GET", "/p/control/tokens", "", []controlapi.TokenInfo{{Name: "a"}}},
		{"GetToken", func(c *controlapi.Client) (any, error) { return c.GetToken(ctx, "a/b") },
			`{"name":"a/b"}`, "GET", "/p/control/tokens/a%2Fb", "", &controlapi.TokenInfo{Name: "a/b"}},
		{"RevokeToken", func(c *controlapi.Client) (any, error) { return nil, c.RevokeToken(ctx, "a") },
			``, "DELETE", "/p/control/tokens/a", "", nil},
		{"SyncTokens", func(c *controlapi.Client) (any, error) {
			return c.SyncTokens(ctx, controlapi.TokenSyncRequest{After: 3, Used: []string{"a"}})
		}, `{"revision":4,"required":true}`, "POST", "/p/control/tokens/sync", `{"after":3,"used":["a"]}`, &controlapi.TokenSync{Revision: 4, Required: true}},
		{"Faults", func(c *controlapi.Client) (any, error) {
			return c.Faults(ctx, controlapi.FaultsRequest{Fail: &controlapi.FailFault{Count: 2, Status: 503}, DropStreams: true})
		}, `{"store_id":"s1"}`, "POST", "/p/control/faults", `{"fail":{"count":2,"status":503},"drop_streams":true}`, "s1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			status := http.StatusOK
			if tc.reply == "" {
				status = http.StatusNoContent
			}
			hs, reqs, bodies := serve(t, reply{status: status, body: tc.reply})
			c := newClient(t, hs.URL+"/p/", controlapi.WithToken("sekrit"), controlapi.WithUserAgent("ua/1"))
			got, err := tc.call(c)
			if err != nil {
				t.Fatal(err)
			}
			if tc.want != nil && !reflect.DeepEqual(got, tc.want) {
				t.Errorf("got %#v, want %#v", got, tc.want)
			}
			if len(*reqs) != 1 {
				t.Fatalf("%d requests", len(*reqs))
			}
			r := (*reqs)[0]
			if r.Method != tc.method || r.URL.RequestURI() != tc.uri {
				t.Errorf("sent %s %s, want %s %s", r.Method, r.URL.RequestURI(), tc.method, tc.uri)
			}
			if (*bodies)[0] != tc.body {
				t.Errorf("sent body %q, want %q", (*bodies)[0], tc.body)
			}
			wantCT := ""
			if tc.body != "" {
				wantCT = "application/json"
			}
			if r.Header.Get("Authorization") != "Bearer sekrit" || r.Header.Get("User-Agent") != "ua/1" ||
				r.Header.Get("Accept") != "application/json" || r.Header.Get("Content-Type") != wantCT {
				t.Errorf("headers %v", r.Header)
			}
		})
	}
}

// TestErrors: a reply that is not 2xx is an *Error with the body's
// fields, and unwraps to the sentinel of its code.
func TestErrors(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name  string
		reply reply
		want  controlapi.Error
		is    []error
		isNot []error
		text  string
	}{
		{"not_found", reply{404, nil, `{"error":"not_found","message":"no such namespace","store_id":"s1"}` + "\n"},
			controlapi.Error{StatusCode: 404, Code: "not_found", Message: "no such namespace", StoreID: "s1"},
			[]error{transport.ErrNotFound}, []error{transport.ErrBadRequest, controlapi.ErrConflict}, "not_found (HTTP 404): no such namespace"},
		{"conflict", reply{409, nil, `{"error":"conflict","message":"is at revision 7, not 6","revision":7}`},
			controlapi.Error{StatusCode: 409, Code: "conflict", Message: "is at revision 7, not 6", Revision: 7},
			[]error{controlapi.ErrConflict}, []error{transport.ErrNotFound}, "conflict (HTTP 409): is at revision 7, not 6"},
		{"compacted", reply{410, nil, `{"error":"compacted","message":"m","compact_revision":9}`},
			controlapi.Error{StatusCode: 410, Code: "compacted", Message: "m", CompactRevision: 9},
			[]error{transport.ErrCompacted}, nil, "compacted (HTTP 410): m"},
		{"schema_violation", reply{422, nil, `{"error":"schema_violation","message":"fails","details":["/a: want integer","/b: required"]}`},
			controlapi.Error{StatusCode: 422, Code: "schema_violation", Message: "fails", Details: []string{"/a: want integer", "/b: required"}},
			[]error{controlapi.ErrSchemaViolation}, nil, "schema_violation (HTTP 422): fails; /a: want integer; /b: required"},
		{"bad_request", reply{400, nil, `{"error":"bad_request","message":"limit"}`},
			controlapi.Error{StatusCode: 400, Code: "bad_request", Message: "limit"}, []error{transport.ErrBadRequest}, nil, "bad_request (HTTP 400): limit"},
		{"unauthorized", reply{401, nil, `{"error":"unauthorized"}`},
			controlapi.Error{StatusCode: 401, Code: "unauthorized"}, []error{transport.ErrUnauthorized}, nil, "unauthorized (HTTP 401)"},
		{"forbidden", reply{403, nil, `{"error":"forbidden","message":"no scope"}`},
			controlapi.Error{StatusCode: 403, Code: "forbidden", Message: "no scope"}, []error{transport.ErrUnauthorized}, nil, "forbidden (HTTP 403): no scope"},
		{"too_large", reply{413, nil, `{"error":"too_large","message":"body larger than 10 bytes"}`},
			controlapi.Error{StatusCode: 413, Code: "too_large", Message: "body larger than 10 bytes"}, []error{transport.ErrTooLarge}, nil, ""},
		{"unavailable, Retry-After", reply{503, map[string]string{"Retry-After": "2"}, `{"error":"unavailable","message":"store down"}`},
			controlapi.Error{StatusCode: 503, Code: "unavailable", Message: "store down", RetryAfter: 2 * time.Second},
			[]error{controlapi.ErrUnavailable}, nil, "unavailable (HTTP 503): store down"},
		{"internal", reply{500, nil, `{"error":"internal","message":"boom"}`},
			controlapi.Error{StatusCode: 500, Code: "internal", Message: "boom"}, nil,
			[]error{transport.ErrNotFound, controlapi.ErrUnavailable, controlapi.ErrConflict}, "internal (HTTP 500): boom"},
		{"not the API's form", reply{502, map[string]string{"Content-Type": "text/plain"}, "upstream went away\n"},
			controlapi.Error{StatusCode: 502, Message: "upstream went away"}, nil, nil, "bad_gateway (HTTP 502): upstream went away"},
		{"a 404 not the API's", reply{404, nil, "404 page not found\n"},
			controlapi.Error{StatusCode: 404, Message: "404 page not found"}, nil, []error{transport.ErrNotFound}, "not_found (HTTP 404): 404 page not found"},
		{"a long page clipped", reply{502, nil, strings.Repeat("x", 2000)},
			controlapi.Error{StatusCode: 502, Message: strings.Repeat("x", 512) + "…"}, nil, nil, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			hs, _, _ := serve(t, tc.reply)
			var hooked []byte
			c := newClient(t, hs.URL, controlapi.WithReplyHook(func(_ *http.Response, b []byte) { hooked = b }))
			_, err := c.Status(ctx, "ns.a")
			var ae *controlapi.Error
			if !errors.As(err, &ae) {
				t.Fatalf("err = %v (%T), want an *Error", err, err)
			}
			if !reflect.DeepEqual(*ae, tc.want) {
				t.Errorf("error\n%#v\nwant\n%#v", *ae, tc.want)
			}
			for _, s := range tc.is {
				if !errors.Is(err, s) {
					t.Errorf("errors.Is(err, %v) = false", s)
				}
			}
			for _, s := range tc.isNot {
				if errors.Is(err, s) {
					t.Errorf("errors.Is(err, %v) = true", s)
				}
			}
			if tc.text != "" && err.Error() != tc.text {
				t.Errorf("Error() = %q, want %q", err.Error(), tc.text)
			}
			if string(hooked) != tc.reply.body {
				t.Errorf("the hook saw %q", hooked)
			}
		})
	}
	// A compacted error is a *transport.CompactedError too.
	hs, _, _ := serve(t, reply{410, nil, `{"error":"compacted","compact_revision":9}`})
	_, err := newClient(t, hs.URL).ValuesAt(ctx, "ns.a", 3)
	var ce *transport.CompactedError
	if !errors.As(err, &ce) || ce.CompactRevision != 9 {
		t.Errorf("errors.As CompactedError: %v", err)
	}
}

// TestBadReplies: a reply too large, or a 2xx reply that is not JSON,
// fails the call; a reply with more fields than the client knows does
// not.
func TestBadReplies(t *testing.T) {
	ctx := context.Background()
	hs, _, _ := serve(t, reply{200, nil, `{"ns":"ns.a","revision":1,"head":1,"padding":"` + strings.Repeat("x", 100) + `"}`})
	if _, err := newClient(t, hs.URL, controlapi.WithMaxReplyBytes(64)).Status(ctx, "ns.a"); err == nil || !strings.Contains(err.Error(), "reply larger than 64 bytes") {
		t.Errorf("a reply too large: %v", err)
	}
	if st, err := newClient(t, hs.URL).Status(ctx, "ns.a"); err != nil || st.Head != 1 {
		t.Errorf("a reply with unknown fields: %v, %v", st, err)
	}
	hs, _, _ = serve(t, reply{200, nil, `<html>`})
	if _, err := newClient(t, hs.URL).Status(ctx, "ns.a"); err == nil || !strings.Contains(err.Error(), "not JSON") {
		t.Errorf("a reply not JSON: %v", err)
	}
	hs, _, _ = serve(t, reply{200, nil, `{"ns":3}`})
	if _, err := newClient(t, hs.URL).Status(ctx, "ns.a"); err == nil || !strings.Contains(err.Error(), "decoding the reply") {
		t.Errorf("a reply of the wrong shape: %v", err)
	}
}

func TestRetryAfterDate(t *testing.T) {
	when := time.Now().Add(90 * time.Second).UTC().Format(http.TimeFormat)
	hs, _, _ := serve(t, reply{429, map[string]string{"Retry-After": when}, `{"error":"unavailable"}`})
	_, err := newClient(t, hs.URL).Clients(context.Background())
	var ae *controlapi.Error
	if !errors.As(err, &ae) || ae.RetryAfter < 80*time.Second || ae.RetryAfter > 91*time.Second {
		t.Errorf("Retry-After as a date: %v", err)
	}
}

// TestContext: the context bounds the request.
func TestContext(t *testing.T) {
	block := make(chan struct{})
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-block:
		case <-r.Context().Done():
		}
	}))
	defer hs.Close()
	defer close(block)
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if _, err := newClient(t, hs.URL).Status(ctx, "ns.a"); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("err = %v, want the context's", err)
	}
}

// TestRolloutRequests: the rollout routes, and an action without an
// actor or reason sends no body.
func TestRolloutRequests(t *testing.T) {
	ctx := context.Background()
	hs, reqs, bodies := serve(t, reply{200, nil, `{"id":"r1","rollouts":[{"id":"r1"}],"revision":4}`})
	c := newClient(t, hs.URL)
	if _, err := c.StartRollout(ctx, "ns.a", controlapi.RolloutRequest{Stages: []float64{100}, Bake: "1s"}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.ListRollouts(ctx, "ns.a"); err != nil {
		t.Fatal(err)
	}
	if _, err := c.GetRollout(ctx, "ns.a", "r/1"); err != nil {
		t.Fatal(err)
	}
	if _, err := c.AbortRollout(ctx, "ns.a", "r1", controlapi.RolloutActionRequest{}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.PromoteRollout(ctx, "ns.a", "r1", controlapi.RolloutActionRequest{Reason: "go"}); err != nil {
		t.Fatal(err)
	}
	var got []string
	for i, r := range *reqs {
		got = append(got, r.Method+" "+r.URL.RequestURI()+" "+(*bodies)[i])
	}
	want := []string{
		`POST /control/namespaces/ns.a/rollouts {"stages":[100],"bake":"1s","max_nacks":0}`,
		`GET /control/namespaces/ns.a/rollouts `,
		`GET /control/namespaces/ns.a/rollouts/r%2F1 `,
		`POST /control/namespaces/ns.a/rollouts/r1/abort `,
		`POST /control/namespaces/ns.a/rollouts/r1/promote {"reason":"go"}`,
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("requests:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// TestDefaultUserAgent: without WithUserAgent the Client sends
// holdfast-controlapi/VERSION, the SDK's version.
func TestDefaultUserAgent(t *testing.T) {
	var ua string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ua = r.Header.Get("User-Agent")
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"revision":3}`)
	}))
	defer srv.Close()
	c := newClient(t, srv.URL)
	if _, err := c.Publish(context.Background(), "payments.prod", controlapi.PublishRequest{}); err != nil {
		t.Fatal(err)
	}
	if want := "holdfast-controlapi/" + config.Version; ua != want || controlapi.DefaultUserAgent != want {
		t.Errorf("User-Agent = %q (DefaultUserAgent %q), want %q", ua, controlapi.DefaultUserAgent, want)
	}
}
