package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"math"
	"os"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
	"unicode"

	"github.com/holdfast-dev/holdfast/controlapi"
	"github.com/holdfast-dev/holdfast/transport"
)

// The operator commands: publish, rollback, history, get, diff, status,
// clients (and rollout, in rollout.go). Each prints the API's reply: as
// a table, or with -o json exactly as the API sent it.

const targetDoc = `
-server URL reaches the holdfast server's control API; the token of
-token-file FILE (default: $HOLDFAST_TOKEN; -token TOKEN shows in the
process list) goes in "Authorization: Bearer" and in nothing
printed. -etcd HOST:PORT[,HOST:PORT...] reaches etcd's members instead,
through holdfast's etcd module, with the same JSON.`

const writerDoc = `
-server URL reaches the holdfast server's control API; the token of
-token-file FILE (default: $HOLDFAST_TOKEN; -token TOKEN shows in the
process list) goes in "Authorization: Bearer" and in nothing
printed. There is no -etcd form: the server is the store's only writer,
so that every change is validated against the namespace's schema and
audited.`

const serverOnlyDoc = `
-server URL reaches the holdfast server's control API; the token of
-token-file FILE (default: $HOLDFAST_TOKEN; -token TOKEN shows in the
process list) goes in "Authorization: Bearer" and in nothing
printed. There is no -etcd form: etcd keeps no clients' reports.`

func publishCommand() *command {
	return &command{
		name:    "publish",
		args:    "NAMESPACE [KEY=VALUE...]",
		summary: "publish a change to a namespace, with an actor and a reason",
		doc: `
Publish commits one change to NAMESPACE, in one new revision, and prints
it. Each KEY=VALUE puts KEY: a VALUE that parses as JSON is that JSON
(50, true, {"a":1}, "quoted"), any other is a string (fast, or an empty
string for KEY=). Or -f FILE takes the change as a JSON object,

	{"puts": {"retry-timeout-ms": 50}, "deletes": ["legacy-mode"]}

(-f /dev/stdin reads standard input). The actor and reason are recorded in
the namespace's history (the server defaults the actor to the token's
identity). With -if-revision N the publish commits only if the namespace
is at revision N (0: it has none yet): else nothing changes, and the
conflict with the current revision is on stderr, exit status 1. Read the
revision with 'holdfast status' or 'holdfast history -limit 1'. A
publish while a rollout runs on the namespace is refused (409), unless
-abort-rollout reverts the rollout first. A namespace under a policy
that needs approvals refuses a publish (403 approval_required): propose a
change ('holdfast change propose'), or, named in the policy's emergency
list, publish with -emergency -reason WHY, which opens a retro review.
` + writerDoc,
		minArgs: 1, maxArgs: math.MaxInt,
		flags: func(fs *flag.FlagSet) func(context.Context, *env, []string) error {
			t := addTargetFlags(fs, true)
			file := fs.String("f", "", "take the change from `FILE`: {\"puts\":{...},\"deletes\":[...]}")
			actor := fs.String("actor", "", "on behalf of `WHO` (the history records the token's identity as the actor, and WHO as on_behalf_of; on an open server WHO is the actor)")
			reason := fs.String("reason", "", "`WHY`, for the history (a ticket, an incident)")
			var ifRev optInt
			fs.Var(&ifRev, "if-revision", "commit only if the namespace is at revision `N` (0: it has none)")
			abort := fs.Bool("abort-rollout", false, "revert the namespace's running rollout first, if any (else a publish during one is refused)")
			emergency := fs.Bool("emergency", false, "publish past the namespace's policy's approvals (you must be in its emergency list; -reason required): it opens a retro review")
			return func(ctx context.Context, e *env, args []string) error {
				ns := args[0]
				puts, deletes, err := parseChange(*file, args[1:])
				if err != nil {
					return err
				}
				req := controlapi.PublishRequest{Puts: puts, Deletes: deletes, Actor: *actor, Reason: *reason, AbortRollout: *abort}
				if ifRev.set {
					req.IfRevision = &ifRev.v
				}
				if *emergency {
					if *reason == "" {
						return usagef("-emergency needs -reason")
					}
					return emergencyPublish(ctx, e, t, ns, req)
				}
				return withServer(ctx, t, "publish", func(ctx context.Context, p *serverPlane) error {
					rev, err := p.c.Publish(ctx, ns, req)
					if err != nil {
						return err
					}
					return t.print(e, p.reply(), func(w io.Writer) error {
						_, err := fmt.Fprintf(w, "published %s: revision %d\n", ns, rev)
						return err
					})
				})
			}
		},
	}
}

