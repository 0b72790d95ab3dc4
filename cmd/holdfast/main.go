// Command holdfast is holdfast's one binary: the server, the relay, and
// the operator commands.
//
//	holdfast server -data-dir /var/lib/holdfast -addr :8080 -admin-addr 127.0.0.1:9090
//	holdfast server -etcd 10.0.0.1:2379,10.0.0.2:2379,10.0.0.3:2379 -addr :8080
//	holdfast relay -addr :8081 -upstream http://origin-a:8080,http://origin-b:8080 -cache-dir /var/lib/holdfast
//	holdfast publish -server http://origin:8080 -actor alice -reason INC-1234 -if-revision 41 payments.prod retry-timeout-ms=50
//	holdfast history -server http://origin:8080 -limit 20 payments.prod
//	holdfast get -server http://origin:8080 -at 2026-12-01T14:03:00Z payments.prod
//	holdfast diff -etcd 10.0.0.1:2379,10.0.0.2:2379 payments.prod 40 42
//	holdfast rollback -server http://origin:8080 -to 40 -reason "INC-1234: revert" payments.prod
//	holdfast status -server http://origin:8080 payments.prod
//	holdfast clients -server http://origin:8080 payments.prod
//	holdfast namespaces -server http://origin:8080 -prefix payments.
//	holdfast rollout start -server http://origin:8080 -stages 1,10,100 -bake 2m payments.prod retry-timeout-ms=50
//	holdfast rollout status -server http://origin:8080 -watch payments.prod
//	holdfast schema set -server http://origin:8080 payments.prod payments.schema.json
//	holdfast version
//	holdfast help [COMMAND]
//
// The operator commands reach the server's control API with -server (a
// token from -token-file, $HOLDFAST_TOKEN or -token); history, get and
// diff can also read etcd directly with -etcd. Writes go through the
// server alone.
//
// Every subcommand follows the same conventions: flags before positional
// arguments, one flag.FlagSet each, human-readable output by default and
// -o json for the API's JSON, and exit status 0 on success, 1 when the
// server refuses or fails the operation (its reason on stderr), 2 on a
// usage error. See `holdfast help`.
//
// It is a module of its own (cmd/holdfast, in the repository's go.work)
// because the server and /metrics bring in etcd (its server and client),
// gRPC and the OpenTelemetry SDK, which the SDK's own module does not depend on:
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
