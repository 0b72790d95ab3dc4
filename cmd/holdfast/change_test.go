package main

import (
	"context"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/holdfast-dev/holdfast/config"
	"github.com/holdfast-dev/holdfast/controlapi"
	"github.com/holdfast-dev/holdfast/internal/testutil"
)

// changeEnv is a holdfast server process on its embedded store with
// tokens: the bootstrap admin's, and alice, bob and oncall (control of
// every namespace), each in a file for the CLI.
type changeEnv struct {
	t     *testing.T
	srv   *relayProc
	files map[string]string // identity → its token file
	admin string            // the bootstrap admin's secret
}

func startChangeEnv(t *testing.T, store ...string) *changeEnv {
	t.Helper()
	bin := buildBinary(t)
	dir := t.TempDir()
	adminFile := filepath.Join(dir, "admin-token")
	if len(store) == 0 {
		store = []string{"-data-dir", filepath.Join(dir, "data")}
	}
	srv := startServerProc(t, bin, append(store, "-bootstrap-token-file", adminFile)...)
	srv.logs.waitFor(t, "server: created the store's first admin token", srv.copied)
	secret, err := os.ReadFile(adminFile)
	if err != nil {
		t.Fatal(err)
	}
	e := &changeEnv{t: t, srv: srv, files: map[string]string{"admin": adminFile}, admin: strings.TrimSpace(string(secret))}
	for _, name := range []string{"alice", "bob", "oncall"} {
		code, stdout, stderr := cli(t, "token", "create", "-server", srv.url(), "-token-file", adminFile, "-control", "*", "-data", "*", name)
		if code != exitOK {
			t.Fatalf("token create %s: exit %d: %s", name, code, stderr)
		}
		e.files[name] = writeSecret(t, dir, name+"-token", strings.TrimSpace(stdout))
	}
	return e
}

// as runs a command as identity who against the server: its exit status,
// stdout and stderr. args are the command's words, then its flags and
// arguments.
func (e *changeEnv) as(who string, words int, args ...string) (int, string, string) {
	e.t.Helper()
	full := append(append([]string{}, args[:words]...), "-server", e.srv.url(), "-token-file", e.files[who])
	return cli(e.t, append(full, args[words:]...)...)
}

// ok runs a command that must succeed and returns its stdout.
func (e *changeEnv) ok(who string, words int, args ...string) string {
	e.t.Helper()
	code, stdout, stderr := e.as(who, words, args...)
	if code != exitOK {
		e.t.Fatalf("%s as %s: exit %d: %s", strings.Join(args, " "), who, code, stderr)
	}
	return stdout
}

// fails runs a command that must fail with the API's code in its stderr.
func (e *changeEnv) fails(code, who string, words int, args ...string) string {
	e.t.Helper()
	status, _, stderr := e.as(who, words, args...)
	if status != exitFail || !strings.Contains(stderr, code) {
		e.t.Fatalf("%s as %s: exit %d: %s; want a failure %s", strings.Join(args, " "), who, status, stderr, code)
	}
	return stderr
}

// change runs a change command printing a change (-o json) and decodes it.
func (e *changeEnv) change(who string, args ...string) controlapi.Change {
	e.t.Helper()
	var ch controlapi.Change
	out := e.ok(who, 2, append([]string{args[0], args[1], "-o", "json"}, args[2:]...)...)
	if err := json.Unmarshal([]byte(out), &ch); err != nil {
		e.t.Fatalf("%v: %v: %s", args, err, out)
	}
	return ch
}

// client is a control API client as identity who.
func (e *changeEnv) client(who string) *controlapi.Client {
	e.t.Helper()
	data, err := os.ReadFile(e.files[who])
	if err != nil {
		e.t.Fatal(err)
	}
	c, err := controlapi.NewClient(e.srv.url(), controlapi.WithToken(strings.TrimSpace(string(data))))
	if err != nil {
		e.t.Fatal(err)
	}
	return c
}

