package main

import (
	"context"
	"flag"
	"fmt"
	"strings"

	"github.com/holdfast-dev/holdfast/controlapi"
)

// The token commands: the store's bearer tokens, through the server's
// control API (POST/GET/DELETE /control/tokens…), with the admin scope.

const tokenDoc = `
A token is a name, scopes and a secret; the store keeps the SHA-256 of the
secret, never the secret, and every server of the store (and every relay
that syncs from one) knows a new or revoked token within seconds. Scopes:

	-control PATTERNS  the namespaces the token may change (publish,
	                   rollback, schema, rollouts) and read on the control
	                   API; "*" also allows store-wide operations (compact)
	-data PATTERNS     the namespaces the token may read on the data plane
	                   (snapshot, watch, stream) and ack
	-admin             token management and the admin endpoints; the first
	                   admin token makes the store require tokens for good.
	                   It does not publish: an operator's admin token
	                   that is to publish takes -control (and -data) too
	-relay             a relay's own token: it may read the token records
	                   (hashes and scopes) to check its clients' tokens

Patterns are path.Match's, comma-separated: "payments.*" matches
payments.prod and payments.prod.eu, not payments. These commands need a
token with the admin scope (-token-file, $HOLDFAST_TOKEN or -token). See
docs/SERVER.md, "Tokens".`

func tokenCreateCommand() *command {
	return &command{
		name:    "token create",
		args:    "NAME",
		summary: "create a token in the store and print its secret (once)",
		doc: `
Token create creates the token NAME with the scopes of its flags and prints
its secret on stdout, this once: the store keeps only its hash. With -o json
it prints the API's reply, the secret in "secret". -expires D makes the
token stop authenticating D from now (e.g. 720h).

With -subject SUBJECT it creates a certificate identity instead, with no
secret: a caller whose TLS client certificate verifies against the
listener's -tls-client-ca and has that subject (RFC 2253, as in
'CN=deploy-bot,O=example') gets the token's scopes without sending a
token, and the audit names it by the subject. A request that sends a
token is decided by its token.
` + tokenDoc,
		minArgs: 1, maxArgs: 1,
		flags: func(fs *flag.FlagSet) func(context.Context, *env, []string) error {
			t := addTargetFlags(fs, true)
			var control, data list
			fs.Var(&control, "control", "the comma-separated `PATTERNS` of the namespaces the token may control")
			fs.Var(&data, "data", "the comma-separated `PATTERNS` of the namespaces the token may read")
			admin := fs.Bool("admin", false, "grant the admin scope: token management and the admin endpoints")
			relayScope := fs.Bool("relay", false, "grant the relay scope: a relay's own token, to check its clients' tokens")
			expires := fs.Duration("expires", 0, "the token stops authenticating this long from now (0: never)")
			subject := fs.String("subject", "", "a certificate identity: the `SUBJECT` (RFC 2253) of the callers' verified client certificates; no secret")
			return func(ctx context.Context, e *env, args []string) error {
				if *expires < 0 {
					return usagef("-expires must not be negative, got %v", *expires)
				}
				if len(control) == 0 && len(data) == 0 && !*admin && !*relayScope {
					return usagef("give at least one scope: -control, -data, -admin or -relay")
				}
				req := controlapi.TokenCreateRequest{Name: args[0], Subject: *subject, Control: control, Data: data, Admin: *admin, Relay: *relayScope}
				if *expires > 0 {
					req.ExpiresIn = expires.String()
				}
				return withServer(ctx, t, "token create", func(ctx context.Context, p *serverPlane) error {
					created, err := p.c.CreateToken(ctx, req)
					if err != nil {
						return err
					}
					if created.Admin && len(created.Control) == 0 {
						// The bootstrap token has every scope; an admin
						// token made to replace it often has only this one.
						fmt.Fprintf(e.stderr, "note: %q may manage tokens but not publish or roll back: give it -control PATTERNS for that\n", created.Name)
					}
					if t.json() {
						_, err = e.stdout.Write(p.reply())
						return err
					}
					if created.Subject != "" {
						fmt.Fprintf(e.stderr, "certificate identity %q created for subject %q (%s)\n", created.Name, created.Subject, scopesCell(created.TokenInfo))
						return nil
					}
					fmt.Fprintln(e.stdout, created.Secret)
					fmt.Fprintf(e.stderr, "token %q created (%s); its secret is shown above, this once\n", created.Name, scopesCell(created.TokenInfo))
					return nil
				})
			}
		},
	}
}

func tokenListCommand() *command {
	return &command{
		name:    "token list",
		summary: "list the store's tokens: names, scopes, expiry, last use (never secrets)",
		doc: `
Token list lists the store's tokens: name, scopes, expiry, creation, who
created it, and last use (written at most once a minute per server, so it
may lag by that much). It never shows a secret or a hash.
` + tokenDoc,
		flags: func(fs *flag.FlagSet) func(context.Context, *env, []string) error {
			t := addTargetFlags(fs, true)
			return func(ctx context.Context, e *env, _ []string) error {
				return withServer(ctx, t, "token list", func(ctx context.Context, p *serverPlane) error {
					toks, err := p.c.ListTokens(ctx)
					if err != nil {
						return err
					}
					if t.json() {
						_, err = e.stdout.Write(p.reply())
						return err
					}
					tab := newTable(e.stdout, "NAME", "SCOPES", "EXPIRES", "CREATED", "BY", "LAST USED")
					for _, tok := range toks {
						exp := timeCell(tok.Expires)
						if tok.Expired {
							exp += " (expired)"
						}
						tab.row(tok.Name, scopesCell(tok), exp, timeCell(tok.Created), orDash(tok.CreatedBy), timeCell(tok.LastUsed))
					}
					return tab.flush()
				})
			}
		},
	}
}

func tokenRevokeCommand() *command {
	return &command{
		name:    "token revoke",
		args:    "NAME",
		summary: "revoke a token: every server and relay refuses it within seconds",
		doc: `
Token revoke deletes the token NAME from the store. The server that answers
refuses it at once; every other server of the store within its watch's
delay, and every relay that syncs tokens from a server within 5 s.
` + tokenDoc,
		minArgs: 1, maxArgs: 1,
		flags: func(fs *flag.FlagSet) func(context.Context, *env, []string) error {
			t := addTargetFlags(fs, true)
			return func(ctx context.Context, e *env, args []string) error {
				return withServer(ctx, t, "token revoke", func(ctx context.Context, p *serverPlane) error {
					if err := p.c.RevokeToken(ctx, args[0]); err != nil {
						return err
					}
					if !t.json() {
						fmt.Fprintf(e.stderr, "token %q revoked\n", args[0])
					}
					return nil
				})
			}
		},
	}
}

// scopesCell is a token's scopes in one cell.
func scopesCell(t controlapi.TokenInfo) string {
	var parts []string
	if len(t.Control) > 0 {
		parts = append(parts, "control="+strings.Join(t.Control, ","))
	}
	if len(t.Data) > 0 {
		parts = append(parts, "data="+strings.Join(t.Data, ","))
	}
	if t.Admin {
		parts = append(parts, "admin")
	}
	if t.Relay {
		parts = append(parts, "relay")
	}
	if t.Subject != "" {
		parts = append(parts, "subject="+t.Subject)
	}
	return strings.Join(parts, " ")
}
