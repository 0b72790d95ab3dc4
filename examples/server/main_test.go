package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestServeAndShutDown: the server publishes through its control API,
// serves a snapshot, and returns nil when its context ends.
func TestServeAndShutDown(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	urls := make(chan string, 1)
	done := make(chan error, 1)
	var logs syncBuffer
	go func() {
		done <- run(ctx, []string{"-addr", "127.0.0.1:0", "-heartbeat", "100ms"}, &logs, func(u string) { urls <- u })
	}()
	var base string
	select {
	case base = <-urls:
	case err := <-done:
		t.Fatalf("run: %v\n%s", err, logs.String())
	}
	hc := &http.Client{Transport: &http.Transport{}, Timeout: 5 * time.Second}
	defer hc.CloseIdleConnections()
	resp, err := hc.Post(base+"/control/namespaces/payments.prod/publish", "application/json",
		strings.NewReader(`{"puts":{"retry-timeout-ms":50}}`))
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), `"revision":1`) {
		t.Fatalf("publish: %s %s", resp.Status, body)
	}
	resp, err = hc.Get(base + "/sdk/snapshot?ns=payments.prod")
	if err != nil {
		t.Fatal(err)
	}
	body, _ = io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), `"retry-timeout-ms":50`) {
		t.Fatalf("snapshot: %s %s", resp.Status, body)
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("run after cancel: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("run did not return after its context ended")
	}
}

func TestHelp(t *testing.T) {
	var out syncBuffer
	err := run(context.Background(), []string{"-h"}, &out, nil)
	if !errors.Is(err, flag.ErrHelp) || !strings.Contains(out.String(), "-heartbeat") {
		t.Fatalf("-h: %v\n%s", err, out.String())
	}
}
