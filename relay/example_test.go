package relay_test

import (
	"context"
	"fmt"
	"log"
	"net"
	"time"

	"github.com/holdfast-dev/holdfast/config"
	"github.com/holdfast-dev/holdfast/holdfasttest"
	"github.com/holdfast-dev/holdfast/relay"
	"github.com/holdfast-dev/holdfast/transport"
)

// A relay between an origin and its clients: the clients open their
// namespaces through it, and get the origin's revisions unchanged.
func Example() {
	origin, err := holdfasttest.Start()
	if err != nil {
		log.Fatal(err)
	}
	defer origin.Close()
	if _, err := origin.Publish("payments.prod", map[string]any{"retry-timeout-ms": 200}); err != nil {
		log.Fatal(err)
	}

	upstream, err := transport.NewHTTPSource(origin.URL())
	if err != nil {
		log.Fatal(err)
	}
	defer upstream.Close()
	r, err := relay.New(upstream, relay.WithNamespaces("payments.prod"))
	if err != nil {
		log.Fatal(err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		log.Fatal(err)
	}
	ctx, stop := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- r.Serve(ctx, l) }()
	defer func() { stop(); <-served }()

	client, err := config.New(config.WithEndpoint("http://" + l.Addr().String()))
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close()
	openCtx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ns, err := client.Namespace(openCtx, "payments.prod")
	if err != nil {
		log.Fatal(err)
	}
	v, _ := ns.Get("retry-timeout-ms")
	fmt.Println("retry-timeout-ms:", v.String())
	fmt.Println("same store as the origin:", ns.Status().StoreID == origin.StoreID())
	// Output:
	// retry-timeout-ms: 200
	// same store as the origin: true
}
