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
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/holdfast-dev/holdfast/internal/fakeserver"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "server:", err)
		os.Exit(1)
	}
}

func run() error {
	addr := flag.String("addr", "127.0.0.1:8080", "listen address")
	heartbeat := flag.Duration("heartbeat", fakeserver.DefaultHeartbeat, "progress event interval on watch streams")
	retention := flag.Int64("retention", 0, "keep only the last N revisions of history (0: all)")
	buffer := flag.Int("watcher-buffer", fakeserver.DefaultWatcherBuffer, "change sets queued per watcher before it is disconnected")
	maxPublish := flag.Int64("max-publish-bytes", fakeserver.DefaultMaxPublishBytes, "largest publish body")
	token := flag.String("token", "", "require this bearer token on the data plane")
	verbose := flag.Bool("v", false, "log every publish")
	flag.Parse()

	level := slog.LevelInfo
	if *verbose {
		level = slog.LevelDebug
	}
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))

	srv, err := fakeserver.Start(
		fakeserver.WithAddr(*addr),
		fakeserver.WithHeartbeat(*heartbeat),
		fakeserver.WithRetention(*retention),
		fakeserver.WithWatcherBuffer(*buffer),
		fakeserver.WithMaxPublishBytes(*maxPublish),
		fakeserver.WithBearerToken(*token),
		fakeserver.WithLogger(logger),
	)
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	logger.Info("serving", "url", srv.URL(), "store_id", srv.StoreID())
	<-ctx.Done()
	logger.Info("shutting down")
	return srv.Close()
}