func (e *changeEnv) revision(ns string) int64 {
	e.t.Helper()
	st, err := e.client("alice").Status(context.Background(), ns)
	if err != nil {
		e.t.Fatalf("status of %s: %v", ns, err)
	}
	return st.Revision
}

// approved proposes puts to ns as alice, bob approves: its id.
func (e *changeEnv) approved(ns string, kv ...string) string {
	e.t.Helper()
	ch := e.change("alice", append([]string{"change", "propose", "-reason", "tuning", ns}, kv...)...)
	e.change("bob", "change", "approve", ch.ID)
	return ch.ID
}

// TestChangeWorkflowAcrossProcesses: holdfast server on its embedded
// store, the CLI as three identities: a direct publish under a policy is
// refused; a change is proposed, its author cannot approve it, a second
// identity does, it publishes; a rebase voids an approval; a stale base
// cannot publish; a change of three namespaces commits all or nothing at
// one revision, which an SDK client sees; an emergency publish is audited
// as such and its retro review shows overdue in the API, the CLI and the
// metric; a change reaching clients below min_sdk_version is blocked with
// the count; a kill -9 between approval and publish loses nothing.
func TestChangeWorkflowAcrossProcesses(t *testing.T) {
	e := startChangeEnv(t)
	ctx := context.Background()
	alice := e.client("alice")
	for _, ns := range []string{"payments.prod", "payments.a", "payments.b", "payments.c", "sdk.prod"} {
		if _, err := alice.Publish(ctx, ns, controlapi.PublishRequest{Puts: map[string]json.RawMessage{"retry-ms": json.RawMessage("200")}}); err != nil {
			t.Fatal(err)
		}
	}
	e.ok("admin", 2, "policy", "set", "-namespaces", "payments.*", "-approvals", "1", "-approvers", "bob,sre-*", "-emergency", "oncall", "-retro-review", "2s", "payments")
	out := e.ok("admin", 2, "policy", "get", "payments")
	if !strings.Contains(out, "1 from bob, sre-*") || !strings.Contains(out, "oncall") {
		t.Errorf("policy get:\n%s", out)
	}
	e.fails("no admin scope", "alice", 2, "policy", "set", "-namespaces", "x.*", "-approvers", "alice", "x")

	t.Run("DirectPublishRefused", func(t *testing.T) {
		e.fails("approval_required", "alice", 1, "publish", "payments.prod", "retry-ms=50")
		e.fails("approval_required", "alice", 1, "rollback", "-to", "1", "payments.prod")
	})

	t.Run("ProposeApprovePublish", func(t *testing.T) {
		ch := e.change("alice", "change", "propose", "-reason", "faster retries", "payments.prod", "retry-ms=50")
		if ch.State != controlapi.ChangeOpen || ch.Author != "alice" {
			t.Fatalf("proposed: %+v", ch)
		}
		e.fails("self_approval", "alice", 2, "change", "approve", ch.ID)
		show := e.ok("bob", 2, "change", "show", ch.ID)
		for _, want := range []string{"retry-ms: 200 → 50", "pass  payments.prod schema\n", "payments.prod: 0 live client(s)", "approvals: 0 of 1", "you may: approve"} {
			if !strings.Contains(show, want) {
				t.Errorf("change show lacks %q:\n%s", want, show)
			}
		}
		e.change("bob", "change", "approve", ch.ID)
		out := e.ok("alice", 2, "change", "publish", ch.ID)
		if !strings.Contains(out, "published: revision") {
			t.Fatalf("change publish: %s", out)
		}
		h, err := alice.History(ctx, "payments.prod", controlapi.HistoryOptions{Limit: 1})
		if err != nil || h.Revisions[0].Kind != "change" || h.Revisions[0].Change != ch.ID || h.Revisions[0].Actor != "alice" {
			t.Fatalf("history: %+v %v", h, err)
		}
	})

	t.Run("RebaseVoidsApprovalStaleCannotPublish", func(t *testing.T) {
		x := e.approved("payments.prod", "mode=fast")
		y := e.approved("payments.prod", "retry-ms=60")
		e.ok("alice", 2, "change", "publish", y)
		e.fails("stale_base", "alice", 2, "change", "publish", x)
		rb := e.change("alice", "change", "rebase", x)
		if len(rb.Approvals) != 0 || rb.State != controlapi.ChangeOpen {
			t.Fatalf("rebased: %+v", rb)
		}
		e.fails("approval_required", "alice", 2, "change", "publish", x)
	})

	t.Run("ThreeNamespacesAllOrNothing", func(t *testing.T) {
		sdk, _ := fleetClient(t, []string{e.srv.url()}, config.WithBearerToken(e.admin))
		var nss []*config.Namespace
		for _, n := range []string{"payments.a", "payments.b", "payments.c"} {
			nss = append(nss, openNS(t, sdk, n))
		}
		doc := `{"reason": "move the three together", "namespaces": {
			"payments.a": {"puts": {"retry-ms": 70}}, "payments.b": {"puts": {"retry-ms": 70}}, "payments.c": {"puts": {"retry-ms": 70}, "deletes": ["none"]}}}`
		file := filepath.Join(t.TempDir(), "change.json")
		if err := os.WriteFile(file, []byte(doc), 0o600); err != nil {
			t.Fatal(err)
		}
		ch := e.change("alice", "change", "propose", "-f", file)
		e.change("bob", "change", "approve", ch.ID)
		before := []int64{e.revision("payments.a"), e.revision("payments.b")}
		e.ok("alice", 2, "change", "publish", e.approved("payments.c", "other=1"))
		e.fails("stale_base", "alice", 2, "change", "publish", ch.ID)
		if after := []int64{e.revision("payments.a"), e.revision("payments.b")}; after[0] != before[0] || after[1] != before[1] {
			t.Fatalf("a failed change of three namespaces wrote: %v then %v", before, after)
		}
		e.change("alice", "change", "rebase", ch.ID)
		e.change("bob", "change", "approve", ch.ID)
		r, err := alice.PublishChange(ctx, ch.ID, controlapi.ChangePublishRequest{})
		if err != nil {
			t.Fatal(err)
		}
		wctx, cancel := context.WithTimeout(ctx, waitLimit)
		defer cancel()
		if err := sdk.WaitForRevision(wctx, r.Revision); err != nil {
			t.Fatal(err)
		}
		for _, n := range nss {
			if n.Revision() != r.Revision || r.Revisions[n.Name()] != r.Revision {
				t.Errorf("%s: at %d, reply %+v", n.Name(), n.Revision(), r)
			}
		}
	})

	t.Run("EmergencyAuditedAndOverdue", func(t *testing.T) {
		e.fails("emergency list", "alice", 1, "publish", "-emergency", "-reason", "outage", "payments.prod", "kill=true")
		out := e.ok("oncall", 1, "publish", "-emergency", "-reason", "outage", "payments.prod", "kill=true")
		i := strings.Index(out, "retro review ")
		if i < 0 {
			t.Fatalf("emergency publish: %s", out)
		}
		id := strings.Fields(out[i+len("retro review "):])[0]
		h, err := alice.History(ctx, "payments.prod", controlapi.HistoryOptions{Limit: 1})
		if err != nil || h.Revisions[0].Kind != "emergency" || h.Revisions[0].Actor != "oncall" || h.Revisions[0].Reason != "outage" {
			t.Fatalf("history: %+v %v", h, err)
		}
		testutil.Eventually(t, waitLimit, func() bool {
			ch, err := alice.GetChange(ctx, id)
			return err == nil && ch.RetroReview != nil && ch.RetroReview.Overdue
		}, "the retro review overdue")
		if list := e.ok("alice", 2, "change", "list", "-state", "overdue"); !strings.Contains(list, id) || !strings.Contains(list, "retro review overdue") {
			t.Errorf("change list -state overdue:\n%s", list)
		}
		testutil.Eventually(t, waitLimit, func() bool {
			code, body := request(t, "GET", e.srv.url()+"/metrics", e.admin, "")
			v, ok := metricValue(parseMetrics(t, body), "holdfast_changes_overdue_review", nil)
			return code == http.StatusOK && ok && v >= 1
		}, "holdfast_changes_overdue_review at least 1")
		e.fails("self_approval", "oncall", 2, "change", "approve", id)
		done := e.change("bob", "change", "approve", id)
		if done.RetroReview == nil || done.RetroReview.ApprovedBy != "bob" || done.RetroReview.Overdue {
			t.Errorf("reviewed: %+v", done.RetroReview)
		}
	})

	t.Run("BelowMinSDKBlocked", func(t *testing.T) {
		e.ok("admin", 2, "policy", "set", "-namespaces", "sdk.*", "-approvals", "1", "-approvers", "bob", "-min-sdk-version", "99.0.0", "sdk")
		sdk, _ := fleetClient(t, []string{e.srv.url()}, config.WithBearerToken(e.admin))
		openNS(t, sdk, "sdk.prod")
		testutil.Eventually(t, waitLimit, func() bool {
			cs, err := alice.Clients(ctx)
			if err != nil {
				return false
			}
			for _, c := range cs.Clients {
				if c.Namespace == "sdk.prod" && c.SDKVersion != "" {
					return true
				}
			}
			return false
		}, "the SDK client's report on sdk.prod")
		ch := e.change("alice", "change", "propose", "-reason", "r", "sdk.prod", "retry-ms=10")
		rc := ch.Reach["sdk.prod"]
		if rc.Live != 1 || rc.BelowMin != 1 || len(rc.BySDKVersion) != 1 {
			t.Fatalf("reach: %+v", rc)
		}
		stderr := e.fails("below_min_sdk", "bob", 2, "change", "approve", ch.ID)
		if !strings.Contains(stderr, "reaches 1 client(s) below") {
			t.Errorf("refusal: %s", stderr)
		}
		ok := e.change("alice", "change", "propose", "-reason", "r", "-allow-old-sdk", "the old clients ignore the key", "sdk.prod", "retry-ms=10")
		e.change("bob", "change", "approve", ok.ID)
		e.ok("alice", 2, "change", "publish", ok.ID)
	})

	t.Run("Kill9BetweenApprovalAndPublish", func(t *testing.T) {
		id := e.approved("payments.prod", "retry-ms=80")
		e.srv.kill()
		e.srv.start()
		ch, err := alice.GetChange(ctx, id)
		if err != nil || ch.State != controlapi.ChangeApproved || len(ch.Approvals) != 1 {
			t.Fatalf("after kill -9: %+v %v", ch, err)
		}
		one, err := alice.PublishChange(ctx, id, controlapi.ChangePublishRequest{})
		if err != nil {
			t.Fatal(err)
		}
		two, err := alice.PublishChange(ctx, id, controlapi.ChangePublishRequest{})
		if err != nil || two.Revision != one.Revision {
			t.Fatalf("published twice: %+v, then %+v %v", one, two, err)
		}
		h, err := alice.History(ctx, "payments.prod", controlapi.HistoryOptions{Limit: 3})
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for _, r := range h.Revisions {
			if r.Change == id {
				n++
			}
		}
		if n != 1 || h.Revisions[0].Revision != one.Revision {
			t.Errorf("commits of the change: %d; history %+v", n, h.Revisions)
		}
	})

	t.Run("SchemaThroughChange", func(t *testing.T) {
		if err := alice.PutSchema(ctx, "payments.b", json.RawMessage(`{"type":"object"}`)); err == nil || !strings.Contains(err.Error(), "approval_required") {
			t.Fatalf("a direct schema change: %v", err)
		}
		file := filepath.Join(t.TempDir(), "schema.json")
		if err := os.WriteFile(file, []byte(`{"type":"object","properties":{"retry-ms":{"type":"integer","maximum":100}}}`), 0o600); err != nil {
			t.Fatal(err)
		}
		ch := e.change("alice", "change", "propose", "-reason", "bound retries", "-schema", file, "payments.b")
		show := e.ok("bob", 2, "change", "show", ch.ID)
		if !strings.Contains(show, "+ (schema):") || !strings.Contains(show, "schema (new)") {
			t.Errorf("change show of a schema change:\n%s", show)
		}
		e.change("bob", "change", "approve", ch.ID)
		e.ok("alice", 2, "change", "publish", ch.ID)
		got, err := alice.GetSchema(ctx, "payments.b")
		if err != nil || !strings.Contains(string(got), `"maximum":100`) {
			t.Fatalf("schema after the change: %s %v", got, err)
		}
		if code, _, stderr := e.as("alice", 2, "change", "propose", "-reason", "r", "-schema", file, "-delete-schema", "payments.b"); code != exitUsage || !strings.Contains(stderr, "exclude each other") {
			t.Errorf("-schema with -delete-schema: exit %d: %s", code, stderr)
		}
	})
}

