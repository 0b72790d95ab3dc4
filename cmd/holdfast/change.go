package main

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/holdfast-dev/holdfast/controlapi"
)

// The change commands: proposals, their review and approvals, publishing
// (/control/changes), and the policies that require them
// (/control/policies).

const changeDoc = `
A change is puts and deletes of one or several namespaces, each against a
base revision, proposed with a reason; the server reviews it (the
semantic diff, the schema's and the lints' checks, the clients it would
reach) and keeps it until it is published, rejected or withdrawn. A
namespace under a policy needs its approvals from other identities before
the change publishes; a base revision that moved makes the change stale
until it is rebased, which voids its approvals.`

func changeProposeCommand() *command {
	return &command{
		name:    "change propose",
		args:    "[NAMESPACE KEY=VALUE...]",
		summary: "propose a change of one or several namespaces for review",
		doc: `
Change propose proposes a change and prints its review. The change is
NAMESPACE and KEY=VALUE arguments (as for 'holdfast publish'), against
the namespace's revision now (or -base N), or -f FILE: one JSON document
for several namespaces,

	{"reason": "…", "namespaces": {"payments.prod": {"base_revision": 41,
	 "puts": {"retry-timeout-ms": 50}, "deletes": ["legacy"]}}}

(-reason, -link and -allow-old-sdk add to it). -schema FILE gives
NAMESPACE a new JSON Schema with the change (-delete-schema drops its
schema): the review checks the content after the change against it, and
publishing commits it with the values; a namespace under a policy changes
its schema this way only. A check that blocks (the
schema, a block lint, clients below a policy's min_sdk_version) still
records the change, which cannot be approved: the review says why.
` + changeDoc + `
` + serverOnlyDoc,
		minArgs: 0, maxArgs: 1 << 20,
		flags: func(fs *flag.FlagSet) func(context.Context, *env, []string) error {
			t := addTargetFlags(fs, true)
			file := fs.String("f", "", "take the change from `FILE`: {\"reason\":…,\"namespaces\":{NS:{\"base_revision\":N,\"puts\":{…},\"deletes\":[…]}}}")
			reason := fs.String("reason", "", "`WHY` (required, here or in -f)")
			link := fs.String("link", "", "a `URL` of the ticket or discussion")
			var base optInt
			fs.Var(&base, "base", "the base `REVISION` of NAMESPACE (default: its revision now)")
			allowOld := fs.String("allow-old-sdk", "", "reach clients below a policy's min_sdk_version, for `REASON`")
			schemaFile := fs.String("schema", "", "set NAMESPACE's JSON Schema to `FILE`'s with the change")
			dropSchema := fs.Bool("delete-schema", false, "delete NAMESPACE's schema with the change")
			return func(ctx context.Context, e *env, args []string) error {
				var req controlapi.ChangeRequest
				schemaPart := *schemaFile != "" || *dropSchema
				readSchema := func(nc *controlapi.NamespaceChange) error {
					if *schemaFile == "" {
						return nil
					}
					data, err := os.ReadFile(*schemaFile)
					if err != nil {
						return usagef("-schema: %v", err)
					}
					nc.Schema = data
					return nil
				}
				switch {
				case *file != "" && len(args) > 0:
					return usagef("-f and NAMESPACE KEY=VALUE arguments exclude each other")
				case *file != "" && schemaPart:
					return usagef("-schema and -delete-schema go with NAMESPACE: in -f FILE, give a namespace's \"schema\" or \"delete_schema\"")
				case *schemaFile != "" && *dropSchema:
					return usagef("-schema and -delete-schema exclude each other")
				case schemaPart && len(args) == 1:
					nc := controlapi.NamespaceChange{BaseRevision: base.v, DeleteSchema: *dropSchema}
					if err := readSchema(&nc); err != nil {
						return err
					}
					req.Namespaces = map[string]controlapi.NamespaceChange{args[0]: nc}
				case *file != "":
					data, err := os.ReadFile(*file)
					if err != nil {
						return usagef("-f: %v", err)
					}
					dec := json.NewDecoder(bytes.NewReader(data))
					dec.DisallowUnknownFields()
					if err := dec.Decode(&req); err != nil {
						return usagef("-f %s: %v", *file, err)
					}
				case len(args) < 2:
					return usagef("give NAMESPACE and KEY=VALUE arguments (or -schema FILE), or -f FILE")
				default:
					puts, deletes, err := parseChange("", args[1:])
					if err != nil {
						return err
					}
					nc := controlapi.NamespaceChange{BaseRevision: base.v, Puts: puts, Deletes: deletes, DeleteSchema: *dropSchema}
					if err := readSchema(&nc); err != nil {
						return err
					}
					req.Namespaces = map[string]controlapi.NamespaceChange{args[0]: nc}
				}
				if *reason != "" {
					req.Reason = *reason
				}
				if *link != "" {
					req.Link = *link
				}
				if *allowOld != "" {
					req.AllowOldSDK, req.AllowOldSDKReason = true, *allowOld
				}
				if req.Reason == "" {
					return usagef("-reason is required")
				}
				return withServer(ctx, t, "change propose", func(ctx context.Context, p *serverPlane) error {
					ch, err := p.c.ProposeChange(ctx, req)
					if err != nil {
						return err
					}
					return t.print(e, p.reply(), func(w io.Writer) error { return showChange(w, ch) })
				})
			}
		},
	}
}

