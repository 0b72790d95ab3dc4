package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/holdfast-dev/holdfast/controlapi"
	"github.com/holdfast-dev/holdfast/internal/gate"
)

// The rollout commands: a staged rollout of a change on the holdfast
// server (POST /control/namespaces/{ns}/rollouts, GET .../rollouts/{id},
// POST .../rollouts/{id}/abort and .../promote).

const rolloutDoc = `
A rollout stages a change to a namespace over -stages, each a percentage
of the clients that report on it, chosen by client id. Each stage waits
until every client in it has reported (acked or nacked) its revision, then
bakes for -bake; more nacks than -max-nacks so far revert it, in one new
revision that drops the change. After the last stage's bake the change
becomes the base for everyone (promoted). With -prevalidate every client
checks the change as soon as it learns of it, in the stage or not, and a
would-nack counts as a nack. A client silent past -report-timeout is
lagging, or gone (it no longer holds the stage) once also silent past
the server's liveness window; a stage still waiting after -stage-timeout
reverts or holds, as -on-timeout says.`

func rolloutStartCommand() *command {
	return &command{
		name:    "rollout start",
		args:    "NAMESPACE [KEY=VALUE...]",
		summary: "start a staged rollout of a change (1% → 10% → 100%), gated on the clients' acks",
		doc: `
Rollout start starts a staged rollout of a change to NAMESPACE and prints
its id and its first stage's revision. The change is KEY=VALUE arguments
or -f FILE, as for 'holdfast publish'. Follow it with 'holdfast rollout
status -id ID', end it early with 'holdfast rollout abort' or 'holdfast
rollout promote'. One rollout per namespace at a time: a second, or a
plain publish during one, is refused (409).
` + rolloutDoc + `
` + serverOnlyDoc,
		minArgs: 1, maxArgs: math.MaxInt,
		flags: func(fs *flag.FlagSet) func(context.Context, *env, []string) error {
			t := addTargetFlags(fs, true)
			var stages percentList
			fs.Var(&stages, "stages", "the stages: comma-separated `PERCENTS` of the clients, e.g. 1,10,100 (required)")
			bake := fs.Duration("bake", 0, "how long each stage holds once all its clients reported (0: none)")
			maxNacks := fs.Int("max-nacks", 0, "the nacks (and would-nacks) tolerated before the rollout reverts")
			prevalidate := fs.Bool("prevalidate", false, "every client checks the change at once and reports a would-nack")
			reportTimeout := fs.Duration("report-timeout", 0, "a client silent this long is lagging, or gone if also silent past the liveness window (0: the server's default, 10s)")
			stageTimeout := fs.Duration("stage-timeout", 0, "how long a stage waits for its clients (0: the server's default, 5m)")
			onTimeout := newChoice(fs, "on-timeout", "what a stage that timed out does", "revert", "hold")
			onBreach := newChoice(fs, "on-breach", "what a gate's breach does (default revert)", "", "revert", "hold")
			actor := fs.String("actor", "", "`WHO` starts it, for the history (default: the token's identity)")
			reason := fs.String("reason", "", "`WHY`, for the history")
			file := fs.String("f", "", "take the change from `FILE`: {\"puts\":{...},\"deletes\":[...]}")
			gates := gate.AddFlags(fs)
			return func(ctx context.Context, e *env, args []string) error {
				ns := args[0]
				gs, err := gates()
				if err != nil {
					return usagef("%v", err)
				}
				puts, deletes, err := parseChange(*file, args[1:])
				if err != nil {
					return err
				}
				switch {
				case len(stages) == 0:
					return usagef("-stages is required, e.g. -stages 1,10,100")
				case *bake < 0 || *reportTimeout < 0 || *stageTimeout < 0:
					return usagef("-bake, -report-timeout and -stage-timeout must not be negative")
				case *maxNacks < 0:
					return usagef("-max-nacks must not be negative, got %d", *maxNacks)
				}
				rawGates := make([]json.RawMessage, len(gs))
				for i, g := range gs {
					if rawGates[i], err = json.Marshal(g); err != nil {
						return err
					}
				}
				req := controlapi.NewRolloutRequest(controlapi.RolloutSpec{
					Puts: puts, Deletes: deletes, Stages: stages, Bake: *bake, MaxNacks: *maxNacks, Prevalidate: *prevalidate,
					ReportTimeout: *reportTimeout, StageTimeout: *stageTimeout, OnTimeout: onTimeout.value, OnBreach: onBreach.value,
					Gates: rawGates,
				}, *actor, *reason)
				return withServer(ctx, t, "rollout start", func(ctx context.Context, p *serverPlane) error {
					r, err := p.c.StartRollout(ctx, ns, req)
					if err != nil {
						return err
					}
					return t.print(e, p.reply(), func(w io.Writer) error {
						_, err := fmt.Fprintf(w, "rollout %s of %s started: stage %s at revision %d\n", cell(r.ID), ns, percent(stages[0]), r.Revision)
						return err
					})
				})
			}
		},
	}
}

