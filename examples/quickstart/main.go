// Command quickstart is holdfast's five-minute tour. It starts the reference
// server in-process, opens a namespace, reads it, subscribes to changes,
// then takes the server down and shows the client serving stale data,
// restarting from its cache directory while the server is still down, and
// converging once the server is back:
//
//	go run ./examples/quickstart
//
// Everything happens on 127.0.0.1 and in a temporary directory, removed at
// the end. Every wait is bounded; the whole run takes about three seconds.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/holdfast-dev/holdfast/config"
	"github.com/holdfast-dev/holdfast/holdfasttest"
)

const ns = "payments.prod"

// Timings: a server heartbeat of 200ms (the default is 5s) and a client that
// takes a stream for dead after three silent heartbeats and reconnects
// quickly, so that the whole tour fits in a few seconds.
const (
	heartbeat   = 200 * time.Millisecond
	idleTimeout = 3 * heartbeat
	stepLimit   = 5 * time.Second // no single step may take longer
)

func main() {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := run(ctx, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "quickstart:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, out io.Writer) (err error) {
	say := func(format string, args ...any) { fmt.Fprintf(out, format+"\n", args...) }

	// 1. The config plane: holdfast's reference server, in-process.
	srv, err := holdfasttest.Start(holdfasttest.WithAddr("127.0.0.1:0"), holdfasttest.WithHeartbeat(heartbeat))
	if err != nil {
		return err
	}
	defer srv.Close()
	say("1. Reference server listening on 127.0.0.1 (heartbeat %v).", heartbeat)

	rev, err := srv.Publish(ns, map[string]any{
		"retry-timeout-ms": 50,
		"mode":             "fast",
		"poll-interval":    "250ms",
		"dark-launch":      false,
	})
	if err != nil {
		return err
	}
	say("   Published %s at revision %d.", ns, rev)

	// 2. A client with a cache directory: every applied update is also
	// written to disk, for a restart while the config plane is down.
	dir, err := os.MkdirTemp("", "holdfast-quickstart-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)

	newClient := func(id string) (*config.Client, error) {
		return config.New(
			config.WithEndpoint(srv.URL()),
			config.WithClientID(id),
			config.WithCacheDir(dir),
			config.WithStreamIdleTimeout(idleTimeout),
			config.WithReconnectBackoff(50*time.Millisecond, 400*time.Millisecond),
		)
	}
	client, err := newClient("quickstart-1")
	if err != nil {
		return err
	}
	defer client.Close()

	openCtx, cancel := context.WithTimeout(ctx, stepLimit)
	defer cancel()
	payments, err := client.Namespace(openCtx, ns)
	if err != nil {
		return err
	}
	say("2. Opened %s: %s.", ns, describe(payments.Status()))
	say("   Typed getters read local memory, never the network:")
	say("     Int(\"retry-timeout-ms\")   = %d", payments.Int("retry-timeout-ms", 100))
	say("     String(\"mode\")            = %q", payments.String("mode", "safe"))
	say("     Duration(\"poll-interval\") = %v", payments.Duration("poll-interval", time.Second))
	say("     Bool(\"dark-launch\")       = %v", payments.Bool("dark-launch", false))
	say("     Int(\"max-retries\")        = %d (absent: the default)", payments.Int("max-retries", 3))

	// 3. Subscribe. Callbacks run on a goroutine of their own, in revision
	// order, after the new data is served; here they hand the change to
	// main, which prints it.
	changes := make(chan config.Change, 8)
	stop := payments.OnChange("retry-timeout-ms", func(ch config.Change) { changes <- ch })
	defer stop()

	rev, err = srv.Publish(ns, map[string]any{"retry-timeout-ms": 75})
	if err != nil {
		return err
	}
	say("3. Subscribed with OnChange(\"retry-timeout-ms\"), then published revision %d.", rev)
	select {
	case ch := <-changes:
		say("   OnChange: %s %s -> %s at revision %d; Int now returns %d.",
			ch.Key, ch.Old, ch.New, ch.Revision, payments.Int("retry-timeout-ms", 100))
	case <-time.After(stepLimit):
		return errors.New("no change callback within " + stepLimit.String())
	case <-ctx.Done():
		return ctx.Err()
	}

	// 4. The config plane goes down. Down = stale, not down: reads go on
	// from memory, and Status says how old the data is.
	if err := srv.Stop(); err != nil {
		return err
	}
	say("4. Stopped the server (as a crash would). Reads go on; staleness grows:")
	if err := waitState(ctx, payments, config.StateStale); err != nil {
		return err
	}
	for range 3 {
		select {
		case <-time.After(400 * time.Millisecond):
		case <-ctx.Done():
			return ctx.Err()
		}
		st := payments.Status()
		say("     state=%s staleness=%s retry-timeout-ms=%d (last error: %s)",
			st.State, roundTenth(st.Staleness), payments.Int("retry-timeout-ms", 100), st.LastError.Kind)
	}

	// 5. The process restarts while the server is still down: the new
	// client serves the last good data from its cache directory.
	if err := client.Close(); err != nil {
		return err
	}
	say("5. Closed the client. A new one opens %s from the cache directory, server still down:", ns)
	client2, err := newClient("quickstart-2")
	if err != nil {
		return err
	}
	defer client2.Close()
	openCtx2, cancel2 := context.WithTimeout(ctx, stepLimit)
	defer cancel2()
	start := time.Now()
	payments, err = client2.Namespace(openCtx2, ns)
	if err != nil {
		return err
	}
	took := time.Since(start)
	say("   Opened without the network (%s): %s.", fastOrSlow(took), describe(payments.Status()))
	say("   Int(\"retry-timeout-ms\") = %d; staleness carried over from the file: %s.",
		payments.Int("retry-timeout-ms", 100), roundTenth(payments.Status().Staleness))

	// 6. The server comes back with the store it had; a new revision is
	// published, and the client converges: resume, snapshot, watch.
	if err := srv.Restart(); err != nil {
		return err
	}
	rev, err = srv.Publish(ns, map[string]any{"retry-timeout-ms": 100, "max-retries": 5})
	if err != nil {
		return err
	}
	say("6. Restarted the server and published revision %d.", rev)
	waitCtx, cancel3 := context.WithTimeout(ctx, stepLimit)
	defer cancel3()
	if err := payments.WaitForRevision(waitCtx, rev); err != nil {
		return fmt.Errorf("waiting for revision %d: %w (status %+v)", rev, err, payments.Status())
	}
	if err := waitState(ctx, payments, config.StateFresh); err != nil {
		return err
	}
	say("   Converged: %s.", describe(payments.Status()))
	say("   Int(\"retry-timeout-ms\") = %d, Int(\"max-retries\") = %d.",
		payments.Int("retry-timeout-ms", 100), payments.Int("max-retries", 3))

	if err := client2.Close(); err != nil {
		return err
	}
	say("Done: closed the client and the server, removed the cache directory.")
	return nil
}

// describe is one line of a namespace's Status.
func describe(st config.Status) string {
	return fmt.Sprintf("revision %d, state %s, from %s", st.Revision, st.State, st.Origin)
}

// roundTenth prints a duration to a tenth of a second.
func roundTenth(d time.Duration) string {
	return fmt.Sprintf("%.1fs", d.Round(100*time.Millisecond).Seconds())
}

// fastOrSlow keeps the output stable: opening from disk takes milliseconds.
func fastOrSlow(d time.Duration) string {
	if d < 500*time.Millisecond {
		return "in under 0.5s"
	}
	return "in " + roundTenth(d)
}

// waitState waits, at most stepLimit, for ns to reach state.
func waitState(ctx context.Context, ns *config.Namespace, state config.State) error {
	ctx, cancel := context.WithTimeout(ctx, stepLimit)
	defer cancel()
	if err := ns.WaitForState(ctx, state); err != nil {
		return fmt.Errorf("waiting for %v: %w", state, err)
	}
	return nil
}