func changeShowCommand() *command {
	return &command{
		name:    "change show",
		args:    "ID",
		summary: "print a change's review: its semantic diff, checks, reach and approvals",
		doc: `
Change show prints change ID for a human: its state, author and reason,
the semantic diff of each namespace (a key's old value → new value,
added, removed, type changed), every check's result (the schema, each
lint, the SDK gate), the clients it would reach by SDK version, its
approvals and what you may do with it now.
` + changeDoc + `
` + serverOnlyDoc,
		minArgs: 1, maxArgs: 1,
		flags: func(fs *flag.FlagSet) func(context.Context, *env, []string) error {
			t := addTargetFlags(fs, true)
			return func(ctx context.Context, e *env, args []string) error {
				return withServer(ctx, t, "change show", func(ctx context.Context, p *serverPlane) error {
					ch, err := p.c.GetChange(ctx, args[0])
					if err != nil {
						return err
					}
					return t.print(e, p.reply(), func(w io.Writer) error { return showChange(w, ch) })
				})
			}
		},
	}
}

func changeListCommand() *command {
	return &command{
		name:    "change list",
		summary: "list changes, by namespace and state, or those awaiting your approval",
		doc: `
Change list lists the changes of the namespaces you control, newest
first: -ns selects a namespace's, -state a state's (open, approved,
published, rejected, withdrawn, stale, or overdue: emergency publishes
whose retro review is late), -awaiting those you may approve now.
` + serverOnlyDoc,
		flags: func(fs *flag.FlagSet) func(context.Context, *env, []string) error {
			t := addTargetFlags(fs, true)
			ns := fs.String("ns", "", "only the changes of `NAMESPACE`")
			state := fs.String("state", "", "only the changes in `STATE`")
			awaiting := fs.Bool("awaiting", false, "only the changes you may approve now")
			return func(ctx context.Context, e *env, _ []string) error {
				return withServer(ctx, t, "change list", func(ctx context.Context, p *serverPlane) error {
					cs, err := p.c.ListChanges(ctx, controlapi.ChangeListOptions{Namespace: *ns, State: *state, AwaitingMe: *awaiting})
					if err != nil {
						return err
					}
					return t.print(e, p.reply(), func(w io.Writer) error {
						tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
						fmt.Fprintln(tw, "ID\tSTATE\tAUTHOR\tNAMESPACES\tAPPROVALS\tREASON")
						for _, c := range cs {
							state := c.State
							if c.RetroReview != nil && c.RetroReview.Overdue {
								state += " (retro review overdue)"
							}
							fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d/%d\t%s\n", cell(c.ID), state, cell(c.Author), cell(strings.Join(sortedNamespaces(c), ",")),
								len(c.Approvals), c.Required, cell(c.Reason))
						}
						return tw.Flush()
					})
				})
			}
		},
	}
}

func changeApproveCommand() *command {
	return changeActionCommand(controlapi.ActionApprove, "approve a change (not your own), or an emergency publish's retro review", `
Change approve approves change ID as your identity: never your own, never
twice, only as an approver of its namespaces' policies, and only a change
whose checks do not block. An approval is bound to the change's content,
base revisions and checks: a rebase voids it. Approving an emergency
publish closes its retro review.`)
}

func changeRejectCommand() *command {
	return changeActionCommand(controlapi.ActionReject, "reject a change", `
Change reject rejects change ID (not your own: withdraw that).`)
}