// TestChangeOnCluster: two holdfast server processes over a 3-member
// etcd cluster: a change of three namespaces proposed through one server
// is approved and published through the other, in one transaction at
// one revision; publishing it again through the first commits nothing
// more.
func TestChangeOnCluster(t *testing.T) {
	members := startEtcd(t)
	e := startChangeEnv(t, "-etcd", members)
	other := startServerProc(t, buildBinary(t), "-etcd", members)
	ctx := context.Background()
	alice := e.client("alice")
	for _, ns := range []string{"payments.a", "payments.b", "payments.c"} {
		if _, err := alice.Publish(ctx, ns, controlapi.PublishRequest{Puts: map[string]json.RawMessage{"v": json.RawMessage("1")}}); err != nil {
			t.Fatal(err)
		}
	}
	e.ok("admin", 2, "policy", "set", "-namespaces", "payments.*", "-approvers", "bob", "payments")
	e.fails("approval_required", "alice", 1, "publish", "payments.a", "v=2")
	ch, err := alice.ProposeChange(ctx, controlapi.ChangeRequest{Reason: "together", Namespaces: map[string]controlapi.NamespaceChange{
		"payments.a": {Puts: map[string]json.RawMessage{"v": json.RawMessage("2")}},
		"payments.b": {Puts: map[string]json.RawMessage{"v": json.RawMessage("2")}},
		"payments.c": {Deletes: []string{"v"}},
	}})
	if err != nil {
		t.Fatal(err)
	}
	first := e.srv
	e.srv = other // bob and the publish through the other server
	e.change("bob", "change", "approve", ch.ID)
	out := e.ok("alice", 2, "change", "publish", "-o", "json", ch.ID)
	var pub controlapi.ChangePublishReply
	if err := json.Unmarshal([]byte(out), &pub); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	for _, ns := range []string{"payments.a", "payments.b", "payments.c"} {
		if pub.Revisions[ns] != pub.Revision || e.revision(ns) != pub.Revision {
			t.Errorf("%s: reply %+v, at %d", ns, pub, e.revision(ns))
		}
	}
	e.srv = first
	again, err := alice.PublishChange(ctx, ch.ID, controlapi.ChangePublishRequest{})
	if err != nil || again.Revision != pub.Revision {
		t.Fatalf("published again through the first server: %+v %v", again, err)
	}
	if got := e.revision("payments.a"); got != pub.Revision {
		t.Errorf("payments.a at %d after a second publish, want %d", got, pub.Revision)
	}
}
