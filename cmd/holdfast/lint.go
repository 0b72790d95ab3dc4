package main

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/holdfast-dev/holdfast/controlapi"
)

// The lint commands: the store's lints, through the server's control API
// (PUT/GET/DELETE /control/lints…, POST /control/lints/{name}/test).

const lintDoc = `
A lint is a named rule that a change of a namespace must pass: a CEL
expression over old and new (the namespace's values before and after, as
maps of key to JSON value) and change ({"puts": [...], "deletes": [...]}),
with a namespace pattern (path.Match's: "payments.*"), a message, a
severity (block or warn), an optional incident link, and examples that must
pass and must fail, run when it is saved. Setting and deleting lints needs
the admin scope; reading them any control scope; testing one control of
the namespace it runs over. See docs/CHANGES.md, "Lints".`

// readInput reads file, or standard input when it is "-".
func readInput(file string) ([]byte, error) {
	if file == "-" {
		return io.ReadAll(io.LimitReader(os.Stdin, maxReplyBytes))
	}
	return os.ReadFile(file)
}

// readLintFile reads a lint's JSON from file ("-": standard input).
func readLintFile(file string) (controlapi.Lint, error) {
	data, err := readInput(file)
	if err != nil {
		return controlapi.Lint{}, usagef("%v", err)
	}
	var l controlapi.Lint
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&l); err != nil {
		return controlapi.Lint{}, usagef("%s: not a lint's JSON: %v", file, err)
	}
	return l, nil
}

// lintSpecFlags are the flags that give a lint: -f FILE, and each field,
// which overrides the file's.
type lintSpecFlags struct {
	file, namespaces, expr, message, severity, link *string
}

func addLintSpecFlags(fs *flag.FlagSet) *lintSpecFlags {
	return &lintSpecFlags{
		file:       fs.String("f", "", "read the lint from JSON `FILE` (- reads standard input), the API's body; the other flags override its fields"),
		namespaces: fs.String("namespaces", "", "the `PATTERN` of the namespaces the lint applies to (path.Match's, e.g. payments.*)"),
		expr:       fs.String("expr", "", "the CEL `EXPRESSION` that must hold, over old, new and change"),
		message:    fs.String("message", "", "the `TEXT` a change that fails the lint is told"),
		severity:   fs.String("severity", "", "block or warn (default block)"),
		link:       fs.String("link", "", "the `URL` of the incident the lint came from"),
	}
}

// spec returns the lint the flags give (ok false: none at all).
func (f *lintSpecFlags) spec() (l controlapi.Lint, ok bool, err error) {
	if *f.file != "" {
		if l, err = readLintFile(*f.file); err != nil {
			return l, false, err
		}
		ok = true
	}
	for _, o := range []struct{ flag, dst *string }{
		{f.namespaces, &l.Namespaces}, {f.expr, &l.Expr}, {f.message, &l.Message}, {f.severity, &l.Severity}, {f.link, &l.Link},
	} {
		if *o.flag != "" {
			*o.dst, ok = *o.flag, true
		}
	}
	if ok && l.Severity == "" {
		l.Severity = controlapi.LintBlock
	}
	return l, ok, nil
}

func lintSetCommand() *command {
	return &command{
		name:    "lint set",
		args:    "NAME",
		summary: "set a lint: a CEL rule every change of the namespaces it matches must pass",
		doc: `
Lint set stores the lint NAME, read from -f FILE (the API's JSON body,
with its examples) or given by flags (-namespaces, -expr, -message,
-severity, -link; each overrides the file's field). The server checks it
first: an expression that does not parse or type-check is refused (400),
one whose estimated cost is over the limit too (422 lint_too_costly), and
so is one whose examples do not come out as they say (422
lint_examples_failed, with each example that failed).
` + lintDoc,
		minArgs: 1, maxArgs: 1,
		flags: func(fs *flag.FlagSet) func(context.Context, *env, []string) error {
			t := addTargetFlags(fs, true)
			sf := addLintSpecFlags(fs)
			return func(ctx context.Context, e *env, args []string) error {
				l, ok, err := sf.spec()
				switch {
				case err != nil:
					return err
				case !ok:
					return usagef("give the lint: -f FILE, or -namespaces and -expr")
				}
				return withServer(ctx, t, "lint set", func(ctx context.Context, p *serverPlane) error {
					if _, err := p.c.PutLint(ctx, args[0], l); err != nil {
						return err
					}
					if t.json() {
						_, err := e.stdout.Write(p.reply())
						return err
					}
					_, err := fmt.Fprintf(e.stdout, "lint %s set\n", args[0])
					return err
				})
			}
		},
	}
}

