package main

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/holdfast-dev/holdfast/holdfasttest"
	"github.com/holdfast-dev/holdfast/transport"
)

// mustRun runs holdfast args in-process and fails t unless it exits 0
// with nothing on stderr; it returns stdout.
func mustRun(t *testing.T, args ...string) string {
	t.Helper()
	code, out, errOut := runCapture(args...)
	if code != exitOK || errOut != "" {
		t.Fatalf("%q: exit %d, stderr:\n%s", args, code, errOut)
	}
	return out
}

// mustFail runs holdfast args and fails t unless it exits with code, with
// want on stderr and nothing on stdout.
func mustFail(t *testing.T, code int, want string, args ...string) string {
	t.Helper()
	got, out, errOut := runCapture(args...)
	if got != code {
		t.Errorf("%q: exit %d, want %d; stderr:\n%s", args, got, code, errOut)
	}
	if !strings.Contains(errOut, want) {
		t.Errorf("%q: stderr does not say %q:\n%s", args, want, errOut)
	}
	if out != "" {
		t.Errorf("%q: stdout %q, want nothing", args, out)
	}
	return errOut
}

// postAck reports client id's ack (or nack, with errMsg) of revision rev
// of ns to srv, as an SDK client does, and the client connected (live),
// as a relay of its own reports it.
func postAck(t *testing.T, srv *holdfasttest.Server, id, ns string, rev int64, errMsg string) {
	t.Helper()
	presence := fmt.Sprintf(`{"relay_id":"relay-of-%s","epoch":"e","seq":1,"full":true,"every_ms":600000,"live":[%q]}`, id, id)
	tr := &http.Transport{}
	defer tr.CloseIdleConnections()
	resp, err := (&http.Client{Transport: tr, Timeout: 10 * time.Second}).Post(srv.URL()+transport.PathPresence, "application/json", strings.NewReader(presence))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNoContent {
		t.Fatalf("presence report: %s", resp.Status)
	}
	a := transport.Ack{ClientID: id, Namespace: ns, Revision: rev, Status: transport.AckApplied}
	if errMsg != "" {
		a.Status, a.Error = transport.AckRejected, errMsg
	}
	report(t, srv, a)
}

func revisionOf(t *testing.T, out string) int64 {
	t.Helper()
	var r struct {
		Revision int64 `json:"revision"`
	}
	if err := json.Unmarshal([]byte(out), &r); err != nil || r.Revision == 0 {
		t.Fatalf("not a revision reply: %q (%v)", out, err)
	}
	return r.Revision
}

