// Command holdfast is holdfast's one binary: the reference server, the
// relay, and (to come) the operator commands.
//
//	holdfast serve -addr 127.0.0.1:8080 -admin-addr 127.0.0.1:9090
//	holdfast relay -addr :8081 -upstream http://origin:8080 -cache-dir /var/lib/holdfast
//	holdfast relay -addr :8081 -upstream etcd://10.0.0.1:2379,10.0.0.2:2379,10.0.0.3:2379
//	holdfast help [COMMAND]
//
// Every subcommand follows the same conventions: flags before positional
// arguments, one flag.FlagSet each, human-readable output by default and
// -o json for the API's JSON, and exit status 0 on success, 1 when the
// server refuses or fails the operation (its reason on stderr), 2 on a
// usage error. See `holdfast help`.
//
// It is a module of its own (cmd/holdfast, in the repository's go.work)
// because the etcd upstream and /metrics bring in etcd's client, gRPC and
// the OpenTelemetry SDK, which the SDK's own module does not depend on:
//
//	cd cmd/holdfast && go build .
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	go func() {
		// After the first signal, the next one kills at once: a shutdown
		// that hangs can still be interrupted.
		<-ctx.Done()
		stop()
	}()
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}
