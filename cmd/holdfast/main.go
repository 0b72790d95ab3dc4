// Command holdfast is holdfast's one binary: the server, the relay, and
// the operator commands.
//
//	holdfast server -data-dir /var/lib/holdfast -addr 127.0.0.1:8080 -admin-addr 127.0.0.1:9090
//	holdfast server -etcd 10.0.0.1:2379,10.0.0.2:2379,10.0.0.3:2379 -addr :8443 -tls-cert server.pem -tls-key server-key.pem
//	holdfast relay -addr :8443 -tls-cert relay.pem -tls-key relay-key.pem -upstream https://origin-a:8443,https://origin-b:8443 -cache-dir /var/lib/holdfast
//	holdfast publish -server https://origin:8443 -actor alice -reason INC-1234 -if-revision 41 payments.prod retry-timeout-ms=50
//	holdfast history -server https://origin:8443 -limit 20 payments.prod
//	holdfast get -server https://origin:8443 -at 2026-12-01T14:03:00Z payments.prod
//	holdfast diff -etcd 10.0.0.1:2379,10.0.0.2:2379 payments.prod 40 42
//	holdfast rollback -server https://origin:8443 -to 40 -reason "INC-1234: revert" payments.prod
//	holdfast status -server https://origin:8443 payments.prod
//	holdfast clients -server https://origin:8443 payments.prod
//	holdfast namespaces -server https://origin:8443 -prefix payments.
//	holdfast rollout start -server https://origin:8443 -stages 1,10,100 -bake 2m payments.prod retry-timeout-ms=50
//	holdfast rollout status -server https://origin:8443 -watch payments.prod
//	holdfast schema set -server https://origin:8443 payments.prod payments.schema.json
//	holdfast version
//	holdfast help [COMMAND]
//
// Without TLS (-tls-cert, -tls-key) a listener serves loopback only, unless
// -plaintext says a balancer in front terminates TLS.
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