func rolloutStatusCommand() *command {
	return rolloutRecordCommand("status", "", "print a rollout's state: its stage, the clients' acks and nacks", `
Rollout status prints rollout -id of NAMESPACE, by default the one running
there: its state (running, promoted, reverted), the stage it is in (or
ended in), how many clients it knows, how many served the change, acked,
nacked, would have nacked (prevalidation) and lag, why it reverted, and
the revisions it committed. Without -id and with no rollout running it
fails, naming 'holdfast rollout list', which lists NAMESPACE's rollouts,
the last few that ended too. With -watch it prints the record again at
each change (its stage, counts, bake, reason) until the rollout ends,
however long that takes (each request is bounded, the watch is not), then
exits 0; with -o json, one record a line.`)
}

func rolloutAbortCommand() *command {
	return rolloutRecordCommand("abort", "abort", "revert a running rollout now", `
Rollout abort reverts rollout -id of NAMESPACE (by default the one running
there) now, in one new revision that drops the staged change, and prints
its state.`)
}

func rolloutPromoteCommand() *command {
	return rolloutRecordCommand("promote", "promote", "skip a running rollout to 100%: its change becomes the base", `
Rollout promote ends rollout -id of NAMESPACE (by default the one running
there) early: its change becomes the base for every client, in one new
revision; it prints its state.`)
}

// rolloutRecordCommand is rollout status (action ""), abort or promote:
// each prints the rollout's record.
func rolloutRecordCommand(name, action, summary, doc string) *command {
	return &command{
		name:    "rollout " + name,
		args:    "NAMESPACE",
		summary: summary,
		doc:     doc + "\n" + serverOnlyDoc,
		minArgs: 1, maxArgs: 1,
		flags: func(fs *flag.FlagSet) func(context.Context, *env, []string) error {
			t := addTargetFlags(fs, true)
			id := fs.String("id", "", "the rollout's `ID`, as rollout start printed it (default: the one running on NAMESPACE)")
			var watch *bool
			var reason *string
			if action == "" {
				watch = fs.Bool("watch", false, "print the rollout again at each change, until it ends (no overall time limit)")
			} else {
				reason = fs.String("reason", "", "`WHY`, for the history")
			}
			return func(ctx context.Context, e *env, args []string) error {
				ns := args[0]
				if watch != nil && *watch {
					return withServerUnbounded(ctx, t, "rollout "+name, func(ctx context.Context, p *serverPlane) error {
						rctx, cancel := requestCtx(ctx)
						rid, err := rolloutID(rctx, p, ns, *id)
						cancel()
						if err != nil {
							return err
						}
						return watchRollout(ctx, e, t, p, ns, rid)
					})
				}
				return withServer(ctx, t, "rollout "+name, func(ctx context.Context, p *serverPlane) error {
					rid, err := rolloutID(ctx, p, ns, *id)
					if err != nil {
						return err
					}
					var r *controlapi.RolloutRecord
					switch action {
					case "":
						r, err = p.c.GetRollout(ctx, ns, rid)
					case "abort":
						r, err = p.c.AbortRollout(ctx, ns, rid, controlapi.RolloutActionRequest{Reason: *reason})
					case "promote":
						r, err = p.c.PromoteRollout(ctx, ns, rid, controlapi.RolloutActionRequest{Reason: *reason})
					}
					if err != nil {
						return err
					}
					return t.print(e, p.reply(), func(w io.Writer) error { return printRollout(w, r) })
				})
			}
		},
	}
}

