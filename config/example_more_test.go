package config_test

import (
	"context"
	"fmt"
	"log"
	"time"

	"github.com/holdfast-dev/holdfast/config"
)

// exampleOpen opens namespace ns of the server at url; the caller closes
// the client.
func exampleOpen(ctx context.Context, url, ns string, opts ...config.Option) (*config.Client, *config.Namespace) {
	client, err := config.New(append([]config.Option{config.WithEndpoint(url)}, opts...)...)
	if err != nil {
		log.Fatal(err)
	}
	n, err := client.Namespace(ctx, ns)
	if err != nil {
		log.Fatal(err)
	}
	return client, n
}

// Bind decodes a key into a Go type once per change, so that reading it is
// one atomic load. A time.Duration field reads "250ms" strings, as the
// Duration getter does.
func ExampleBind() {
	type DB struct {
		Host    string        `json:"host"`
		Timeout time.Duration `json:"timeout"`
	}
	srv := exampleServer("db", map[string]any{"primary": map[string]any{"host": "a.internal", "timeout": "250ms"}})
	defer srv.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	client, db := exampleOpen(ctx, srv.URL(), "db")
	defer client.Close()

	primary := config.Bind(db, "primary", DB{Host: "localhost", Timeout: time.Second})
	defer primary.Stop()
	fmt.Printf("%+v\n", primary.Get())

	// Callbacks run in order on one goroutine: one subscribed after Bind
	// runs once the binding has taken the change.
	rebound := make(chan struct{}, 4)
	stop := db.OnChange("primary", func(config.Change) { rebound <- struct{}{} })
	defer stop()

	_, _ = srv.Publish("db", map[string]any{"primary": map[string]any{"host": "b.internal", "timeout": "2s"}})
	<-rebound
	fmt.Printf("%+v\n", primary.Get())

	_, _ = srv.Publish("db", map[string]any{"primary": "not an object"}) // kept out
	<-rebound
	fmt.Printf("%+v %v\n", primary.Get(), primary.Err() != nil)
	fmt.Println(db.Status().LastError.Kind)
	// Output:
	// {Host:a.internal Timeout:250ms}
	// {Host:b.internal Timeout:2s}
	// {Host:b.internal Timeout:2s} true
	// bind
}

// OnAnyChange delivers each update as one ChangeSet, every key it changed.
func ExampleNamespace_OnAnyChange() {
	srv := exampleServer("flags", map[string]any{"a": 1, "b": 1})
	defer srv.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	client, flags := exampleOpen(ctx, srv.URL(), "flags")
	defer client.Close()

	sets := make(chan config.ChangeSet, 4)
	stop := flags.OnAnyChange(func(cs config.ChangeSet) { sets <- cs })
	defer stop()

	_, _ = srv.Publish("flags", map[string]any{"a": 2, "c": true}, "b")
	cs := <-sets
	fmt.Println("revision", cs.PrevRevision, "->", cs.Revision)
	for _, ch := range cs.Changes {
		fmt.Printf("%s: %q -> %q\n", ch.Key, ch.Old, ch.New)
	}
	// Output:
	// revision 1 -> 2
	// a: "1" -> "2"
	// b: "1" -> ""
	// c: "" -> "true"
}

// OnStatusChange delivers each change of State, in order.
func ExampleNamespace_OnStatusChange() {
	srv := exampleServer("payments.prod", map[string]any{"mode": "fast"})
	defer srv.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	client, payments := exampleOpen(ctx, srv.URL(), "payments.prod")
	defer client.Close()

	states := make(chan config.Status, 8)
	stop := payments.OnStatusChange(func(st config.Status) { states <- st })
	defer stop()

	_ = srv.Stop() // the config plane goes down
	st := <-states
	fmt.Println(st.State, st.Revision, st.Origin)
	// Output:
	// Stale 1 network
}

// WaitForState blocks until the namespace reaches one of the states: here,
// Stale while the config plane is down, and Fresh once it is back.
func ExampleNamespace_WaitForState() {
	srv := exampleServer("payments.prod", map[string]any{"mode": "fast"})
	defer srv.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	client, payments := exampleOpen(ctx, srv.URL(), "payments.prod",
		config.WithReconnectBackoff(10*time.Millisecond, 100*time.Millisecond))
	defer client.Close()

	_ = srv.Stop()
	if err := payments.WaitForState(ctx, config.StateStale, config.StateBreached); err != nil {
		log.Fatal(err) // ctx ended first, or the client was closed (ErrClosed)
	}
	fmt.Println(payments.Status().State)

	if err := srv.Restart(); err != nil {
		log.Fatal(err)
	}
	if err := payments.WaitForState(ctx, config.StateFresh); err != nil {
		log.Fatal(err)
	}
	st := payments.Status()
	fmt.Println(st.State, st.LastError.Recovered)
	// Output:
	// Stale
	// Fresh true
}