func rollbackCommand() *command {
	return &command{
		name:    "rollback",
		args:    "NAMESPACE",
		summary: "roll a namespace back to the content of an earlier revision",
		doc: `
Rollback commits, in one new revision, the content NAMESPACE had at
revision -to: it rolls forward to the old content, and the history stays
whole. The actor and reason are recorded in the history.
` + writerDoc,
		minArgs: 1, maxArgs: 1,
		flags: func(fs *flag.FlagSet) func(context.Context, *env, []string) error {
			t := addTargetFlags(fs, true)
			var to optInt
			fs.Var(&to, "to", "the `REVISION` whose content to restore (required)")
			actor := fs.String("actor", "", "on behalf of `WHO` (the history records the token's identity as the actor, and WHO as on_behalf_of; on an open server WHO is the actor)")
			reason := fs.String("reason", "", "`WHY`, for the history")
			return func(ctx context.Context, e *env, args []string) error {
				ns := args[0]
				if !to.set {
					return usagef("-to is required")
				}
				req := controlapi.RollbackRequest{To: &to.v, Actor: *actor, Reason: *reason}
				return withServer(ctx, t, "rollback", func(ctx context.Context, p *serverPlane) error {
					rev, err := p.c.Rollback(ctx, ns, req)
					if err != nil {
						return err
					}
					return t.print(e, p.reply(), func(w io.Writer) error {
						_, err := fmt.Fprintf(w, "rolled %s back to the content of revision %d: revision %d\n", ns, to.v, rev)
						return err
					})
				})
			}
		},
	}
}

func historyCommand() *command {
	return &command{
		name:    "history",
		args:    "NAMESPACE",
		summary: "list who changed a namespace, when, why and which keys",
		doc: `
History lists NAMESPACE's revisions, newest first: when each was committed,
its kind (publish, rollback, rollout-stage, rollout-promote,
rollout-revert), actor and reason, and the keys it put and deleted. The
server keeps these records through etcd's compaction, as many as its
-audit-retention; when older ones are gone the list ends with a line that
says so. Page back with -before the last revision shown.
` + targetDoc,
		minArgs: 1, maxArgs: 1,
		flags: func(fs *flag.FlagSet) func(context.Context, *env, []string) error {
			t := addTargetFlags(fs, false)
			limit := fs.Int("limit", 0, "list at most `N` revisions (0: the server's default, 100)")
			var before optInt
			fs.Var(&before, "before", "list the revisions below `REVISION`")
			return func(ctx context.Context, e *env, args []string) error {
				ns := args[0]
				if *limit < 0 {
					return usagef("-limit must not be negative, got %d", *limit)
				}
				if before.set && before.v == 0 {
					return usagef("-before must be a revision >= 1")
				}
				return withPlane(ctx, t, "history", func(ctx context.Context, p plane) error {
					h, data, err := p.history(ctx, ns, *limit, before.v)
					if err != nil {
						return err
					}
					return t.print(e, data, func(w io.Writer) error {
						if len(h.Revisions) == 0 {
							_, err := fmt.Fprintf(w, "no revisions of %s\n", ns)
							return err
						}
						tw := newTable(w, "REVISION", "COMMITTED", "KIND", "ACTOR", "REASON", "CHANGES")
						for _, r := range h.Revisions {
							kind := r.Kind
							if r.RollbackOf != 0 {
								kind += fmt.Sprintf(" to %d", r.RollbackOf)
							}
							actor := orDash(r.Actor)
							if r.OnBehalfOf != "" {
								actor += " for " + r.OnBehalfOf
							}
							tw.row(r.Revision, timeCell(r.CommittedAt), kind, actor, orDash(r.Reason), changesCell(r.Puts, r.Deletes))
						}
						if err := tw.flush(); err != nil {
							return err
						}
						if h.Truncated {
							_, err := fmt.Fprintf(w, "(older revisions of %s are no longer kept: past the audit's retention or etcd's compaction)\n", ns)
							return err
						}
						return nil
					})
				})
			}
		},
	}
}