// rolloutID is id, or when it is empty the id of the rollout running on
// namespace ns; an error that says what to do when none runs.
func rolloutID(ctx context.Context, p *serverPlane, ns, id string) (string, error) {
	if id != "" {
		return id, nil
	}
	rs, err := p.c.ListRollouts(ctx, ns)
	if err != nil {
		return "", err
	}
	for _, r := range rs {
		if r.State == "running" {
			return r.ID, nil
		}
	}
	return "", fmt.Errorf("no rollout runs on %s: 'holdfast rollout list %s' lists the last that ended; give one with -id", ns, ns)
}

func rolloutListCommand() *command {
	return &command{
		name:    "rollout list",
		args:    "NAMESPACE",
		summary: "list a namespace's rollouts: the running one and the last that ended",
		doc: `
Rollout list lists NAMESPACE's rollouts, newest first: the running one and
the last few that ended (GET /control/namespaces/{ns}/rollouts), one a
line.
` + serverOnlyDoc,
		minArgs: 1, maxArgs: 1,
		flags: func(fs *flag.FlagSet) func(context.Context, *env, []string) error {
			t := addTargetFlags(fs, true)
			return func(ctx context.Context, e *env, args []string) error {
				ns := args[0]
				return withServer(ctx, t, "rollout list", func(ctx context.Context, p *serverPlane) error {
					return listRollouts(ctx, e, t, p, ns)
				})
			}
		},
	}
}

// watchPoll is how often rollout status -watch reads the rollout.
const watchPoll = 500 * time.Millisecond

// listRollouts prints namespace ns's rollouts.
func listRollouts(ctx context.Context, e *env, t *targetFlags, p *serverPlane, ns string) error {
	rs, err := p.c.ListRollouts(ctx, ns)
	if err != nil {
		return err
	}
	return t.print(e, p.reply(), func(w io.Writer) error { return printRollouts(w, ns, rs) })
}

// watchRollout prints rollout id of namespace ns, then again at each
// change of its state, stage, counts or reason, until it has ended (or
// ctx ends).
//
// ctx has no deadline of its own: each request has requestTimeout.
func watchRollout(ctx context.Context, e *env, t *targetFlags, p *serverPlane, ns, id string) error {
	var last string
	for {
		rctx, cancel := requestCtx(ctx)
		r, err := p.c.GetRollout(rctx, ns, id)
		cancel()
		if err != nil {
			return err
		}
		data := p.reply()
		// What changes: the record without its times of reading.
		key, _ := json.Marshal(r)
		if string(key) != last {
			last = string(key)
			if !t.json() {
				fmt.Fprintf(e.stdout, "--- %s\n", time.Now().UTC().Format(time.RFC3339))
			}
			if err := t.print(e, []byte(compactJSON(data)), func(w io.Writer) error { return printRollout(w, r) }); err != nil {
				return err
			}
		}
		if r.State != "" && r.State != "running" {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(watchPoll):
		}
	}
}

