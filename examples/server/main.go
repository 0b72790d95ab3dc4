// Command server runs holdfast's reference server for local development:
//
//	go run ./examples/server -addr 127.0.0.1:8080 -heartbeat 5s -retention 1000
//
// Publish with the control API, e.g.
//
//	curl -d '{"puts":{"retry-timeout-ms":50}}' localhost:8080/control/namespaces/payments.prod/publish
//
// and point a holdfast client at http://127.0.0.1:8080.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/holdfast-dev/holdfast/holdfasttest"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	err := run(ctx, os.Args[1:], os.Stderr, nil)
	if errors.Is(err, flag.ErrHelp) {
		return
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "server:", err)
		os.Exit(1)
	}
}

// run serves until ctx ends. ready, if not nil, is called with the
// server's URL once it listens.
func run(ctx context.Context, args []string, stderr io.Writer, ready func(url string)) error {
	fs := flag.NewFlagSet("server", flag.ContinueOnError)
	fs.SetOutput(stderr)
	addr := fs.String("addr", "127.0.0.1:8080", "listen address")
	heartbeat := fs.Duration("heartbeat", holdfasttest.DefaultHeartbeat, "progress event interval on watch streams")
	retention := fs.Int64("retention", 0, "keep only the last N revisions of history (0: all)")
	buffer := fs.Int("watcher-buffer", holdfasttest.DefaultWatcherBuffer, "change sets queued per watcher before it is disconnected")
	maxPublish := fs.Int64("max-publish-bytes", holdfasttest.DefaultMaxPublishBytes, "largest publish body")
	token := fs.String("token", "", "require this bearer token on the data plane")
	verbose := fs.Bool("v", false, "log every publish")
	if err := fs.Parse(args); err != nil {
		return err
	}

	level := slog.LevelInfo
	if *verbose {
		level = slog.LevelDebug
	}
	logger := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: level}))

	srv, err := holdfasttest.Start(
		holdfasttest.WithAddr(*addr),
		holdfasttest.WithHeartbeat(*heartbeat),
		holdfasttest.WithRetention(*retention),
		holdfasttest.WithWatcherBuffer(*buffer),
		holdfasttest.WithMaxPublishBytes(*maxPublish),
		holdfasttest.WithBearerToken(*token),
		holdfasttest.WithLogger(logger),
	)
	if err != nil {
		return err
	}
	logger.Info("serving", "url", srv.URL(), "store_id", srv.StoreID())
	if ready != nil {
		ready(srv.URL())
	}
	<-ctx.Done()
	logger.Info("shutting down")
	return srv.Close()
}