func changeWithdrawCommand() *command {
	return changeActionCommand(controlapi.ActionWithdraw, "withdraw your change", `
Change withdraw withdraws change ID, as its author. A change's content
never changes: withdraw it and propose another.`)
}

func changeRebaseCommand() *command {
	return changeActionCommand(controlapi.ActionRebase, "move a change's base revisions to now, voiding its approvals", `
Change rebase moves change ID's base revisions to its namespaces'
revisions now and reviews it again (diff, checks, reach): its approvals
are void, it needs them again.`)
}

// changeActionCommand is change approve, reject, withdraw or rebase: each
// prints the change.
func changeActionCommand(action, summary, doc string) *command {
	return &command{
		name:    "change " + action,
		args:    "ID",
		summary: summary,
		doc:     doc + "\n" + changeDoc + "\n" + serverOnlyDoc,
		minArgs: 1, maxArgs: 1,
		flags: func(fs *flag.FlagSet) func(context.Context, *env, []string) error {
			t := addTargetFlags(fs, true)
			reason := fs.String("reason", "", "`WHY`, for the change's audit trail")
			return func(ctx context.Context, e *env, args []string) error {
				return withServer(ctx, t, "change "+action, func(ctx context.Context, p *serverPlane) error {
					req := controlapi.ChangeActionRequest{Reason: *reason}
					act := map[string]func(context.Context, string, controlapi.ChangeActionRequest) (*controlapi.Change, error){
						controlapi.ActionApprove: p.c.ApproveChange, controlapi.ActionReject: p.c.RejectChange,
						controlapi.ActionWithdraw: p.c.WithdrawChange, controlapi.ActionRebase: p.c.RebaseChange,
					}[action]
					ch, err := act(ctx, args[0], req)
					if err != nil {
						return err
					}
					return t.print(e, p.reply(), func(w io.Writer) error { return showChange(w, ch) })
				})
			}
		},
	}
}

func changePublishCommand() *command {
	return &command{
		name:    "change publish",
		args:    "ID",
		summary: "publish an approved change: all its namespaces at one revision, or as a rollout",
		doc: `
Change publish publishes approved change ID: every namespace of it in one
store transaction, each only if still at its base revision, sharing one
commit revision; it prints the revisions. With -stages (a change of one
namespace) it starts a staged rollout of it instead, as 'holdfast rollout
start' does. Publishing a published change again prints its revisions: it
commits once.
` + changeDoc + `
` + serverOnlyDoc,
		minArgs: 1, maxArgs: 1,
		flags: func(fs *flag.FlagSet) func(context.Context, *env, []string) error {
			t := addTargetFlags(fs, true)
			var stages percentList
			fs.Var(&stages, "stages", "publish as a rollout over these stages: comma-separated `PERCENTS`, e.g. 1,10,100")
			bake := fs.Duration("bake", 0, "with -stages: how long each stage holds once all its clients reported")
			reason := fs.String("reason", "", "`WHY`, for the history (default: the change's reason)")
			return func(ctx context.Context, e *env, args []string) error {
				req := controlapi.ChangePublishRequest{Reason: *reason, Stages: stages}
				if *bake > 0 {
					req.Bake = bake.String()
				}
				return withServer(ctx, t, "change publish", func(ctx context.Context, p *serverPlane) error {
					r, err := p.c.PublishChange(ctx, args[0], req)
					if err != nil {
						return err
					}
					return t.print(e, p.reply(), func(w io.Writer) error {
						if r.Rollout != "" {
							_, err := fmt.Fprintf(w, "change %s published as rollout %s: first stage at revision %d\n", cell(args[0]), cell(r.Rollout), r.Revision)
							return err
						}
						_, err := fmt.Fprintf(w, "change %s published: revision %d (%s)\n", cell(args[0]), r.Revision, cell(strings.Join(sortedKeys(r.Revisions), ", ")))
						return err
					})
				})
			}
		},
	}
}

// emergencyPublish is publish -emergency: it prints the revision and the
// retro review it opened.
func emergencyPublish(ctx context.Context, e *env, t *targetFlags, ns string, req controlapi.PublishRequest) error {
	return withServer(ctx, t, "publish", func(ctx context.Context, p *serverPlane) error {
		r, err := p.c.EmergencyPublish(ctx, ns, req)
		if err != nil {
			return err
		}
		return t.print(e, p.reply(), func(w io.Writer) error {
			_, err := fmt.Fprintf(w, "published %s in an emergency: revision %d; retro review %s (a second person approves it: holdfast change approve %s)\n",
				ns, r.Revision, cell(r.RetroReview), cell(r.RetroReview))
			return err
		})
	})
}