func getCommand() *command {
	return &command{
		name:    "get",
		args:    "NAMESPACE [KEY]",
		summary: "print a namespace's values, now or as they were at a revision or time",
		doc: `
Get prints NAMESPACE's values: now, or as they were live at -revision R
(the namespace's last revision at or before store revision R) or at -at
TIME (an RFC 3339 time: "what was live at 14:03?"). With KEY it prints that
key's value alone, as JSON (-o json too); a KEY the namespace did not have
then is an error (exit status 1).

A revision above the head, a time in the future or before the namespace's
first revision has no values (404); values the server compacted away are
410 with its compaction point.
` + targetDoc,
		minArgs: 1, maxArgs: 2,
		flags: func(fs *flag.FlagSet) func(context.Context, *env, []string) error {
			t := addTargetFlags(fs, false)
			var rev optInt
			fs.Var(&rev, "revision", "the values live at store revision `R`")
			var at timeFlag
			fs.Var(&at, "at", "the values live at `TIME` (RFC 3339, e.g. 2026-12-01T14:03:00Z)")
			return func(ctx context.Context, e *env, args []string) error {
				ns := args[0]
				if rev.set && !at.t.IsZero() {
					return usagef("-revision and -at exclude each other")
				}
				r := int64(-1) // now
				if rev.set {
					r = rev.v
				}
				return withPlane(ctx, t, "get", func(ctx context.Context, p plane) error {
					v, data, err := p.values(ctx, ns, r, at.t)
					if err != nil {
						return err
					}
					if len(args) == 2 {
						val, ok := v.Values[args[1]]
						if !ok {
							return fmt.Errorf("%s has no key %q at revision %d", ns, args[1], v.Revision)
						}
						_, err := fmt.Fprintf(e.stdout, "%s\n", compactJSON(val))
						return err
					}
					return t.print(e, data, func(w io.Writer) error {
						if _, err := fmt.Fprintf(w, "%s at revision %d, committed %s\n", ns, v.Revision, timeCell(v.CommittedAt)); err != nil {
							return err
						}
						tw := newTable(w, "KEY", "VALUE")
						for _, k := range slices.Sorted(maps.Keys(v.Values)) {
							tw.row(k, compactJSON(v.Values[k]))
						}
						return tw.flush()
					})
				})
			}
		},
	}
}

func diffCommand() *command {
	return &command{
		name:    "diff",
		args:    "NAMESPACE FROM TO",
		summary: "print the keys that changed in a namespace between two revisions",
		doc: `
Diff prints the keys whose values differ between NAMESPACE's content at
store revision FROM and at TO (each the namespace's last revision at or
before it), one a line, as a reviewer reads it:

	retry-timeout-ms: 200 → 50
	legacy-mode: true → (absent)
` + targetDoc,
		minArgs: 3, maxArgs: 3,
		flags: func(fs *flag.FlagSet) func(context.Context, *env, []string) error {
			t := addTargetFlags(fs, false)
			return func(ctx context.Context, e *env, args []string) error {
				ns := args[0]
				var revs [2]int64
				for i, a := range args[1:] {
					r, err := strconv.ParseInt(a, 10, 64)
					if err != nil || r < 0 {
						return usagef("%s %q is not a revision (an integer >= 0)", []string{"FROM", "TO"}[i], a)
					}
					revs[i] = r
				}
				return withPlane(ctx, t, "diff", func(ctx context.Context, p plane) error {
					d, data, err := p.diff(ctx, ns, revs[0], revs[1])
					if err != nil {
						return err
					}
					return t.print(e, data, func(w io.Writer) error {
						fmt.Fprintf(w, "%s: revision %d → %d\n", ns, d.From, d.To)
						if len(d.Changes) == 0 {
							_, err := fmt.Fprintln(w, "no changes")
							return err
						}
						for _, c := range d.Changes {
							fmt.Fprintf(w, "%s: %s → %s\n", cell(c.Key), valueOrAbsent(c.Old), valueOrAbsent(c.New))
						}
						return nil
					})
				})
			}
		},
	}
}

