// Package controltest is the control API's conformance suite (as
// transport/transporttest is the sources'): every route's behaviour, its
// error codes and its answers to bad input, run against holdfast server
// (the server module's tests) and the reference server (internal/
// fakeserver's), which both mount package controlplane over their own
// store. A server plugs in with a Server: its URL, and the secrets of the
// tokens it requires, if any.
package controltest

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"reflect"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/holdfast-dev/holdfast/transport"
)

// Server is a server under test.
type Server struct {
	URL    string       // e.g. "http://127.0.0.1:41234"
	Client *http.Client // nil: http.DefaultClient
	// Tokens, when set, are the secrets of tokens the server requires:
	// the access cases run, and every other request carries Control.
	// Without them the server is open.
	Tokens *Tokens
	// OverdueReviews, when set, is the server's count of the emergency
	// publishes whose retro review is overdue (the
	// holdfast_changes_overdue_review gauge's reading): the emergency
	// case checks it follows the retro review.
	OverdueReviews func(ctx context.Context) (int, error)
}

// Tokens are secrets of tokens of the scopes the access cases need.
type Tokens struct {
	Control string // control of every namespace (the pattern "*")
	Scoped  string // control of the namespaces "scoped.*" only
	Data    string // data scope only, no control
	Admin   string // admin scope (token management), no control; "": no token store
	// ControlName is the name of Control's token; Reviewer a second token
	// with control of every namespace, named ReviewerName (the change
	// workflow's cases need both, and Admin, to set policies).
	ControlName            string
	Reviewer, ReviewerName string
}

// Run runs the suite against the server start returns (one for the whole
// suite: each case writes namespaces of its own).
func Run(t *testing.T, start func(t *testing.T) *Server) {
	srv := start(t)
	c := &client{t: t, srv: srv, http: srv.Client}
	if c.http == nil {
		c.http = http.DefaultClient
	}
	if srv.Tokens != nil {
		c.token = srv.Tokens.Control
	}
	for _, tc := range []struct {
		name string
		run  func(t *testing.T, c *client)
	}{
		{"Routing", testRouting},
		{"Publish", testPublish},
		{"PublishBadInput", testPublishBadInput},
		{"Conflict", testConflict},
		{"Rollback", testRollback},
		{"Schema", testSchema},
		{"History", testHistory},
		{"ValuesAndDiff", testValuesAndDiff},
		{"QueryRules", testQueryRules},
		{"Status", testStatus},
		{"Clients", testClients},
		{"Presence", testPresence},
		{"Namespaces", testNamespaces},
		{"Rollouts", testRollouts},
		{"AbortByPublish", testAbortByPublish},
		{"RolloutBadInput", testRolloutBadInput},
		{"Tokens", testTokens},
		{"Access", testAccess},
		{"Compact", testCompact},
		{"AuditFields", testAuditFields},
		{"SchemaBeforePublish", testSchemaBeforePublish},
		{"RolloutNeedsBase", testRolloutNeedsBase},
		{"RolloutSchemaAtStart", testRolloutSchemaAtStart},
		{"RollbackCompacted", testRollbackCompacted},
		{"Lints", testLints},
		{"Policies", testPolicies},
		{"ChangeFlow", testChangeFlow},
		{"ChangeStale", testChangeStale},
		{"ChangeStates", testChangeStates},
		{"ChangeAtomic", testChangeAtomic},
		{"ChangeStaged", testChangeStaged},
		{"ChangeSchemaBlock", testChangeSchemaBlock},
		{"ChangeSchema", testChangeSchema},
		{"Emergency", testEmergency},
		{"ChangeLint", testChangeLint},
	} {
		t.Run(tc.name, func(t *testing.T) { tc.run(t, c.on(t)) })
	}
}

// client sends the suite's requests.
type client struct {
	t     *testing.T
	srv   *Server
	http  *http.Client
	token string
}

var namespaces atomic.Int64

// on returns c for test t.
func (c *client) on(t *testing.T) *client {
	cc := *c
	cc.t = t
	return &cc
}

// as returns c with another token ("": none).
func (c *client) as(token string) *client {
	cc := *c
	cc.token = token
	return &cc
}

// ns returns a namespace no other case writes.
func (c *client) ns(prefix string) string {
	return fmt.Sprintf("%s.%d-%d", prefix, time.Now().UnixNano()%1e9, namespaces.Add(1))
}

// reply is a request's answer.
type reply struct {
	status int
	header http.Header
	body   []byte
}

// do sends a request: body is sent as it is when a string or []byte, as
// JSON otherwise (nil: none).
func (c *client) do(method, path string, body any) reply {
	c.t.Helper()
	var r io.Reader
	switch b := body.(type) {
	case nil:
	case string:
		r = strings.NewReader(b)
	case []byte:
		r = bytes.NewReader(b)
	default:
		data, err := json.Marshal(b)
		if err != nil {
			c.t.Fatal(err)
		}
		r = bytes.NewReader(data)
	}
	req, err := http.NewRequest(method, c.srv.URL+path, r)
	if err != nil {
		c.t.Fatal(err)
	}
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		c.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		c.t.Fatalf("%s %s: reading the reply: %v", method, path, err)
	}
	return reply{status: resp.StatusCode, header: resp.Header, body: data}
}

// ok sends a request that must answer status, and decodes its reply into
// out (nil: not decoded).
func (c *client) ok(status int, method, path string, body, out any) reply {
	c.t.Helper()
	r := c.do(method, path, body)
	if r.status != status {
		c.t.Fatalf("%s %s: %d %s; want %d", method, path, r.status, r.body, status)
	}
	if out != nil {
		reflect.ValueOf(out).Elem().SetZero() // a map it held would be merged into
		if err := json.Unmarshal(r.body, out); err != nil {
			c.t.Fatalf("%s %s: reply %s: %v", method, path, r.body, err)
		}
	}
	return r
}

// fails sends a request that must be refused with status and code, and
// returns the error body.
func (c *client) fails(status int, code, method, path string, body any) transport.ErrorBody {
	c.t.Helper()
	r := c.do(method, path, body)
	var eb transport.ErrorBody
	if err := json.Unmarshal(r.body, &eb); err != nil {
		c.t.Errorf("%s %s: %d, error body %q does not decode: %v", method, path, r.status, r.body, err)
		return eb
	}
	if r.status != status || eb.Error != code || eb.Message == "" {
		c.t.Errorf("%s %s: %d %s; want %d %q with a message", method, path, r.status, r.body, status, code)
	}
	if ct := r.header.Get("Content-Type"); !strings.HasPrefix(ct, "application/json") {
		c.t.Errorf("%s %s: error with Content-Type %q, want JSON", method, path, ct)
	}
	return eb
}

// publish publishes puts to ns and returns the revision.
func (c *client) publish(ns string, puts map[string]any) int64 {
	c.t.Helper()
	var rr struct{ Revision int64 }
	c.ok(http.StatusOK, "POST", "/control/namespaces/"+ns+"/publish", map[string]any{"puts": puts}, &rr)
	if rr.Revision <= 0 {
		c.t.Fatalf("publish to %s: revision %d", ns, rr.Revision)
	}
	return rr.Revision
}

func nsPath(ns, rest string) string { return "/control/namespaces/" + ns + rest }