func policyGetCommand() *command {
	return &command{
		name:    "policy get",
		args:    "NAME",
		summary: "print a review policy",
		doc: `
Policy get prints policy NAME: the namespaces it governs, the approvals a
change needs and from whom, the emergency list, the retro review window
and the min_sdk_version.
` + serverOnlyDoc,
		minArgs: 1, maxArgs: 1,
		flags: func(fs *flag.FlagSet) func(context.Context, *env, []string) error {
			t := addTargetFlags(fs, true)
			return func(ctx context.Context, e *env, args []string) error {
				return withServer(ctx, t, "policy get", func(ctx context.Context, p *serverPlane) error {
					pol, err := p.c.GetPolicy(ctx, args[0])
					if err != nil {
						return err
					}
					return t.print(e, p.reply(), func(w io.Writer) error { return showPolicy(w, args[0], pol) })
				})
			}
		},
	}
}

func policySetCommand() *command {
	return &command{
		name:    "policy set",
		args:    "NAME",
		summary: "set a review policy: approvals, approvers, emergency list (admin)",
		doc: `
Policy set sets policy NAME (admin scope): for the namespaces -namespaces
matches, a change needs -approvals approvals from -approvers (identities
and globs, never its author, never the same twice); a direct publish,
rollback, rollout start or schema change of them is refused. Identities
in -emergency may publish with 'holdfast publish -emergency', which opens
a retro review due within -retro-review. -min-sdk-version blocks a change
that reaches clients below it. Every policy matching a namespace applies.
A server without tokens keeps no policies.
` + serverOnlyDoc,
		minArgs: 1, maxArgs: 1,
		flags: func(fs *flag.FlagSet) func(context.Context, *env, []string) error {
			t := addTargetFlags(fs, true)
			namespaces := fs.String("namespaces", "", "the `PATTERN` of the namespaces it governs, e.g. 'payments.*' (required)")
			approvals := fs.Int("approvals", 1, "the approvals a change needs")
			approvers := fs.String("approvers", "", "who may approve: comma-separated `IDENTITIES` and globs, e.g. alice,bob,sre-*")
			emergency := fs.String("emergency", "", "who may publish in an emergency: comma-separated `IDENTITIES` and globs")
			retro := fs.Duration("retro-review", controlapi.DefaultRetroReview, "how long an emergency publish's retro review may wait")
			minSDK := fs.String("min-sdk-version", "", "block changes reaching clients below SDK `VERSION`, e.g. 0.5.0")
			return func(ctx context.Context, e *env, args []string) error {
				if *namespaces == "" {
					return usagef("-namespaces is required")
				}
				pol := controlapi.Policy{Namespaces: *namespaces, Approvals: *approvals, Approvers: splitList(*approvers),
					Emergency: splitList(*emergency), RetroReview: retro.String(), MinSDKVersion: *minSDK}
				return withServer(ctx, t, "policy set", func(ctx context.Context, p *serverPlane) error {
					out, err := p.c.PutPolicy(ctx, args[0], pol)
					if err != nil {
						return err
					}
					return t.print(e, p.reply(), func(w io.Writer) error { return showPolicy(w, args[0], out) })
				})
			}
		},
	}
}

func splitList(s string) []string {
	var out []string
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f != "" {
			out = append(out, f)
		}
	}
	return out
}

func showPolicy(w io.Writer, name string, p *controlapi.Policy) error {
	_, err := fmt.Fprintf(w, "policy %s: namespaces %s\n  approvals:    %d from %s\n  emergency:    %s\n  retro review: %s\n  min SDK:      %s\n",
		cell(name), cell(p.Namespaces), p.Approvals, cell(strings.Join(p.Approvers, ", ")), cell(orNone(strings.Join(p.Emergency, ", "))),
		cell(p.RetroReview), cell(orNone(p.MinSDKVersion)))
	return err
}

func orNone(s string) string {
	if s == "" {
		return "(none)"
	}
	return s
}