// TestOperatorCommands: every operator command over real HTTP against
// the reference server, text and JSON.
func TestOperatorCommands(t *testing.T) {
	srv := holdfasttest.NewServer(t)
	s := []string{"-server", srv.URL()}
	cmd := func(name string, args ...string) []string {
		return append(append(strings.Fields(name), s...), args...)
	}

	// publish: JSON values are JSON, others strings.
	out := mustRun(t, cmd("publish", "-actor", "alice", "-reason", "INC-1: first", "payments.prod",
		"retry-timeout-ms=200", "mode=fast", "enabled=true", `limits={"max":3}`, `quoted="5"`, "empty=")...)
	if out != "published payments.prod: revision 1\n" {
		t.Errorf("publish printed %q", out)
	}
	v, err := srv.ValuesAt("payments.prod", 1)
	if err != nil {
		t.Fatal(err)
	}
	for k, want := range map[string]string{"retry-timeout-ms": `200`, "mode": `"fast"`, "enabled": `true`, "limits": `{"max":3}`, "quoted": `"5"`, "empty": `""`} {
		if got := string(v.Values[k]); got != want {
			t.Errorf("%s = %s, want %s", k, got, want)
		}
	}
	r2 := revisionOf(t, mustRun(t, cmd("publish", "-o", "json", "-actor", "bob", "-if-revision", "1", "payments.prod", "retry-timeout-ms=50")...))
	rb := revisionOf(t, mustRun(t, cmd("rollback", "-o", "json", "-to", "1", "-actor", "carol", "-reason", "undo", "payments.prod")...))

	// history, newest first, with kinds, actors, reasons and keys.
	out = mustRun(t, cmd("history", "payments.prod")...)
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 4 || !strings.HasPrefix(lines[0], "REVISION") {
		t.Fatalf("history:\n%s", out)
	}
	for i, want := range [][]string{
		{strconv.FormatInt(rb, 10), "rollback to 1", "carol", "undo", "put retry-timeout-ms"},
		{strconv.FormatInt(r2, 10), "publish", "bob", "-", "put retry-timeout-ms"},
		{"1", "publish", "alice", "INC-1: first", "put empty, enabled, limits, mode, quoted (+1)"},
	} {
		for _, w := range want {
			if !strings.Contains(lines[i+1], w) {
				t.Errorf("history line %d does not say %q: %q", i+1, w, lines[i+1])
			}
		}
	}
	if out := mustRun(t, cmd("history", "-limit", "1", "-before", strconv.FormatInt(rb, 10), "payments.prod")...); strings.Count(out, "\n") != 2 || !strings.Contains(out, "bob") {
		t.Errorf("history -limit 1 -before %d:\n%s", rb, out)
	}

	// get: now, at a revision, at a time, one key.
	out = mustRun(t, cmd("get", "payments.prod")...)
	if !strings.HasPrefix(out, fmt.Sprintf("payments.prod at revision %d, committed ", rb)) || !strings.Contains(out, "retry-timeout-ms  200\n") || !strings.Contains(out, `mode              "fast"`) {
		t.Errorf("get:\n%s", out)
	}
	if out := mustRun(t, cmd("get", "-revision", strconv.FormatInt(r2, 10), "payments.prod", "retry-timeout-ms")...); out != "50\n" {
		t.Errorf("get -revision %d KEY = %q", r2, out)
	}
	h, err := srv.History("payments.prod", 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	at2 := h.Revisions[1].CommittedAt.Format(time.RFC3339Nano) // r2's commit time: r2 was live then
	if out := mustRun(t, cmd("get", "-at", at2, "payments.prod", "retry-timeout-ms")...); out != "50\n" {
		t.Errorf("get -at %s KEY = %q", at2, out)
	}
	if out := mustRun(t, cmd("get", "-o", "json", "payments.prod", "limits")...); out != `{"max":3}`+"\n" {
		t.Errorf("get -o json KEY = %q", out)
	}
	mustFail(t, exitFail, `payments.prod has no key "absent"`, cmd("get", "payments.prod", "absent")...)

	// diff: the lines a reviewer of the change reads.
	mustRun(t, cmd("publish", "-f", writeFile(t, `{"puts":{"new":1},"deletes":["mode"]}`), "payments.prod")...)
	out = mustRun(t, cmd("diff", "payments.prod", "1", strconv.FormatInt(srv.Head(), 10))...)
	want := fmt.Sprintf("payments.prod: revision 1 → %d\nmode: \"fast\" → (absent)\nnew: (absent) → 1\n", srv.Head())
	if out != want {
		t.Errorf("diff:\n%s\nwant:\n%s", out, want)
	}
	if out := mustRun(t, cmd("diff", "payments.prod", "1", strconv.FormatInt(rb, 10))...); !strings.HasSuffix(out, "no changes\n") {
		t.Errorf("diff of the same content:\n%s", out)
	}

	// status and clients, with a client's ack and another's nack.
	head := srv.Head()
	postAck(t, srv, "svc-1", "payments.prod", head, "")
	postAck(t, srv, "svc-2", "payments.prod", head, "schema: bad\tvalue")
	mustRun(t, cmd("publish", "other.ns", "x=1")...)
	postAck(t, srv, "svc-3", "other.ns", srv.Head(), "")
	out = mustRun(t, cmd("status", "payments.prod")...)
	for _, w := range []string{"namespace     payments.prod\n", fmt.Sprintf("revision      %d\n", head), "clients       2\n", "acked         1\n", "nacked        1\n"} {
		if !strings.Contains(out, w) {
			t.Errorf("status does not say %q:\n%s", w, out)
		}
	}
	out = mustRun(t, cmd("clients", "payments.prod")...)
	if !strings.Contains(out, "svc-1") || !strings.Contains(out, "svc-2") || strings.Contains(out, "svc-3") || !strings.Contains(out, "schema: bad?value") {
		t.Errorf("clients payments.prod:\n%s", out)
	}
	if out := mustRun(t, cmd("clients")...); !strings.Contains(out, "svc-3") || strings.Count(out, "\n") != 4 {
		t.Errorf("clients:\n%s", out)
	}
	var filtered struct {
		Head    int64             `json:"head"`
		Clients []json.RawMessage `json:"clients"`
	}
	if err := json.Unmarshal([]byte(mustRun(t, cmd("clients", "-o", "json", "payments.prod")...)), &filtered); err != nil || len(filtered.Clients) != 2 || filtered.Head != srv.Head() {
		t.Errorf("clients -o json payments.prod: %+v, %v", filtered, err)
	}
}

func writeFile(t *testing.T, content string) string {
	t.Helper()
	name := filepath.Join(t.TempDir(), "change.json")
	if err := os.WriteFile(name, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return name
}

// TestOutputJSON: -o json prints exactly what the API answered.
func TestOutputJSON(t *testing.T) {
	srv := holdfasttest.NewServer(t)
	r1 := revisionOf(t, mustRun(t, "publish", "-server", srv.URL(), "-o", "json", "-actor", "alice", "ns.a", "a=1", "b=x"))
	if _, err := srv.Publish("ns.a", map[string]any{"a": 2}, "b"); err != nil {
		t.Fatal(err)
	}
	postAck(t, srv, "c1", "ns.a", srv.Head(), "")
	base := srv.URL() + "/control"
	at := time.Now().UTC().Format(time.RFC3339Nano)
	for _, tc := range []struct {
		args []string
		path string
	}{
		{[]string{"history", "ns.a"}, "/namespaces/ns.a/history"},
		{[]string{"history", "-limit", "1", "ns.a"}, "/namespaces/ns.a/history?limit=1"},
		{[]string{"get", "-revision", strconv.FormatInt(r1, 10), "ns.a"}, "/namespaces/ns.a/values?revision=" + strconv.FormatInt(r1, 10)},
		{[]string{"get", "-at", at, "ns.a"}, "/namespaces/ns.a/values?at=" + at},
		{[]string{"get", "ns.a"}, "/namespaces/ns.a/values?revision=" + strconv.FormatInt(srv.Head(), 10)},
		{[]string{"diff", "ns.a", strconv.FormatInt(r1, 10), strconv.FormatInt(srv.Head(), 10)}, fmt.Sprintf("/namespaces/ns.a/diff?from=%d&to=%d", r1, srv.Head())},
		{[]string{"status", "ns.a"}, "/namespaces/ns.a/status"},
		{[]string{"clients"}, "/clients"},
	} {
		args := append([]string{tc.args[0], "-server", srv.URL(), "-o", "json"}, tc.args[1:]...)
		out := mustRun(t, args...)
		code, body, _ := get(t, base+tc.path)
		if code != http.StatusOK {
			t.Fatalf("GET %s: %d %s", tc.path, code, body)
		}
		if out != body {
			t.Errorf("%q printed\n%s\nthe API answered\n%s", args, out, body)
		}
	}
}

// TestServerErrors: an error the server returns is exit status 1 with its
// reason on stderr, nothing on stdout.
func TestServerErrors(t *testing.T) {
	srv := holdfasttest.NewServer(t)
	s := srv.URL()
	r1, err := srv.Publish("ns.a", map[string]any{"a": 1})
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.SetSchema("ns.a", []byte(`{"type":"object","properties":{"a":{"type":"integer"}}}`)); err != nil {
		t.Fatal(err)
	}
	future := strconv.FormatInt(srv.Head()+100, 10)
	for _, tc := range []struct {
		want string
		args []string
	}{
		{"not_found (HTTP 404)", []string{"history", "-server", s, "no.such"}},
		{"not_found (HTTP 404)", []string{"get", "-server", s, "no.such"}},
		{"not_found (HTTP 404)", []string{"get", "-server", s, "-revision", "1", "no.such"}},
		{"not_found (HTTP 404)", []string{"diff", "-server", s, "no.such", "1", "1"}},
		{"not_found (HTTP 404)", []string{"status", "-server", s, "no.such"}},
		{"not_found (HTTP 404)", []string{"rollback", "-server", s, "-to", "1", "no.such"}},
		{"above the head", []string{"get", "-server", s, "-revision", future, "ns.a"}},
		{"above the head", []string{"diff", "-server", s, "ns.a", "1", future}},
		{"in the future", []string{"get", "-server", s, "-at", time.Now().Add(time.Hour).UTC().Format(time.RFC3339), "ns.a"}},
		{"no revision committed at or before 2020-01-01T00:00:00Z", []string{"get", "-server", s, "-at", "2020-01-01T00:00:00Z", "ns.a"}},
		{`is at revision 1, not 0`, []string{"publish", "-server", s, "-if-revision", "0", "ns.a", "a=2"}},
		{"conflict (HTTP 409)", []string{"publish", "-server", s, "-if-revision", "7", "ns.a", "a=2"}},
		{"schema_violation (HTTP 422)", []string{"publish", "-server", s, "ns.a", "a=text"}},
		{"bad_request (HTTP 400)", []string{"publish", "-server", s, "ns.a", "BAD KEY=1"}},
		{"bad_request (HTTP 400)", []string{"history", "-server", s, "-limit", "5000", "ns.a"}},
		{"bad_request (HTTP 400)", []string{"get", "-server", s, "Not A Namespace"}},
		{"connection refused", []string{"history", "-server", "http://127.0.0.1:1", "ns.a"}},
	} {
		errOut := mustFail(t, exitFail, tc.want, tc.args...)
		if strings.Contains(errOut, "usage:") {
			t.Errorf("%q: a server's error printed the usage:\n%s", tc.args, errOut)
		}
	}
	// Nothing changed.
	if h := srv.Head(); h != r1 {
		t.Errorf("head %d after refused publishes, want %d", h, r1)
	}
}

// TestOperatorUsageErrors: bad command lines exit 2 before any request.
func TestOperatorUsageErrors(t *testing.T) {
	var requests int
	var mu sync.Mutex
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		requests++
		mu.Unlock()
		http.Error(w, "no", http.StatusTeapot)
	}))
	defer hs.Close()
	s := hs.URL
	bare := writeFile(t, `{"retry-timeout-ms": 50}`)
	for _, tc := range []struct {
		want string
		args []string
	}{
		{"-server is required", []string{"publish", "ns.a", "a=1"}},
		{"-server or -etcd is required", []string{"history", "ns.a"}},
		{"-etcd: publish is the holdfast server's alone (it is the store's only writer", []string{"publish", "-etcd", "127.0.0.1:2379", "ns.a", "a=1"}},
		{"-server is required", []string{"status", "ns.a"}},
		{"-server and -etcd exclude each other", []string{"history", "-server", s, "-etcd", "127.0.0.1:2379", "ns.a"}},
		{"-token, -token-file, -ca, -cert and -key are for -server, not -etcd", []string{"history", "-etcd", "127.0.0.1:2379", "-token", "t", "ns.a"}},
		{"-etcd: status is the holdfast server's alone", []string{"status", "-etcd", "127.0.0.1:2379", "ns.a"}},
		{"-etcd: clients is the holdfast server's alone", []string{"clients", "-etcd", "127.0.0.1:2379"}},
		{"-etcd: rollout start is the holdfast server's alone", []string{"rollout", "start", "-etcd", "127.0.0.1:2379", "-stages", "1,100", "ns.a", "a=1"}},
		{"-etcd: rollout abort is the holdfast server's alone", []string{"rollout", "abort", "-etcd", "127.0.0.1:2379", "-id", "x", "ns.a"}},
		{`etcd member "nohost" is not HOST:PORT`, []string{"get", "-etcd", "nohost", "ns.a"}},
		{"cannot be mixed", []string{"get", "-etcd", "http://127.0.0.1:2379", "ns.a"}},
		{"scheme must be http or https", []string{"get", "-server", "ftp://x", "ns.a"}},
		{"has no host", []string{"get", "-server", "http://", "ns.a"}},
		{`invalid value "fancy" for flag -o: must be text or json`, []string{"get", "-server", s, "-o", "fancy", "ns.a"}},
		{"missing arguments (want NAMESPACE [KEY=VALUE...])", []string{"publish", "-server", s}},
		{"nothing to publish", []string{"publish", "-server", s, "ns.a"}},
		{`"a" is not KEY=VALUE`, []string{"publish", "-server", s, "ns.a", "a"}},
		{`"=1" is not KEY=VALUE`, []string{"publish", "-server", s, "ns.a", "=1"}},
		{`key "a" given twice`, []string{"publish", "-server", s, "ns.a", "a=1", "a=2"}},
		{"-f and KEY=VALUE arguments exclude each other", []string{"publish", "-server", s, "-f", bare, "ns.a", "a=1"}},
		{`unknown field "retry-timeout-ms"`, []string{"publish", "-server", s, "-f", bare, "ns.a"}},
		{"no puts and no deletes", []string{"publish", "-server", s, "-f", writeFile(t, `{}`), "ns.a"}},
		{"more than one JSON value", []string{"publish", "-server", s, "-f", writeFile(t, `{"puts":{"a":1}} {}`), "ns.a"}},
		{"no such file", []string{"publish", "-server", s, "-f", filepath.Join(t.TempDir(), "absent.json"), "ns.a"}},
		{`invalid value "-1" for flag -if-revision: want an integer >= 0`, []string{"publish", "-server", s, "-if-revision", "-1", "ns.a", "a=1"}},
		{"flag -actor after the arguments", []string{"publish", "-server", s, "ns.a", "a=1", "-actor", "x"}},
		{"-to is required", []string{"rollback", "-server", s, "ns.a"}},
		{`invalid value "last" for flag -to`, []string{"rollback", "-server", s, "-to", "last", "ns.a"}},
		{"-limit must not be negative", []string{"history", "-server", s, "-limit", "-1", "ns.a"}},
		{"-before must be a revision >= 1", []string{"history", "-server", s, "-before", "0", "ns.a"}},
		{"-revision and -at exclude each other", []string{"get", "-server", s, "-revision", "1", "-at", "2026-12-01T14:03:00Z", "ns.a"}},
		{`invalid value "14:03" for flag -at: want an RFC 3339 time`, []string{"get", "-server", s, "-at", "14:03", "ns.a"}},
		{`invalid value "2026-12-01 14:03" for flag -at`, []string{"get", "-server", s, "-at", "2026-12-01 14:03", "ns.a"}},
		{`invalid value "x" for flag -revision`, []string{"get", "-server", s, "-revision", "x", "ns.a"}},
		{"too many arguments", []string{"get", "-server", s, "ns.a", "k", "extra"}},
		{`FROM "x" is not a revision`, []string{"diff", "-server", s, "ns.a", "x", "2"}},
		{`TO "-2" is not a revision`, []string{"diff", "-server", s, "--", "ns.a", "1", "-2"}},
		{"missing arguments (want NAMESPACE FROM TO)", []string{"diff", "-server", s, "ns.a", "1"}},
		{"invalid namespace", []string{"clients", "-server", s, "Bad NS"}},
		{"-stages is required", []string{"rollout", "start", "-server", s, "ns.a", "a=1"}},
		{`invalid value "1,ten" for flag -stages: "ten" is not a percentage`, []string{"rollout", "start", "-server", s, "-stages", "1,ten", "ns.a", "a=1"}},
		{`invalid value "later" for flag -on-timeout: must be revert or hold`, []string{"rollout", "start", "-server", s, "-stages", "100", "-on-timeout", "later", "ns.a", "a=1"}},
		{"-max-nacks must not be negative", []string{"rollout", "start", "-server", s, "-stages", "100", "-max-nacks", "-1", "ns.a", "a=1"}},
		{"must not be negative", []string{"rollout", "start", "-server", s, "-stages", "100", "-bake", "-1s", "ns.a", "a=1"}},
		{"nothing to publish", []string{"rollout", "start", "-server", s, "-stages", "100", "ns.a"}},
		{`-server "127.0.0.1:18080" has no scheme: write http://127.0.0.1:18080 (or https://127.0.0.1:18080 for a TLS listener)`, []string{"status", "-server", "127.0.0.1:18080", "ns.a"}},
		{`-server "origin:8080" has no scheme: write http://origin:8080`, []string{"rollout", "abort", "-server", "origin:8080", "ns.a"}},
		{`-server "origin" has no scheme: write http://origin`, []string{"get", "-server", "origin", "ns.a"}},
		{"holdfast rollout: missing command", []string{"rollout"}},
		{`holdfast rollout: unknown command "frob"`, []string{"rollout", "frob"}},
		{`unknown command "rollout frob"`, []string{"help", "rollout", "frob"}},
	} {
		mustFail(t, exitUsage, tc.want, tc.args...)
	}
	if requests != 0 {
		t.Errorf("%d requests reached the server; a usage error sends none", requests)
	}
	// The group's help lists its commands.
	if out := mustRun(t, "help", "rollout"); !strings.Contains(out, "rollout promote") || !strings.Contains(out, "rollout start") {
		t.Errorf("help rollout:\n%s", out)
	}
}

