package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/holdfast-dev/holdfast/server/store"
)

// TestPublishPastTheEtcdTxnLimit: over an external etcd whose
// --max-txn-ops is 20, the server probes the limit at start and logs it,
// a publish within it commits, and one past it is refused in words that
// name the limit and what to do, not etcd's; a write path that does not
// know the limit learns it from the first refusal.
func TestPublishPastTheEtcdTxnLimit(t *testing.T) {
	members := startEtcdCluster(t, "http", func(int) []string { return []string{"--max-txn-ops", "20"} })
	waitEtcd(t, members)
	hs := start(t, "server", "-etcd", members, "-addr", "127.0.0.1:0", "-log-format", "json")
	url := hs.stderr.waitFor(t, "serving", hs.done)["url"].(string)
	rec := hs.stderr.waitFor(t, "store: a publish changes up to this many keys (one etcd transaction; etcd's --max-txn-ops less the publish's own operations)", hs.done)
	if rec["max_txn_ops"] != 20.0 || rec["max_keys_per_publish"] != 17.0 {
		t.Errorf("the limit logged at start: %v", rec)
	}
	keys := func(n int) []string {
		var kv []string
		for i := range n {
			kv = append(kv, fmt.Sprintf("k%02d=%d", i, i))
		}
		return kv
	}
	mustRun(t, append([]string{"publish", "-server", url, "big.ns"}, keys(17)...)...)
	errOut := mustFail(t, exitFail, "etcd's --max-txn-ops is 20 operations, which leaves 17 keys a publish); publish the change in parts of at most 17 keys, or raise --max-txn-ops",
		append([]string{"publish", "-server", url, "big.ns"}, keys(18)...)...)
	if strings.Contains(errOut, "etcdserver") || !strings.Contains(errOut, "HTTP 413") {
		t.Errorf("the refusal:\n%s", errOut)
	}
	if out := mustRun(t, "history", "-server", url, "big.ns"); strings.Count(out, "\n") != 2 {
		t.Errorf("history after the refusal:\n%s", out)
	}

	// A write path that was not told the limit: etcd refuses, it probes.
	cli, err := store.Dial(strings.Split(members, ","), store.Security{})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	w, err := store.NewNamespaces(store.NamespacesConfig{Client: cli})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	puts := make(map[string]json.RawMessage)
	for i := range 18 {
		puts[fmt.Sprintf("k%02d", i)] = json.RawMessage(`1`)
	}
	for range 2 { // learnt at the first refusal, checked before sending at the second
		var tle *store.TxnLimitError
		if _, err := w.Publish(ctx, "other.ns", puts, nil); !errors.As(err, &tle) || tle.MaxOps != 20 || tle.MaxKeys != 17 {
			t.Fatalf("a publish of 18 keys: %v", err)
		}
	}
}
