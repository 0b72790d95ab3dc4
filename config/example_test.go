package config_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"os"
	"time"

	"github.com/holdfast-dev/holdfast/config"
	"github.com/holdfast-dev/holdfast/holdfasttest"
)

// The examples run against holdfast's reference server, started in-process
// on a free loopback port: it stands in for your config plane. The server's
// heartbeat is shortened from 5s to 100ms so that staleness examples are
// quick; your client needs no such setting.

// exampleServer starts the reference server and publishes values to
// namespace ns.
func exampleServer(ns string, values map[string]any) *holdfasttest.Server {
	srv, err := holdfasttest.Start(holdfasttest.WithHeartbeat(100 * time.Millisecond))
	if err != nil {
		log.Fatal(err)
	}
	if _, err := srv.Publish(ns, values); err != nil {
		log.Fatal(err)
	}
	return srv
}

// Open a namespace and read it. Namespace returns once the namespace serves
// data; every read after that is local.
func Example() {
	srv := exampleServer("payments.prod", map[string]any{
		"retry-timeout-ms": 50,
		"mode":             "fast",
		"poll-interval":    "250ms",
		"ratio":            0.25,
		"dark-launch":      true,
		"hosts":            []string{"a.internal", "b.internal"},
	})
	defer srv.Close()

	client, err := config.New(config.WithEndpoint(srv.URL()))
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close()

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	payments, err := client.Namespace(ctx, "payments.prod")
	if err != nil {
		log.Fatal(err) // an *OpenError: ctx ended before any data came
	}

	// Typed getters: the value, or the default when the key is absent or
	// holds another type.
	fmt.Println(payments.Int("retry-timeout-ms", 100))
	fmt.Println(payments.String("mode", "safe"))
	fmt.Println(payments.Duration("poll-interval", time.Second))
	fmt.Println(payments.Float("ratio", 0))
	fmt.Println(payments.Bool("dark-launch", false))
	fmt.Println(payments.Int("max-retries", 3)) // absent

	// Get returns the Value, decoded once, when the data arrived.
	v, ok := payments.Get("hosts")
	var hosts []string
	if err := v.Decode(&hosts); err != nil {
		log.Fatal(err)
	}
	fmt.Println(ok, v.Kind(), hosts)
	// Output:
	// 50
	// fast
	// 250ms
	// 0.25
	// true
	// 3
	// true array [a.internal b.internal]
}

// OnChange calls back after each change of a key, in revision order, on a
// goroutine of its own, after the new value is served.
func ExampleNamespace_OnChange() {
	srv := exampleServer("payments.prod", map[string]any{"retry-timeout-ms": 50})
	defer srv.Close()
	client, err := config.New(config.WithEndpoint(srv.URL()))
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	payments, err := client.Namespace(ctx, "payments.prod")
	if err != nil {
		log.Fatal(err)
	}

	changes := make(chan config.Change, 4)
	stop := payments.OnChange("retry-timeout-ms", func(ch config.Change) { changes <- ch })
	defer stop()

	rev2, _ := srv.Publish("payments.prod", map[string]any{"retry-timeout-ms": 75})
	rev3, _ := srv.Publish("payments.prod", nil, "retry-timeout-ms") // a delete
	fmt.Println("published", rev2, rev3)
	for range 2 {
		select {
		case ch := <-changes:
			fmt.Printf("revision %d: %s %q -> %q (new kind %v)\n", ch.Revision, ch.Key, ch.Old, ch.New, ch.New.Kind())
		case <-ctx.Done():
			log.Fatal(ctx.Err())
		}
	}
	// Output:
	// published 2 3
	// revision 2: retry-timeout-ms "50" -> "75" (new kind number)
	// revision 3: retry-timeout-ms "75" -> "" (new kind invalid)
}

// A Snapshot is one revision: reading several keys from it never mixes
// revisions, which reading them one by one from the Namespace might.
func ExampleNamespace_Snapshot() {
	srv := exampleServer("db", map[string]any{"db/primary/host": "10.0.0.1", "db/primary/port": 5432})
	defer srv.Close()
	client, err := config.New(config.WithEndpoint(srv.URL()))
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	db, err := client.Namespace(ctx, "db")
	if err != nil {
		log.Fatal(err)
	}

	snap := db.Snapshot()
	fmt.Printf("%s:%d at revision %d\n", snap.String("db/primary/host", ""), snap.Int("db/primary/port", 0), snap.Revision())
	fmt.Println(snap.Len(), snap.Keys())
	// Output:
	// 10.0.0.1:5432 at revision 1
	// 2 [db/primary/host db/primary/port]
}

// WaitForRevision blocks until a revision is served: what a test, or a tool
// that just published, waits on.
func ExampleNamespace_WaitForRevision() {
	srv := exampleServer("payments.prod", map[string]any{"mode": "fast"})
	defer srv.Close()
	client, err := config.New(config.WithEndpoint(srv.URL()))
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	payments, err := client.Namespace(ctx, "payments.prod")
	if err != nil {
		log.Fatal(err)
	}

	rev, _ := srv.Publish("payments.prod", map[string]any{"mode": "safe"})
	if err := payments.WaitForRevision(ctx, rev); err != nil {
		log.Fatal(err) // ctx's error, or ErrClosed
	}
	fmt.Println(payments.Revision(), payments.String("mode", ""))
	// Output:
	// 2 safe
}