func statusCommand() *command {
	return &command{
		name:    "status",
		args:    "NAMESPACE",
		summary: "print a namespace's revision and how many clients applied it",
		doc: `
Status prints NAMESPACE's revision, the store's head and compaction point,
and of the live clients that reported on it how many applied (acked) the
revision, rejected (nacked) it, or are behind (stale and gone clients are
not counted; the stale ones are counted apart), and the watch streams open.
When the server answering committed the revision, "propagation" says how
many of the clients it knew then have acked it, and how long after the
commit half, 95% and all of them had ("-": not yet).
` + serverOnlyDoc,
		minArgs: 1, maxArgs: 1,
		flags: func(fs *flag.FlagSet) func(context.Context, *env, []string) error {
			t := addTargetFlags(fs, true)
			return func(ctx context.Context, e *env, args []string) error {
				ns := args[0]
				return withServer(ctx, t, "status", func(ctx context.Context, p *serverPlane) error {
					st, err := p.c.Status(ctx, ns)
					if err != nil {
						return err
					}
					return t.print(e, p.reply(), func(w io.Writer) error {
						tw := newTable(w)
						tw.row("namespace", st.Namespace)
						tw.row("revision", st.Revision)
						tw.row("store", st.StoreID)
						tw.row("head", st.Head)
						tw.row("compacted to", st.CompactRevision)
						tw.row("clients", st.Clients)
						if st.Stale > 0 {
							tw.row("stale", st.Stale)
						}
						tw.row("acked", st.Acked)
						tw.row("nacked", st.Nacked)
						tw.row("behind", st.Behind)
						tw.row("streams", st.Streams)
						if st.Servers > 0 {
							tw.row("servers", st.Servers)
						}
						if p := st.Propagation; p != nil {
							tw.row("propagation", fmt.Sprintf("%d/%d acked; 50%% %s, 95%% %s, 100%% %s", p.Acked, p.Clients,
								propagationMark(p.P50), propagationMark(p.P95), propagationMark(p.P100)))
						}
						return tw.flush()
					})
				})
			}
		},
	}
}

// propagationMark is a propagation mark's seconds as a duration, or "-"
// when not reached.
func propagationMark(sec *float64) string {
	if sec == nil {
		return "-"
	}
	return time.Duration(*sec * float64(time.Second)).Round(time.Millisecond).String()
}

