package store_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/holdfast-dev/holdfast/server/store"
	"github.com/holdfast-dev/holdfast/transport"
)

// A conditional publish with its audit, and the queries an operator's
// tool prints: the JSON is the control API's.
func ExampleNamespaces_History() {
	ctx := context.Background()
	cli, err := store.Dial([]string{"127.0.0.1:2379"}, store.Security{})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return
	}
	defer cli.Close()
	src, err := store.NewNamespaces(store.NamespacesConfig{Client: cli})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return
	}
	defer src.Close()

	_, err = src.Publish(ctx, "payments.prod", map[string]json.RawMessage{"retry-timeout-ms": json.RawMessage("50")}, nil,
		store.WithActor("alice"), store.WithReason("INC-1234: retries pile up"), store.WithIfRevision(41))
	var conflict *store.ConflictError
	if errors.As(err, &conflict) {
		fmt.Fprintf(os.Stderr, "conflict: %s is at revision %d\n", conflict.Namespace, conflict.Revision)
		return
	}

	h, err := src.History(ctx, "payments.prod", store.HistoryOptions{Limit: 10})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return
	}
	_ = json.NewEncoder(os.Stdout).Encode(h)

	v, err := src.ValuesAtTime(ctx, "payments.prod", time.Date(2026, 12, 1, 14, 3, 0, 0, time.UTC))
	var compacted *transport.CompactedError
	switch {
	case errors.As(err, &compacted):
		fmt.Fprintf(os.Stderr, "compacted: etcd keeps revisions from %d\n", compacted.CompactRevision)
	case errors.Is(err, transport.ErrNotFound), errors.Is(err, store.ErrInvalidArgument):
		fmt.Fprintln(os.Stderr, err)
	case err == nil:
		_ = json.NewEncoder(os.Stdout).Encode(v)
	}

	d, err := src.Diff(ctx, "payments.prod", 40, 42)
	if err == nil {
		for _, c := range d.Changes {
			fmt.Printf("%s: %s → %s\n", c.Key, c.Old, c.New)
		}
	}
}

// A publish that commits with a write outside the namespace, and only if
// a record is still at the revision the caller read: how holdfast
// server's rollout controller commits a stage with its state.
func ExampleWithCondition() {
	ctx := context.Background()
	cli, err := store.Dial([]string{"127.0.0.1:2379"}, store.Security{})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return
	}
	defer cli.Close()
	src, err := store.NewNamespaces(store.NamespacesConfig{Client: cli})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return
	}
	defer src.Close()

	const state = "/my-app/state/payments.prod"
	read, err := cli.Get(ctx, state)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return
	}
	var version int64 // 0: the record does not exist yet
	if len(read.Kvs) > 0 {
		version = read.Kvs[0].ModRevision
	}
	rev, err := src.Publish(ctx, "payments.prod", map[string]json.RawMessage{"retry-timeout-ms": json.RawMessage("50")}, nil,
		store.WithActor("alice"), store.WithReason("step 2 of 3"),
		store.WithCondition(clientv3.Compare(clientv3.ModRevision(state), "=", version)),
		store.WithOps(clientv3.OpPut(state, `{"step":2}`)))
	switch {
	case errors.Is(err, store.ErrConditionFailed):
		fmt.Fprintln(os.Stderr, "someone else moved the state: read it again")
	case err != nil:
		fmt.Fprintln(os.Stderr, err)
	default:
		fmt.Println("committed at revision", rev)
	}
}