// printRollout prints a rollout's record as a table.
func printRollout(w io.Writer, r *controlapi.RolloutRecord) error {
	stages := make([]string, len(r.Stages))
	for i, s := range r.Stages {
		stages[i] = percent(s)
	}
	revs := make([]string, len(r.Revisions))
	for i, v := range r.Revisions {
		revs[i] = strconv.FormatInt(v, 10)
	}
	tw := newTable(w)
	tw.row("rollout", r.ID)
	if r.Namespace != "" {
		tw.row("namespace", r.Namespace)
	}
	tw.row("state", r.State)
	stage := fmt.Sprintf("%s of %s", percent(r.Stage), strings.Join(stages, " → "))
	switch {
	case r.Baking:
		stage += " (baking)"
	case r.Held:
		stage += " (held)"
	}
	tw.row("stage", stage)
	if r.Actor != "" {
		tw.row("started by", r.Actor)
	}
	tw.row("in stage", fmt.Sprintf("%d (%d reported, %d gone)", r.InStage, r.Reported, r.Gone))
	tw.row("clients", r.Clients)
	tw.row("served", r.Served)
	tw.row("acked", r.Acked)
	tw.row("nacked", r.Nacked)
	tw.row("would nack", r.WouldNack)
	tw.row("lagging", r.Lagging)
	tw.row("reason", orDash(r.Reason))
	tw.row("revisions", orDash(strings.Join(revs, ", ")))
	for i, t := range r.GateFailing {
		if !t.IsZero() {
			tw.row(fmt.Sprintf("gate %d failing since", i), timeCell(t))
		}
	}
	if err := tw.flush(); err != nil {
		return err
	}
	if len(r.Decisions) == 0 {
		return nil
	}
	// The decisions, each with its actor and its reason whole (the gates'
	// figures included).
	if _, err := fmt.Fprintln(w, "\ndecisions:"); err != nil {
		return err
	}
	dw := newTable(w, "AT", "WHAT", "STAGE", "REVISION", "ACTOR", "COUNTS", "REASON")
	for _, d := range r.Decisions {
		rev, counts := "-", "-"
		if d.Revision != 0 {
			rev = strconv.FormatInt(d.Revision, 10)
		}
		if c := d.Counts; c != nil { // the stage's counts it was taken on
			counts = fmt.Sprintf("%d/%d reported, %d nacked, %d gone", c.Reported, c.InStage, c.Nacked, c.Gone)
		}
		dw.row(timeCell(d.At), d.What, percent(d.Stage), rev, orDash(d.Actor), counts, orDash(d.Reason))
	}
	return dw.flush()
}

// printRollouts prints the list of a namespace's rollouts, one a line.
func printRollouts(w io.Writer, ns string, rs []controlapi.RolloutRecord) error {
	if len(rs) == 0 {
		_, err := fmt.Fprintf(w, "no rollouts of %s\n", ns)
		return err
	}
	tw := newTable(w, "ROLLOUT", "STATE", "STAGE", "CLIENTS", "SERVED", "NACKED", "WOULD-NACK", "LAGGING", "REASON")
	for _, r := range rs {
		tw.row(r.ID, r.State, percent(r.Stage), r.Clients, r.Served, r.Nacked, r.WouldNack, r.Lagging, orDash(clip(r.Reason, 80)))
	}
	return tw.flush()
}

func percent(p float64) string { return strconv.FormatFloat(p, 'f', -1, 64) + "%" }

// percentList is a comma-separated list of percentages (-stages).
type percentList []float64

func (l *percentList) String() string {
	if l == nil {
		return ""
	}
	s := make([]string, len(*l))
	for i, p := range *l {
		s[i] = strconv.FormatFloat(p, 'f', -1, 64)
	}
	return strings.Join(s, ",")
}

func (l *percentList) Set(s string) error {
	*l = (*l)[:0]
	for item := range strings.SplitSeq(s, ",") {
		item = strings.TrimSuffix(strings.TrimSpace(item), "%")
		p, err := strconv.ParseFloat(item, 64)
		if err != nil || math.IsNaN(p) || math.IsInf(p, 0) {
			return fmt.Errorf("%q is not a percentage", item)
		}
		*l = append(*l, p)
	}
	return nil
}