func clientsCommand() *command {
	return &command{
		name:    "clients",
		args:    "[NAMESPACE]",
		summary: "list the clients' reports: the revision each applied or rejected",
		doc: `
Clients lists every client's report on every namespace (or on NAMESPACE
alone): its presence (STATE: live, a connection open to a server or a
relay; stale, connected but unconfirmed, behind a relay cut off from its
upstream, or disconnected less than 5 s ago; gone, disconnected 5 s or
more; gone clients leave the list after 10 minutes), its SDK version, the
revision it applied, the last it rejected and why, the namespace's
revision now and how far behind it is, when it was last heard and how long
ago (AGE). A holdfast server answers for the whole fleet: its
own clients and those of every other server of the store, from the
summaries they write (a line per summary says whose, and how old it is:
a report through another server is at most that much older than its AGE
says). With NAMESPACE, -o json is the API's JSON with the other namespaces'
clients left out.
` + serverOnlyDoc,
		minArgs: 0, maxArgs: 1,
		flags: func(fs *flag.FlagSet) func(context.Context, *env, []string) error {
			t := addTargetFlags(fs, true)
			return func(ctx context.Context, e *env, args []string) error {
				var ns string
				if len(args) == 1 {
					ns = args[0]
					if err := transport.ValidateNamespace(ns); err != nil {
						return usagef("%v", err)
					}
				}
				return withServer(ctx, t, "clients", func(ctx context.Context, p *serverPlane) error {
					all, err := p.c.Clients(ctx)
					if err != nil {
						return err
					}
					data := p.reply()
					if ns != "" {
						kept := []controlapi.ClientState{}
						for _, c := range all.Clients {
							if c.Namespace == ns {
								kept = append(kept, c)
							}
						}
						all.Clients = kept
						all.Servers = slices.DeleteFunc(all.Servers, func(s controlapi.ServerReports) bool { return s.Namespace != ns })
						if _, data, err = reply(all, nil); err != nil {
							return err
						}
					}
					cs := all.Clients
					return t.print(e, data, func(w io.Writer) error {
						if len(cs) == 0 {
							_, err := fmt.Fprintln(w, "no clients have reported")
							return err
						}
						now := time.Now()
						tw := newTable(w, "CLIENT", "NAMESPACE", "STATE", "SDK", "APPLIED", "REVISION", "LAG", "REJECTED", "UPDATED", "AGE", "ERROR")
						for _, c := range cs {
							rejected := "-"
							if c.NackedRevision != 0 {
								rejected = strconv.FormatInt(c.NackedRevision, 10)
							}
							tw.row(c.ClientID, c.Namespace, orDash(c.State), orDash(c.SDKVersion), c.AckedRevision, c.HeadRevision, c.Lag, rejected,
								timeCell(c.UpdatedAt), ageCell(now, c.UpdatedAt), orDash(clip(c.NackError, 80)))
						}
						if err := tw.flush(); err != nil {
							return err
						}
						if all.Dropped > 0 {
							if _, err := fmt.Fprintf(w, "%d client entries dropped: the server's tables were full (see its log)\n", all.Dropped); err != nil {
								return err
							}
						}
						for _, s := range all.Servers {
							line := fmt.Sprintf("server %s: %d client(s) of %s, summary written %s ago", s.Server, s.Clients, s.Namespace, ageCell(now, s.At))
							if s.Truncated > 0 {
								line += fmt.Sprintf(" (%d more left out)", s.Truncated)
							}
							if _, err := fmt.Fprintln(w, line); err != nil {
								return err
							}
						}
						return nil
					})
				})
			}
		},
	}
}

// print writes the reply data: as it came with -o json, else as text
// writes it.
func (t *targetFlags) print(e *env, data []byte, text func(io.Writer) error) error {
	if t.json() {
		if !bytes.HasSuffix(data, []byte("\n")) {
			data = append(data, '\n')
		}
		_, err := e.stdout.Write(data)
		return err
	}
	return text(e.stdout)
}

// parseChange reads a change: from file (-f), or from KEY=VALUE args.
// Every error is a usage error.
func parseChange(file string, args []string) (map[string]json.RawMessage, []string, error) {
	switch {
	case file != "" && len(args) > 0:
		return nil, nil, usagef("-f and KEY=VALUE arguments exclude each other")
	case file != "":
		data, err := os.ReadFile(file)
		if err != nil {
			return nil, nil, usagef("-f: %v", err)
		}
		var c struct {
			Puts    map[string]json.RawMessage `json:"puts"`
			Deletes []string                   `json:"deletes"`
		}
		dec := json.NewDecoder(bytes.NewReader(data))
		dec.DisallowUnknownFields() // a file of bare keys is refused, not published as nothing
		if err := dec.Decode(&c); err != nil {
			return nil, nil, usagef("-f %s: %v (want {\"puts\":{...},\"deletes\":[...]})", file, err)
		}
		if dec.More() {
			return nil, nil, usagef("-f %s: more than one JSON value", file)
		}
		if len(c.Puts) == 0 && len(c.Deletes) == 0 {
			return nil, nil, usagef("-f %s: no puts and no deletes", file)
		}
		return c.Puts, c.Deletes, nil
	case len(args) == 0:
		return nil, nil, usagef("nothing to publish: give KEY=VALUE arguments or -f FILE")
	}
	puts := make(map[string]json.RawMessage, len(args))
	for _, a := range args {
		k, v, ok := strings.Cut(a, "=")
		if !ok || k == "" {
			return nil, nil, usagef("%q is not KEY=VALUE", a)
		}
		if _, dup := puts[k]; dup {
			return nil, nil, usagef("key %q given twice", k)
		}
		puts[k] = parseValue(v)
	}
	return puts, nil, nil
}

