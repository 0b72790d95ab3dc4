package config_test

import (
	"context"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"time"

	"github.com/holdfast-dev/holdfast/config"
)

// Mount a readiness probe: 503 while a namespace the application needs is
// not open yet, serves Defaults (fail-closed), or is older than the probe
// allows; 200 otherwise, stale within that limit included.
func ExampleClient_ReadyHandler() {
	srv := exampleServer("payments.prod", map[string]any{"max-retries": 5})
	defer srv.Close()
	client, err := config.New(config.WithEndpoint(srv.URL()))
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close()

	mux := http.NewServeMux()
	mux.Handle("/readyz", client.ReadyHandler(10*time.Minute, "payments.prod"))
	probe := func() {
		rec := httptest.NewRecorder()
		mux.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/readyz", nil))
		body, _ := io.ReadAll(rec.Body)
		fmt.Printf("%d %s", rec.Code, body)
	}

	probe() // before the namespace is opened
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := client.Namespace(ctx, "payments.prod"); err != nil {
		log.Fatal(err)
	}
	probe()
	// Output:
	// 503 not ready: 1 of 1 namespaces
	// payments.prod: not open on this client
	// 200 ready
}