// showChange prints a change for a human: its state, the semantic diff,
// the checks, the reach, the approvals and the caller's actions.
func showChange(w io.Writer, c *controlapi.Change) error {
	var b strings.Builder
	state := c.State
	if c.Emergency {
		state += ", emergency"
	}
	fmt.Fprintf(&b, "change %s (%s) by %s: %s\n", cell(c.ID), state, cell(c.Author), cell(c.Reason))
	if c.Link != "" {
		fmt.Fprintf(&b, "  link: %s\n", cell(c.Link))
	}
	for _, ns := range sortedNamespaces(*c) {
		fmt.Fprintf(&b, "\n%s (base revision %d)\n", cell(ns), c.Namespaces[ns].BaseRevision)
		for _, d := range c.Diff {
			if d.Namespace == ns {
				fmt.Fprintf(&b, "  %s\n", diffLine(d))
			}
		}
	}
	b.WriteString("\nchecks:\n")
	for _, ck := range c.Checks {
		name := ck.Kind
		if ck.Name != ck.Kind {
			name += " " + cell(ck.Name)
		}
		fmt.Fprintf(&b, "  %-5s %s %s", ck.Result, cell(ck.Namespace), name)
		if ck.Message != "" {
			fmt.Fprintf(&b, ": %s", cell(ck.Message))
		}
		b.WriteString("\n")
	}
	b.WriteString("\nreach:\n")
	for _, ns := range sortedNamespaces(*c) {
		rc := c.Reach[ns]
		fmt.Fprintf(&b, "  %s: %d live client(s)", cell(ns), rc.Live)
		if vs := sortedCounts(rc.BySDKVersion); len(vs) > 0 {
			fmt.Fprintf(&b, " (%s)", strings.Join(vs, ", "))
		}
		if rc.MinSDKVersion != "" {
			fmt.Fprintf(&b, "; %d below min_sdk_version %s", rc.BelowMin, cell(rc.MinSDKVersion))
		}
		b.WriteString("\n")
	}
	fmt.Fprintf(&b, "\napprovals: %d of %d", len(c.Approvals), c.Required)
	for _, a := range c.Approvals {
		fmt.Fprintf(&b, "; %s at %s", cell(a.By), a.At.Format(time.RFC3339))
	}
	b.WriteString("\n")
	if rr := c.RetroReview; rr != nil {
		switch {
		case rr.ApprovedBy != "":
			fmt.Fprintf(&b, "retro review: approved by %s at %s\n", cell(rr.ApprovedBy), rr.ApprovedAt.Format(time.RFC3339))
		case rr.Overdue:
			fmt.Fprintf(&b, "retro review: OVERDUE since %s\n", rr.Due.Format(time.RFC3339))
		default:
			fmt.Fprintf(&b, "retro review: due by %s\n", rr.Due.Format(time.RFC3339))
		}
	}
	if c.Revision != 0 {
		fmt.Fprintf(&b, "published at revision %d\n", c.Revision)
	}
	fmt.Fprintf(&b, "you may: %s\n", orNone(strings.Join(c.Actions, ", ")))
	_, err := io.WriteString(w, b.String())
	return err
}

// diffLine is one key of a semantic diff: "retry-ms: 200 → 50".
func diffLine(d controlapi.DiffEntry) string {
	k := cell(d.Key)
	if d.Op == controlapi.OpSchema {
		k = "(schema)"
	}
	switch d.Kind {
	case controlapi.DiffAdded:
		return fmt.Sprintf("+ %s: %s (added)", k, cell(string(d.New)))
	case controlapi.DiffRemoved:
		return fmt.Sprintf("- %s: %s (removed)", k, cell(string(d.Old)))
	case controlapi.DiffTypeChanged:
		return fmt.Sprintf("~ %s: %s → %s (type changed %s → %s)", k, cell(string(d.Old)), cell(string(d.New)), d.OldType, d.NewType)
	case controlapi.DiffUnchanged:
		return fmt.Sprintf("= %s: %s (unchanged)", k, cell(string(d.New)))
	}
	return fmt.Sprintf("~ %s: %s → %s", k, cell(string(d.Old)), cell(string(d.New)))
}

func sortedNamespaces(c controlapi.Change) []string { return sortedKeys(c.Namespaces) }

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// sortedCounts is "VERSION: N" of m, by version ("(none)" for clients
// that report none).
func sortedCounts(m map[string]int) []string {
	var out []string
	for _, v := range sortedKeys(m) {
		name := v
		if name == "" {
			name = "(none)"
		}
		out = append(out, fmt.Sprintf("%s: %d", cell(name), m[v]))
	}
	return out
}