// TestToken: the token goes in Authorization: Bearer, from -token or
// $HOLDFAST_TOKEN, and never into output or errors.
func TestToken(t *testing.T) {
	const secret = "s3cret-token-0123456789"
	var mu sync.Mutex
	var seen []string
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		seen = append(seen, r.Header.Get("Authorization"))
		mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		if r.Header.Get("Authorization") != "Bearer "+secret {
			w.WriteHeader(http.StatusUnauthorized)
			fmt.Fprintln(w, `{"error":"unauthorized","message":"a control token is required"}`)
			return
		}
		if r.URL.Path == "/control/namespaces/fraud.prod/history" {
			w.WriteHeader(http.StatusForbidden)
			fmt.Fprintln(w, `{"error":"forbidden","message":"token \"deploy-bot\" has no control scope over \"fraud.prod\""}`)
			return
		}
		fmt.Fprintln(w, `{"ns":"payments.prod","revisions":[]}`)
	}))
	defer hs.Close()

	out := mustRun(t, "history", "-server", hs.URL, "-token", secret, "payments.prod")
	errOut := mustFail(t, exitFail, `forbidden (HTTP 403): token "deploy-bot" has no control scope over "fraud.prod"`, "history", "-server", hs.URL, "-token", secret, "fraud.prod")
	t.Setenv(tokenEnv, secret)
	out += mustRun(t, "history", "-server", hs.URL, "payments.prod")
	t.Setenv(tokenEnv, "")
	errOut += mustFail(t, exitFail, "unauthorized (HTTP 401): a control token is required; no token was sent: give one with -token-file FILE or $"+tokenEnv, "history", "-server", hs.URL, "payments.prod")
	// A token sent and refused is not accepted, not missing: the
	// server's words ("required") are not repeated.
	wrong := mustFail(t, exitFail, "holdfast history: token not accepted (revoked, expired or mistyped): the server answered HTTP 401; check the token of -token-file", "history", "-server", hs.URL, "-token", "not-"+secret, "payments.prod")
	if strings.Contains(wrong, "required") {
		t.Errorf("a refused token's error:\n%s", wrong)
	}
	errOut += wrong
	errOut += mustFail(t, exitFail, "connection refused", "history", "-server", "http://127.0.0.1:1", "-token", secret, "payments.prod")
	if strings.Contains(out+errOut, secret) {
		t.Errorf("the token shows in the output:\n%s\n%s", out, errOut)
	}
	mu.Lock()
	defer mu.Unlock()
	want := []string{"Bearer " + secret, "Bearer " + secret, "Bearer " + secret, "", "Bearer not-" + secret}
	if strings.Join(seen, "|") != strings.Join(want, "|") {
		t.Errorf("Authorization headers %q, want %q", seen, want)
	}
}