// parseValue is VALUE of KEY=VALUE: JSON if it parses as JSON, else a
// string.
func parseValue(v string) json.RawMessage {
	if json.Valid([]byte(v)) {
		return json.RawMessage(v)
	}
	s, _ := json.Marshal(v) // a Go string always encodes
	return s
}

// optInt is an integer flag >= 0 that knows whether it was given.
type optInt struct {
	v   int64
	set bool
}

func (o *optInt) String() string {
	if o == nil || !o.set {
		return ""
	}
	return strconv.FormatInt(o.v, 10)
}

func (o *optInt) Set(s string) error {
	v, err := strconv.ParseInt(s, 10, 64)
	if err != nil || v < 0 {
		return errors.New("want an integer >= 0")
	}
	o.v, o.set = v, true
	return nil
}

// timeFlag is an RFC 3339 time flag.
type timeFlag struct{ t time.Time }

func (f *timeFlag) String() string {
	if f == nil || f.t.IsZero() {
		return ""
	}
	return f.t.Format(time.RFC3339Nano)
}

func (f *timeFlag) Set(s string) error {
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		return errors.New("want an RFC 3339 time, e.g. 2026-12-01T14:03:00Z")
	}
	f.t = t
	return nil
}

// table is a text/tabwriter table.
type table struct{ tw *tabwriter.Writer }

func newTable(w io.Writer, header ...string) *table {
	t := &table{tw: tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)}
	if len(header) > 0 {
		fmt.Fprintln(t.tw, strings.Join(header, "\t"))
	}
	return t
}

func (t *table) row(cells ...any) {
	s := make([]string, len(cells))
	for i, c := range cells {
		s[i] = cell(fmt.Sprint(c))
	}
	fmt.Fprintln(t.tw, strings.Join(s, "\t"))
}

func (t *table) flush() error { return t.tw.Flush() }

// cell makes s safe for a table or a line: control characters (a tab,
// a newline, an escape) would forge columns or lines.
func cell(s string) string {
	return strings.Map(func(r rune) rune {
		if unicode.IsControl(r) {
			return '?'
		}
		return r
	}, s)
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// ageCell is how long before now t was, to the second ("-": never).
func ageCell(now, t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return max(0, now.Sub(t)).Round(time.Second).String()
}

func timeCell(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.UTC().Format(time.RFC3339)
}

// changesCell is a record's keys: "put a, b; deleted c", the first few.
func changesCell(puts, deletes []string) string {
	var parts []string
	for _, kv := range []struct {
		verb string
		keys []string
	}{{"put", puts}, {"deleted", deletes}} {
		if len(kv.keys) == 0 {
			continue
		}
		const shown = 5
		s := kv.verb + " " + strings.Join(kv.keys[:min(len(kv.keys), shown)], ", ")
		if n := len(kv.keys) - shown; n > 0 {
			s += fmt.Sprintf(" (+%d)", n)
		}
		parts = append(parts, s)
	}
	if len(parts) == 0 {
		return "-"
	}
	return strings.Join(parts, "; ")
}

// compactJSON is v without insignificant space.
func compactJSON(v json.RawMessage) string {
	var b bytes.Buffer
	if json.Compact(&b, v) != nil {
		return string(v)
	}
	return b.String()
}

func valueOrAbsent(v json.RawMessage) string {
	if len(v) == 0 {
		return "(absent)"
	}
	return cell(compactJSON(v))
}
