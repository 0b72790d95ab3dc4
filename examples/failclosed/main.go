// Command failclosed shows the fail-closed staleness policy: a namespace
// whose data must not be used once it is too old. Past MaxStaleness it
// serves the caller's baked-in Defaults instead of the last good data, and
// a new client refuses to open it without fresh enough data. When the
// config plane returns, the real data is served again.
//
//	go run ./examples/failclosed
//
// The default policy, fail-open, keeps serving the last good data past
// MaxStaleness and reports a breach instead (see the quickstart).
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

const (
	ns           = "checkout.limits"
	heartbeat    = 100 * time.Millisecond
	maxStaleness = 500 * time.Millisecond
	stepLimit    = 5 * time.Second
)

func main() {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := run(ctx, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "failclosed:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, out io.Writer) error {
	say := func(format string, args ...any) { fmt.Fprintf(out, format+"\n", args...) }

	srv, err := holdfasttest.Start(holdfasttest.WithHeartbeat(heartbeat))
	if err != nil {
		return err
	}
	defer srv.Close()
	if _, err := srv.Publish(ns, map[string]any{"max-order-eur": 5000, "allow-new-customers": true}); err != nil {
		return err
	}

	newClient := func() (*config.Client, error) {
		return config.New(
			config.WithEndpoint(srv.URL()),
			config.WithStreamIdleTimeout(3*heartbeat),
			config.WithReconnectBackoff(50*time.Millisecond, 200*time.Millisecond),
		)
	}
	// The namespace's policy: data older than maxStaleness is not to be
	// trusted; these conservative values are served instead.
	policy := []config.NamespaceOption{
		config.FailClosed(),
		config.MaxStaleness(maxStaleness),
		config.Defaults(map[string]any{"max-order-eur": 100, "allow-new-customers": false}),
	}
	client, err := newClient()
	if err != nil {
		return err
	}
	defer client.Close()
	openCtx, cancel := context.WithTimeout(ctx, stepLimit)
	defer cancel()
	limits, err := client.Namespace(openCtx, ns, policy...)
	if err != nil {
		return err
	}
	states := make(chan config.Status, 16)
	stop := limits.OnStatusChange(func(st config.Status) { states <- st })
	defer stop()

	read := func() string {
		return fmt.Sprintf("max-order-eur=%d allow-new-customers=%v",
			limits.Int("max-order-eur", 0), limits.Bool("allow-new-customers", false))
	}
	say("1. Opened %s, FailClosed with MaxStaleness %v: state %s, %s.", ns, maxStaleness, limits.Status().State, read())

	if err := srv.Stop(); err != nil {
		return err
	}
	say("2. Stopped the server.")
	for _, want := range []config.State{config.StateStale, config.StateFailedClosed} {
		st, err := waitState(ctx, states, want)
		if err != nil {
			return err
		}
		say("   state %s, serving data from %s: %s.", st.State, st.Origin, read())
	}

	// A second process starting now has no fresh data anywhere: it must
	// not open with values it cannot trust.
	other, err := newClient()
	if err != nil {
		return err
	}
	defer other.Close()
	shortCtx, cancel2 := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel2()
	_, err = other.Namespace(shortCtx, ns, policy...)
	if !errors.Is(err, config.ErrStale) {
		return fmt.Errorf("a fail-closed open with the server down returned %v; want ErrStale", err)
	}
	say("3. A new client cannot open it while the server is down: Namespace returns an *OpenError;")
	say("   errors.Is(err, config.ErrStale) = %v, errors.Is(err, context.DeadlineExceeded) = %v.",
		errors.Is(err, config.ErrStale), errors.Is(err, context.DeadlineExceeded))

	if err := srv.Restart(); err != nil {
		return err
	}
	say("4. Restarted the server.")
	st, err := waitState(ctx, states, config.StateFresh)
	if err != nil {
		return err
	}
	say("   state %s, serving data from %s again: %s.", st.State, st.Origin, read())
	return nil
}

// waitState waits until the namespace reports state want, within stepLimit.
func waitState(ctx context.Context, states <-chan config.Status, want config.State) (config.Status, error) {
	t := time.NewTimer(stepLimit)
	defer t.Stop()
	for {
		select {
		case st := <-states:
			if st.State == want {
				return st, nil
			}
		case <-t.C:
			return config.Status{}, fmt.Errorf("state %s not reached within %v", want, stepLimit)
		case <-ctx.Done():
			return config.Status{}, ctx.Err()
		}
	}
}
