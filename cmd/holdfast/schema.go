package main

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"io"
)

// The schema commands: a namespace's JSON Schema on the holdfast server
// (PUT, GET and DELETE /control/namespaces/{ns}/schema).

func schemaSetCommand() *command {
	return &command{
		name:    "schema set",
		args:    "NAMESPACE FILE",
		summary: "set a namespace's JSON Schema: later publishes that fail it are refused",
		doc: `
Schema set stores FILE (a JSON Schema; - reads standard input) as
NAMESPACE's schema. The server compiles it first: an invalid schema, or
one that refers to another document, is refused (400) and nothing
changes. Every later publish and rollback whose resulting content fails
it is refused with every failure (422). Content already published is not
checked.
` + serverOnlyDoc,
		minArgs: 2, maxArgs: 2,
		flags: func(fs *flag.FlagSet) func(context.Context, *env, []string) error {
			t := addTargetFlags(fs, true)
			return func(ctx context.Context, e *env, args []string) error {
				ns, name := args[0], args[1]
				data, err := readInput(name)
				if err != nil {
					return usagef("%v", err)
				}
				if !json.Valid(data) {
					return usagef("%s is not JSON", name)
				}
				return withServer(ctx, t, "schema set", func(ctx context.Context, p *serverPlane) error {
					if err := p.c.PutSchema(ctx, ns, data); err != nil {
						return err
					}
					return t.done(e, "schema of %s set", ns)
				})
			}
		},
	}
}

func schemaGetCommand() *command {
	return &command{
		name:    "schema get",
		args:    "NAMESPACE",
		summary: "print a namespace's JSON Schema",
		doc: `
Schema get prints NAMESPACE's JSON Schema as stored (indented; -o json
prints it as the server sent it). A namespace without one is a failure
(exit status 1, "not_found").
` + serverOnlyDoc,
		minArgs: 1, maxArgs: 1,
		flags: func(fs *flag.FlagSet) func(context.Context, *env, []string) error {
			t := addTargetFlags(fs, true)
			return func(ctx context.Context, e *env, args []string) error {
				return withServer(ctx, t, "schema get", func(ctx context.Context, p *serverPlane) error {
					data, err := p.c.GetSchema(ctx, args[0])
					if err != nil {
						return err
					}
					return t.print(e, data, func(w io.Writer) error {
						var buf bytes.Buffer
						if err := json.Indent(&buf, data, "", "  "); err != nil {
							return err
						}
						buf.WriteByte('\n')
						_, err := w.Write(buf.Bytes())
						return err
					})
				})
			}
		},
	}
}

func schemaDeleteCommand() *command {
	return &command{
		name:    "schema delete",
		args:    "NAMESPACE",
		summary: "remove a namespace's JSON Schema",
		doc: `
Schema delete removes NAMESPACE's schema: later publishes are checked
against none. A namespace without one is a failure (exit status 1,
"not_found").
` + serverOnlyDoc,
		minArgs: 1, maxArgs: 1,
		flags: func(fs *flag.FlagSet) func(context.Context, *env, []string) error {
			t := addTargetFlags(fs, true)
			return func(ctx context.Context, e *env, args []string) error {
				return withServer(ctx, t, "schema delete", func(ctx context.Context, p *serverPlane) error {
					if err := p.c.DeleteSchema(ctx, args[0]); err != nil {
						return err
					}
					return t.done(e, "schema of %s deleted", args[0])
				})
			}
		},
	}
}
