package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"time"

	"github.com/holdfast-dev/holdfast/controlapi"
)

func namespacesCommand() *command {
	return &command{
		name:    "namespaces",
		args:    "",
		summary: "list the store's namespaces: revision, last change, live clients",
		doc: `
Namespaces lists the namespaces the token controls, by name: each one's
revision, its last change (when, by whom, why) and its live clients (as
'holdfast status' counts them). The server answers from an index that
every publish keeps, a page at a time; the command reads every page
(-limit N stops after N namespaces). -prefix PREFIX lists the namespaces
whose names begin with PREFIX. With -o json, the API's JSON, the pages
joined: {"namespaces":[...]}, with "next" when -limit stopped it (pass it
as -after to go on).
` + serverOnlyDoc,
		minArgs: 0, maxArgs: 0,
		flags: func(fs *flag.FlagSet) func(context.Context, *env, []string) error {
			t := addTargetFlags(fs, true)
			prefix := fs.String("prefix", "", "list the namespaces whose names begin with `PREFIX`")
			after := fs.String("after", "", "list the namespaces whose names sort after `NAME`")
			limit := fs.Int("limit", 0, "list at most `N` namespaces (0: all)")
			return func(ctx context.Context, e *env, _ []string) error {
				if *limit < 0 {
					return usagef("-limit %d: want 0 (all) or more", *limit)
				}
				return withServer(ctx, t, "namespaces", func(ctx context.Context, p *serverPlane) error {
					all := &controlapi.Namespaces{Namespaces: []controlapi.NamespaceInfo{}}
					opts := controlapi.NamespacesOptions{Prefix: *prefix, After: *after}
					for {
						opts.Limit = controlapi.MaxNamespacesLimit
						if *limit > 0 {
							opts.Limit = min(opts.Limit, *limit-len(all.Namespaces))
						}
						page, err := p.c.Namespaces(ctx, opts)
						if err != nil {
							return err
						}
						all.Namespaces = append(all.Namespaces, page.Namespaces...)
						all.Next = page.Next
						if page.Next == "" || *limit > 0 && len(all.Namespaces) >= *limit {
							break
						}
						opts.After = page.Next
					}
					_, data, err := reply(all, nil)
					if err != nil {
						return err
					}
					return t.print(e, data, func(w io.Writer) error {
						if len(all.Namespaces) == 0 {
							_, err := fmt.Fprintln(w, "no namespaces")
							return err
						}
						now := time.Now()
						tw := newTable(w, "NS", "REVISION", "LAST CHANGE", "AGE", "ACTOR", "KIND", "REASON", "LIVE CLIENTS")
						for _, n := range all.Namespaces {
							actor := n.Actor
							if n.OnBehalfOf != "" {
								actor += " for " + n.OnBehalfOf
							}
							tw.row(n.Namespace, n.Revision, timeCell(n.CommittedAt), ageCell(now, n.CommittedAt), orDash(actor), orDash(n.Kind), orDash(clip(n.Reason, 60)), n.LiveClients)
						}
						if err := tw.flush(); err != nil {
							return err
						}
						if all.Next != "" {
							_, err := fmt.Fprintf(w, "more after %s (-after %s)\n", all.Next, all.Next)
							return err
						}
						return nil
					})
				})
			}
		},
	}
}