// TestNotTheAPIsError: a reply that is not the API's error form (a
// proxy's page) is still exit status 1, with its status and text.
func TestNotTheAPIsError(t *testing.T) {
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "upstream went away", http.StatusBadGateway)
	}))
	defer hs.Close()
	mustFail(t, exitFail, "bad_gateway (HTTP 502): upstream went away", "status", "-server", hs.URL, "ns.a")
}

// TestAfterCompaction: after the server compacts, history still tells who
// changed which keys, while values and diffs of compacted revisions are
// 410 with the compaction point (exit status 1).
func TestAfterCompaction(t *testing.T) {
	srv := holdfasttest.NewServer(t)
	u := srv.URL()
	r1 := revisionOf(t, mustRun(t, "publish", "-server", u, "-o", "json", "-actor", "alice", "-reason", "first", "ns.a", "a=1"))
	r2 := revisionOf(t, mustRun(t, "publish", "-server", u, "-o", "json", "-actor", "bob", "ns.a", "a=2"))
	r3 := revisionOf(t, mustRun(t, "publish", "-server", u, "-o", "json", "-actor", "carol", "ns.a", "a=3"))
	if _, err := srv.Compact(r3); err != nil {
		t.Fatal(err)
	}
	out := mustRun(t, "history", "-server", u, "ns.a")
	for _, w := range []string{"alice", "first", "bob", "carol"} {
		if !strings.Contains(out, w) {
			t.Errorf("history after compaction does not say %q:\n%s", w, out)
		}
	}
	want := fmt.Sprintf("transport: cursor compacted (compact revision %d)", r3)
	mustFail(t, exitFail, "compacted (HTTP 410): "+want, "get", "-server", u, "-revision", strconv.FormatInt(r1, 10), "ns.a")
	mustFail(t, exitFail, "compacted (HTTP 410): from: "+want, "diff", "-server", u, "ns.a", strconv.FormatInt(r2, 10), strconv.FormatInt(r3, 10))
	if out := mustRun(t, "get", "-server", u, "-revision", strconv.FormatInt(r3, 10), "ns.a", "a"); out != "3\n" {
		t.Errorf("get at the compaction point = %q", out)
	}
}
