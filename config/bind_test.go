package config_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/holdfast-dev/holdfast/config"
)

type dbConfig struct {
	Host    string   `json:"host"`
	Port    int      `json:"port"`
	Replica []string `json:"replicas"`
}

func TestBind(t *testing.T) {
	srv := startServer(t)
	publish(t, srv, "db", map[string]any{"primary": map[string]any{"host": "a", "port": 5432, "replicas": []string{"r1"}}})
	c := newClient(t, srv.URL())
	ns := open(t, c, "db")

	b := config.Bind(ns, "primary", dbConfig{Host: "localhost"})
	defer b.Stop()
	if got := b.Get(); got.Host != "a" || got.Port != 5432 || len(got.Replica) != 1 {
		t.Fatalf("bound %+v", got)
	}
	rev := publish(t, srv, "db", map[string]any{"primary": map[string]any{"host": "b", "port": 6432}})
	waitRevision(t, ns, rev)
	eventually(t, "the rebind", func() bool { return b.Get().Host == "b" })

	// A value that does not decode keeps the last one, and is counted.
	rev = publish(t, srv, "db", map[string]any{"primary": "not an object"})
	waitRevision(t, ns, rev)
	eventually(t, "the decode error", func() bool { return b.Errors() == 1 })
	if b.Get().Host != "b" || b.Err() == nil {
		t.Errorf("after a bad value: %+v, %v", b.Get(), b.Err())
	}
	// A deleted key binds the default.
	rev = publish(t, srv, "db", nil, "primary")
	waitRevision(t, ns, rev)
	eventually(t, "the default", func() bool { return b.Get().Host == "localhost" })
}

func TestWaitForState(t *testing.T) {
	srv := startServer(t)
	publish(t, srv, "ws", map[string]any{"v": 1})
	c := newClient(t, srv.URL())
	ns := open(t, c, "ws")
	ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
	defer cancel()
	if err := ns.WaitForState(ctx, config.StateFresh); err != nil {
		t.Fatal(err)
	}
	if err := srv.Stop(); err != nil {
		t.Fatal(err)
	}
	if err := ns.WaitForState(ctx, config.StateStale, config.StateBreached); err != nil {
		t.Fatal(err)
	}
	short, cancelShort := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancelShort()
	if err := ns.WaitForState(short, config.StateFailedClosed); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("WaitForState of a state never reached = %v", err)
	}
	_ = c.Close()
	if err := ns.WaitForState(ctx, config.StateFresh); !errors.Is(err, config.ErrClosed) {
		t.Errorf("WaitForState after Close = %v", err)
	}
	if err := ns.WaitForState(ctx, config.StateClosed); err != nil {
		t.Errorf("WaitForState(Closed) after Close = %v", err)
	}
}
