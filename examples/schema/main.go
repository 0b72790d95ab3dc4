// Command schema shows what happens when a client's schema rejects an
// update: a NACK. Two builds of a service watch one namespace; the older
// build declares, with config.Schema, the values it can parse. A
// publish that it cannot parse is rejected whole by that client, which keeps
// serving its last good data and reports the rejection to the server (see
// GET /control/clients); the newer build applies it. A later revision that
// passes applies normally.
//
//	go run ./examples/schema
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/holdfast-dev/holdfast/config"
	"github.com/holdfast-dev/holdfast/holdfasttest"
)

const (
	ns        = "routes"
	stepLimit = 5 * time.Second
)

// oldBuildSchema is what the older build can parse: two strategies, an
// integer timeout.
const oldBuildSchema = `{
  "type": "object",
  "properties": {
    "strategy":   {"enum": ["round-robin", "least-conn"]},
    "timeout-ms": {"type": "integer", "minimum": 1}
  },
  "required": ["strategy"]
}`

func main() {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := run(ctx, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "schema:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, out io.Writer) error {
	say := func(format string, args ...any) { fmt.Fprintf(out, format+"\n", args...) }

	srv, err := holdfasttest.Start(holdfasttest.WithHeartbeat(200 * time.Millisecond))
	if err != nil {
		return err
	}
	defer srv.Close()
	if _, err := srv.Publish(ns, map[string]any{"strategy": "round-robin", "timeout-ms": 200}); err != nil {
		return err
	}

	open := func(id string, opts ...config.NamespaceOption) (*config.Client, *config.Namespace, error) {
		c, err := config.New(config.WithEndpoint(srv.URL()), config.WithClientID(id))
		if err != nil {
			return nil, nil, err
		}
		octx, cancel := context.WithTimeout(ctx, stepLimit)
		defer cancel()
		n, err := c.Namespace(octx, ns, opts...)
		if err != nil {
			c.Close()
			return nil, nil, err
		}
		return c, n, nil
	}
	oldClient, oldNS, err := open("api-v1", config.Schema([]byte(oldBuildSchema)))
	if err != nil {
		return err
	}
	defer oldClient.Close()
	newClient, newNS, err := open("api-v2")
	if err != nil {
		return err
	}
	defer newClient.Close()
	say("1. Two clients watch %s: api-v1 checks updates with Schema, api-v2 does not.", ns)
	say("   both serve revision %d, strategy=%q.", oldNS.Revision(), oldNS.String("strategy", ""))

	// A strategy that only the newer build knows. api-v1 hears of its
	// rejection through OnReject.
	rejections := make(chan *config.RejectedError, 1)
	stop := oldNS.OnReject(func(rerr *config.RejectedError) {
		select {
		case rejections <- rerr:
		default:
		}
	})
	defer stop()
	rev, err := srv.Publish(ns, map[string]any{"strategy": "weighted"})
	if err != nil {
		return err
	}
	say("2. Published revision %d: strategy=\"weighted\".", rev)
	wctx, cancel := context.WithTimeout(ctx, stepLimit)
	defer cancel()
	if err := newNS.WaitForRevision(wctx, rev); err != nil {
		return fmt.Errorf("api-v2 did not reach revision %d: %w", rev, err)
	}
	select {
	case rerr := <-rejections:
		say("   api-v1 OnReject: revision %d rejected.", rerr.Revision)
	case <-wctx.Done():
		return fmt.Errorf("waiting for api-v1's rejection: %w", wctx.Err())
	}
	say("   api-v2 applied it: revision %d, strategy=%q.", newNS.Revision(), newNS.String("strategy", ""))
	st := oldNS.Status()
	say("   api-v1 rejected it and keeps its last good: revision %d, strategy=%q, state %s.",
		oldNS.Revision(), oldNS.String("strategy", ""), st.State)
	say("   api-v1 Status().LastError: kind %s, errors.Is(err, config.ErrRejected) = %v.",
		st.LastError.Kind, errors.Is(st.LastError.Err, config.ErrRejected))

	// The server learns of it: GET /control/clients lists the nack.
	var nack holdfasttest.ClientState
	if err := within(ctx, func() bool {
		nack = findClient(ctx, srv, "api-v1")
		return nack.NackedRevision == rev
	}); err != nil {
		return fmt.Errorf("waiting for the nack on /control/clients: %w", err)
	}
	say("3. GET /control/clients shows the nack:")
	say("   client_id=%s acked_revision=%d nacked_revision=%d behind=%v",
		nack.ClientID, nack.AckedRevision, nack.NackedRevision, nack.Behind)
	say("   nack_error: %s", shorten(nack.NackError, 300))

	// A later revision that passes applies normally.
	rev, err = srv.Publish(ns, map[string]any{"strategy": "least-conn"})
	if err != nil {
		return err
	}
	wctx, cancel = context.WithTimeout(ctx, stepLimit)
	defer cancel()
	if err := oldNS.WaitForRevision(wctx, rev); err != nil {
		return fmt.Errorf("api-v1 did not reach revision %d: %w", rev, err)
	}
	say("4. Published revision %d: strategy=\"least-conn\". api-v1 applies it: strategy=%q, state %s.",
		rev, oldNS.String("strategy", ""), oldNS.Status().State)
	if err := within(ctx, func() bool { return findClient(ctx, srv, "api-v1").AckedRevision == rev }); err != nil {
		return fmt.Errorf("waiting for the ack: %w", err)
	}
	say("   GET /control/clients: api-v1 acked_revision=%d.", rev)
	return nil
}

// findClient reads GET /control/clients, through the server's client of
// its control API, and returns client id's entry for the namespace (the
// zero ClientState when absent or on error).
func findClient(ctx context.Context, srv *holdfasttest.Server, id string) holdfasttest.ClientState {
	all, err := srv.Client().Clients(ctx)
	if err != nil {
		return holdfasttest.ClientState{}
	}
	for _, c := range all.Clients {
		if c.ClientID == id && c.Namespace == ns {
			return c
		}
	}
	return holdfasttest.ClientState{}
}

// within polls cond until it holds, within stepLimit. Only the server's
// control API is polled: the client's own events are waited on.
func within(ctx context.Context, cond func() bool) error {
	ctx, cancel := context.WithTimeout(ctx, stepLimit)
	defer cancel()
	t := time.NewTicker(10 * time.Millisecond)
	defer t.Stop()
	for !cond() {
		select {
		case <-t.C:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}

func shorten(s string, n int) string {
	s = strings.Join(strings.Fields(s), " ")
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}
