package controlapi_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/holdfast-dev/holdfast/controlapi"
	"github.com/holdfast-dev/holdfast/holdfasttest"
	"github.com/holdfast-dev/holdfast/transport"
)

// exampleServer starts the reference server of the examples (in a test,
// holdfasttest.NewServer(t) closes it for you).
func exampleServer() (url string, stop func()) {
	srv, err := holdfasttest.Start()
	if err != nil {
		panic(err)
	}
	return srv.URL(), func() { _ = srv.Close() }
}

// Publish a change with an actor and a reason, then read who changed
// what.
func Example() {
	url, stop := exampleServer()
	defer stop()
	c, err := controlapi.NewClient(url, controlapi.WithToken("")) // a server that requires tokens: its secret
	if err != nil {
		panic(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	rev, err := c.Publish(ctx, "payments.prod", controlapi.PublishRequest{
		Puts:   map[string]json.RawMessage{"retry-timeout-ms": json.RawMessage(`50`)},
		Actor:  "alice",
		Reason: "INC-1234",
	})
	if err != nil {
		panic(err)
	}
	h, err := c.History(ctx, "payments.prod", controlapi.HistoryOptions{Limit: 10})
	if err != nil {
		panic(err)
	}
	r := h.Revisions[0]
	fmt.Println(r.Revision == rev, r.Kind, r.Actor, r.Reason, r.Puts)
	// Output:
	// true publish alice INC-1234 [retry-timeout-ms]
}

// A conditional publish: it commits only if the namespace is still at the
// revision read; else the *Error says which revision it is at.
func ExampleClient_Publish_conflict() {
	url, stop := exampleServer()
	defer stop()
	c, err := controlapi.NewClient(url)
	if err != nil {
		panic(err)
	}
	ctx := context.Background()
	put := func(v string, ifRev *int64) (int64, error) {
		return c.Publish(ctx, "payments.prod", controlapi.PublishRequest{Puts: map[string]json.RawMessage{"mode": json.RawMessage(v)}, IfRevision: ifRev})
	}
	first, err := put(`"fast"`, nil)
	if err != nil {
		panic(err)
	}
	if _, err := put(`"safe"`, nil); err != nil { // someone else's change
		panic(err)
	}
	_, err = put(`"slow"`, &first)
	var ae *controlapi.Error
	if errors.Is(err, controlapi.ErrConflict) && errors.As(err, &ae) {
		fmt.Printf("conflict: the namespace is at revision %d, not %d\n", ae.Revision, first)
	}
	// Output:
	// conflict: the namespace is at revision 2, not 1
}

// What was live then, and what changed since; values the server
// compacted away are transport.ErrCompacted.
func ExampleClient_Diff() {
	url, stop := exampleServer()
	defer stop()
	c, err := controlapi.NewClient(url)
	if err != nil {
		panic(err)
	}
	ctx := context.Background()
	r1, _ := c.Publish(ctx, "app", controlapi.PublishRequest{Puts: map[string]json.RawMessage{"a": json.RawMessage(`1`), "mode": json.RawMessage(`"fast"`)}})
	r2, _ := c.Publish(ctx, "app", controlapi.PublishRequest{Puts: map[string]json.RawMessage{"a": json.RawMessage(`2`)}, Deletes: []string{"mode"}})

	v, err := c.ValuesAt(ctx, "app", r1)
	if err != nil {
		panic(err)
	}
	fmt.Println("at", v.Revision, "a =", string(v.Values["a"]))
	d, err := c.Diff(ctx, "app", r1, r2)
	if err != nil {
		panic(err)
	}
	for _, ch := range d.Changes {
		fmt.Printf("%s: %s -> %s\n", ch.Key, orAbsent(ch.Old), orAbsent(ch.New))
	}

	if _, err := c.Compact(ctx, r2); err != nil {
		panic(err)
	}
	_, err = c.ValuesAt(ctx, "app", r1)
	var ce *transport.CompactedError
	if errors.Is(err, transport.ErrCompacted) && errors.As(err, &ce) {
		fmt.Println("compacted up to", ce.CompactRevision)
	}
	// Output:
	// at 1 a = 1
	// a: 1 -> 2
	// mode: "fast" -> (absent)
	// compacted up to 2
}

func orAbsent(v json.RawMessage) string {
	if v == nil {
		return "(absent)"
	}
	return string(v)
}