// Status says where a namespace stands: its State, where its data came
// from, and how stale it is. When the config plane goes down, reads go on
// and the namespace turns Stale.
func ExampleNamespace_Status() {
	srv := exampleServer("payments.prod", map[string]any{"mode": "fast"})
	defer srv.Close()
	client, err := config.New(config.WithEndpoint(srv.URL()))
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	payments, err := client.Namespace(ctx, "payments.prod")
	if err != nil {
		log.Fatal(err)
	}
	st := payments.Status()
	fmt.Println(st.State, st.Origin, st.Revision)

	_ = srv.Stop() // the config plane goes down
	if err := payments.WaitForState(ctx, config.StateStale); err != nil {
		log.Fatal(err)
	}
	st = payments.Status()
	fmt.Println(st.State, st.Origin, st.Revision, st.LastError.Kind, st.Staleness > 0)
	fmt.Println(payments.String("mode", "safe")) // still served
	// Output:
	// Fresh network 1
	// Stale network 1 network true
	// fast
}

// With a cache directory, a process that restarts while the config plane
// is down serves the last good data from disk, marked Stale, and converges
// when the plane returns.
func ExampleWithCacheDir() {
	srv := exampleServer("payments.prod", map[string]any{"retry-timeout-ms": 50})
	defer srv.Close()
	dir, err := os.MkdirTemp("", "holdfast-example-")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()

	first, err := config.New(config.WithEndpoint(srv.URL()), config.WithCacheDir(dir))
	if err != nil {
		log.Fatal(err)
	}
	if _, err := first.Namespace(ctx, "payments.prod"); err != nil {
		log.Fatal(err)
	}
	_ = first.Close() // writes what is pending
	_ = srv.Stop()

	// A new process, the config plane still down.
	second, err := config.New(config.WithEndpoint(srv.URL()), config.WithCacheDir(dir),
		config.WithReconnectBackoff(20*time.Millisecond, 100*time.Millisecond))
	if err != nil {
		log.Fatal(err)
	}
	defer second.Close()
	payments, err := second.Namespace(ctx, "payments.prod")
	if err != nil {
		log.Fatal(err)
	}
	st := payments.Status()
	fmt.Println(payments.Int("retry-timeout-ms", 0), st.State, st.Origin)

	rev, _ := srv.Publish("payments.prod", map[string]any{"retry-timeout-ms": 75})
	_ = srv.Restart()
	if err := payments.WaitForRevision(ctx, rev); err != nil {
		log.Fatal(err)
	}
	if err := payments.WaitForState(ctx, config.StateFresh); err != nil {
		log.Fatal(err)
	}
	st = payments.Status()
	fmt.Println(payments.Int("retry-timeout-ms", 0), st.State, st.Origin)
	// Output:
	// 50 Stale disk
	// 75 Fresh network
}

// A fail-closed namespace serves its Defaults once its data is older than
// MaxStaleness, and refuses to open without fresh enough data.
func ExampleFailClosed() {
	srv := exampleServer("checkout.limits", map[string]any{"max-order-eur": 5000})
	defer srv.Close()
	client, err := config.New(config.WithEndpoint(srv.URL()))
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close()
	policy := []config.NamespaceOption{
		config.FailClosed(),
		config.MaxStaleness(300 * time.Millisecond),
		config.Defaults(map[string]any{"max-order-eur": 100}),
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	limits, err := client.Namespace(ctx, "checkout.limits", policy...)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(limits.Status().State, limits.Int("max-order-eur", 0))

	_ = srv.Stop()
	if err := limits.WaitForState(ctx, config.StateFailedClosed); err != nil {
		log.Fatal(err)
	}
	fmt.Println(limits.Status().State, limits.Status().Origin, limits.Int("max-order-eur", 0))

	// Another client, with no fresh data anywhere, cannot open it.
	other, err := config.New(config.WithEndpoint(srv.URL()))
	if err != nil {
		log.Fatal(err)
	}
	defer other.Close()
	short, cancel2 := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel2()
	_, err = other.Namespace(short, "checkout.limits", policy...)
	fmt.Println(errors.Is(err, config.ErrStale))
	// Output:
	// Fresh 5000
	// FailedClosed defaults 100
	// true
}

// Schema checks every update before it is served. An update that fails
// is rejected whole: the last good keeps serving, the rejection reaches
// OnReject subscribers and shows in Status (and is reported to the server
// as a nack).
func ExampleSchema() {
	srv := exampleServer("routes", map[string]any{"strategy": "round-robin"})
	defer srv.Close()
	client, err := config.New(config.WithEndpoint(srv.URL()))
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	routes, err := client.Namespace(ctx, "routes", config.Schema([]byte(`{
		"type": "object",
		"properties": {"strategy": {"enum": ["round-robin", "least-conn"]}}
	}`)))
	if err != nil {
		log.Fatal(err)
	}

	rejected := make(chan *config.RejectedError, 1)
	stop := routes.OnReject(func(err *config.RejectedError) { rejected <- err })
	defer stop()
	_, _ = srv.Publish("routes", map[string]any{"strategy": "weighted"}) // this build cannot parse it
	select {
	case rej := <-rejected:
		fmt.Println("rejected revision", rej.Revision)
	case <-ctx.Done():
		log.Fatal(ctx.Err())
	}
	st := routes.Status()
	fmt.Println(routes.String("strategy", ""), routes.Revision(), st.LastError.Kind, errors.Is(st.LastError.Err, config.ErrRejected))

	rev, _ := srv.Publish("routes", map[string]any{"strategy": "least-conn"}) // a later revision that passes
	if err := routes.WaitForRevision(ctx, rev); err != nil {
		log.Fatal(err)
	}
	fmt.Println(routes.String("strategy", ""), routes.Revision())
	// Output:
	// rejected revision 2
	// round-robin 1 invalid_data true
	// least-conn 3
}