func lintGetCommand() *command {
	return &command{
		name:    "lint get",
		args:    "NAME",
		summary: "print a lint",
		doc: `
Lint get prints the lint NAME: its namespaces, severity, expression,
message, link and examples (-o json: the API's reply, which lint set -f
takes back).
` + lintDoc,
		minArgs: 1, maxArgs: 1,
		flags: func(fs *flag.FlagSet) func(context.Context, *env, []string) error {
			t := addTargetFlags(fs, true)
			return func(ctx context.Context, e *env, args []string) error {
				return withServer(ctx, t, "lint get", func(ctx context.Context, p *serverPlane) error {
					l, err := p.c.GetLint(ctx, args[0])
					if err != nil {
						return err
					}
					if t.json() {
						_, err := e.stdout.Write(p.reply())
						return err
					}
					var b strings.Builder
					fmt.Fprintf(&b, "name:       %s\nnamespaces: %s\nseverity:   %s\nexpr:       %s\nmessage:    %s\n", l.Name, l.Namespaces, l.Severity, l.Expr, orDash(l.Message))
					if l.Link != "" {
						fmt.Fprintf(&b, "link:       %s\n", l.Link)
					}
					fmt.Fprintf(&b, "examples:   %d pass, %d fail\n", len(l.Examples.Pass), len(l.Examples.Fail))
					_, err = io.WriteString(e.stdout, b.String())
					return err
				})
			}
		},
	}
}

func lintListCommand() *command {
	return &command{
		name:    "lint list",
		summary: "list the store's lints",
		doc: `
Lint list lists the store's lints by name: namespaces, severity and
message.
` + lintDoc,
		flags: func(fs *flag.FlagSet) func(context.Context, *env, []string) error {
			t := addTargetFlags(fs, true)
			return func(ctx context.Context, e *env, _ []string) error {
				return withServer(ctx, t, "lint list", func(ctx context.Context, p *serverPlane) error {
					lints, err := p.c.ListLints(ctx)
					if err != nil {
						return err
					}
					if t.json() {
						_, err := e.stdout.Write(p.reply())
						return err
					}
					tab := newTable(e.stdout, "NAME", "NAMESPACES", "SEVERITY", "MESSAGE")
					for _, l := range lints {
						tab.row(l.Name, l.Namespaces, l.Severity, orDash(l.Message))
					}
					return tab.flush()
				})
			}
		},
	}
}

func lintDeleteCommand() *command {
	return &command{
		name:    "lint delete",
		args:    "NAME",
		summary: "delete a lint",
		doc: `
Lint delete deletes the lint NAME: changes are no longer checked by it.
` + lintDoc,
		minArgs: 1, maxArgs: 1,
		flags: func(fs *flag.FlagSet) func(context.Context, *env, []string) error {
			t := addTargetFlags(fs, true)
			return func(ctx context.Context, e *env, args []string) error {
				return withServer(ctx, t, "lint delete", func(ctx context.Context, p *serverPlane) error {
					if err := p.c.DeleteLint(ctx, args[0]); err != nil {
						return err
					}
					return t.done(e, "lint %s deleted", args[0])
				})
			}
		},
	}
}

func lintTestCommand() *command {
	return &command{
		name:    "lint test",
		args:    "NAME",
		summary: "run a lint over a namespace's history: the revisions it would have blocked",
		doc: `
Lint test runs the lint NAME over the last -limit revisions of namespace
-ns (each revision's change, from the values before it to the values at
it) and prints each revision the lint blocks or warns of, with its
message. With -f FILE or the lint's flags (as lint set takes them) it runs
that lint, unsaved, instead of the one saved as NAME: show that a new lint
would have caught the incident before saving it.
` + lintDoc,
		minArgs: 1, maxArgs: 1,
		flags: func(fs *flag.FlagSet) func(context.Context, *env, []string) error {
			t := addTargetFlags(fs, true)
			ns := fs.String("ns", "", "the `NAMESPACE` whose history the lint runs over (required)")
			limit := fs.Int("limit", 0, "how many revisions, newest first (0: the server's default, 100)")
			sf := addLintSpecFlags(fs)
			return func(ctx context.Context, e *env, args []string) error {
				if *ns == "" {
					return usagef("-ns NAMESPACE is required")
				}
				if *limit < 0 {
					return usagef("-limit must not be negative, got %d", *limit)
				}
				opts := controlapi.LintTestOptions{Limit: *limit}
				if l, ok, err := sf.spec(); err != nil {
					return err
				} else if ok {
					opts.Lint = &l
				}
				return withServer(ctx, t, "lint test", func(ctx context.Context, p *serverPlane) error {
					res, err := p.c.TestLint(ctx, args[0], *ns, opts)
					if err != nil {
						return err
					}
					if t.json() {
						_, err := e.stdout.Write(p.reply())
						return err
					}
					if len(res.Results) > 0 {
						tab := newTable(e.stdout, "REVISION", "RESULT", "MESSAGE")
						for _, r := range res.Results {
							tab.row(r.Revision, r.Result, orDash(r.Message))
						}
						if err := tab.flush(); err != nil {
							return err
						}
					}
					more := ""
					if res.Truncated {
						more = " (the store's history ends there)"
					}
					_, err = fmt.Fprintf(e.stdout, "%d of %d revisions would have been blocked, %d warned of%s\n",
						len(res.WouldBlock), res.Checked, len(res.WouldWarn), more)
					return err
				})
			}
		},
	}
}
