package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/holdfast-dev/holdfast/controlapi"
	"github.com/holdfast-dev/holdfast/internal/testutil"
)

// TestStoreQuotaAlarmIsDisarmed: `holdfast server` over a real etcd
// cluster started with a 16 MiB --quota-backend-bytes. Publishes of
// 600 KB to one namespace fill the quota: etcd raises its NOSPACE alarm,
// and every namespace's publish gets 507, whose message says what to do;
// reads are still served, and the server logs the alarm with what to
// run. The operator does what the message says (POST /control/compact):
// the server defragments the members and disarms the alarm, and
// publishes are taken again, with no etcdctl.
func TestStoreQuotaAlarmIsDisarmed(t *testing.T) {
	const quota = 16 << 20
	members := startEtcdCluster(t, "http", func(int) []string { return []string{"--quota-backend-bytes", fmt.Sprint(quota)} })
	waitEtcd(t, members)
	bin := buildBinary(t)
	srv := startServerProc(t, bin, "-etcd", members)
	c := controlClient(t, srv.url(), nil)
	ctx := t.Context()
	put := func(ns string, v any) error {
		raw, _ := json.Marshal(v)
		_, err := c.Publish(ctx, ns, controlapi.PublishRequest{Puts: map[string]json.RawMessage{"v": raw}})
		return err
	}
	if err := put("other", 1); err != nil {
		t.Fatal(err)
	}
	blob := strings.Repeat("x", 600_000)
	var full *controlapi.Error
	for i := range 100 {
		err := put("big", fmt.Sprint(i, blob))
		if err == nil {
			continue
		}
		if !errors.As(err, &full) || full.StatusCode != http.StatusInsufficientStorage {
			t.Fatalf("publish %d: %v, want 507 or success", i, err)
		}
		t.Logf("507 after %d publishes of 600 KB: %s", i, full.Message)
		break
	}
	if full == nil {
		t.Fatal("100 publishes of 600 KB fit a 16 MiB quota")
	}
	if !strings.Contains(full.Message, "POST /control/compact") || !strings.Contains(full.Message, "disarm") {
		t.Errorf("the 507 does not say what to do: %q", full.Message)
	}
	// The server defragments at once, which may free a little (etcd
	// 3.4 does not say its quota: a file that shrank gets the alarm
	// disarmed, and the next write past the quota raises it again): the
	// writes go on until nothing more is freed, and the server says so.
	testutil.Eventually(t, 2*time.Minute, func() bool {
		_ = put("big", blob)
		return strings.Contains(srv.logs.String(), noSpaceLog)
	}, "the server to log that the store is out of space")
	// Every namespace's writes are refused; reads are served.
	var other *controlapi.Error
	if err := put("other", 2); !errors.As(err, &other) || other.StatusCode != http.StatusInsufficientStorage {
		t.Errorf("a publish to another namespace: %v, want 507", err)
	}
	if code, body := request(t, "GET", srv.url()+"/sdk/snapshot?ns=other", "", ""); code != http.StatusOK || !strings.Contains(body, `"v":1`) {
		t.Errorf("a read while out of space: %d %s", code, body)
	}
	srv.logs.waitFor(t, noSpaceLog, srv.copied)

	// What the message says: compact. The server defragments and
	// disarms; a write now and then (refused while the alarm holds) lets
	// etcd count what the compaction freed.
	if _, err := c.Compact(ctx, 0); err != nil {
		t.Fatalf("compact: %v", err)
	}
	compacted := time.Now()
	testutil.Eventually(t, 2*time.Minute, func() bool {
		return put("other", 3) == nil
	}, "publishes taken again after the compaction")
	t.Logf("writes taken again %v after the compaction", time.Since(compacted).Round(time.Millisecond))
	srv.logs.waitFor(t, "server: the store's NOSPACE alarm disarmed: defragmenting freed space, writes are taken again", srv.copied)
	if err := put("big", "small"); err != nil {
		t.Errorf("a publish to the namespace that filled the store: %v", err)
	}
	srv.stop()
}

// noSpaceLog is what the server logs when its store is out of space,
// with its advice (server.noSpaceAdvice).
const noSpaceLog = "server: the store is out of space (etcd's NOSPACE alarm): every write is refused (507), reads are served; " +
	"free space by compacting the store's history (POST /control/compact, or the cluster's --auto-compaction-retention): " +
	"the servers then defragment and disarm the alarm; or raise etcd's --quota-backend-bytes, restart its members " +
	"and run 'etcdctl alarm disarm'"
