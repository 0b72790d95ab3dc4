package server_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/holdfast-dev/holdfast/config"
	"github.com/holdfast-dev/holdfast/controlapi"
	"github.com/holdfast-dev/holdfast/server/store"
)

// TestLargePublishIsOneRevision: on the embedded store a publish of 2,000
// keys (within the control API's byte limit) commits as one revision, one
// audit record and one index entry, and an SDK client sees it as one
// OnAnyChange, every key in it.
func TestLargePublishIsOneRevision(t *testing.T) {
	_, base := startServer(t, store.Config{Kind: store.KindEmbedded, DataDir: t.TempDir()})
	const ns, keys = "big.ns", 2000
	rev0 := publish(t, base, ns, map[string]any{"seed": 1})

	cl, err := config.New(config.WithEndpoint(base), config.WithCacheDir(t.TempDir()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	n, err := cl.Namespace(ctx, ns)
	if err != nil {
		t.Fatal(err)
	}
	sets := make(chan config.ChangeSet, 16)
	defer n.OnAnyChange(func(cs config.ChangeSet) { sets <- cs })()

	puts := make(map[string]json.RawMessage, keys)
	for i := range keys {
		puts[fmt.Sprintf("feature/flag-%04d", i)] = json.RawMessage(fmt.Sprintf(`{"enabled":true,"percent":%d,"owner":"team-%02d"}`, i%100, i%37))
	}
	body, _ := json.Marshal(controlapi.PublishRequest{Puts: puts})
	if len(body) > 640<<10 {
		t.Fatalf("the publish is %d bytes, past the control API's default limit", len(body))
	}
	rev, err := controlClient(t, base).Publish(ctx, ns, controlapi.PublishRequest{Puts: puts, Actor: "test", Reason: "bulk"})
	if err != nil {
		t.Fatalf("a publish of %d keys (%d bytes): %v", keys, len(body), err)
	}
	select {
	case cs := <-sets:
		if cs.Revision != rev || cs.PrevRevision != rev0 || len(cs.Changes) != keys {
			t.Fatalf("OnAnyChange: revision %d (prev %d) with %d changes; want %d (prev %d) with %d", cs.Revision, cs.PrevRevision, len(cs.Changes), rev, rev0, keys)
		}
	case <-ctx.Done():
		t.Fatal("no OnAnyChange after the large publish")
	}
	hist, err := controlClient(t, base).History(ctx, ns, controlapi.HistoryOptions{Limit: 1})
	if err != nil || len(hist.Revisions) != 1 || hist.Revisions[0].Revision != rev || len(hist.Revisions[0].Puts) != keys {
		t.Fatalf("history: %v; want one record of %d keys at %d", err, keys, rev)
	}
	// Near the byte limit, its keys long: the keys are written four times
	// (the key, the audit record's values and list, the meta record's
	// list), within the embedded member's request bytes.
	long := make(map[string]json.RawMessage)
	for i := range (640<<10 - 64) / len(`"`+fmt.Sprintf("%0500d", 0)+`":1,`) {
		long[fmt.Sprintf("%0500d", i)] = json.RawMessage(`1`)
	}
	if _, err := controlClient(t, base).Publish(ctx, "long.keys", controlapi.PublishRequest{Puts: long}); err != nil {
		t.Fatalf("a publish of %d keys of 500 bytes: %v", len(long), err)
	}
	// One key past the embedded store's limit: refused, in words that
	// name it, and name no etcd flag to raise.
	over := make(map[string]json.RawMessage)
	for i := range store.EmbeddedMaxTxnOps - store.PublishOverheadOps + 1 {
		over[fmt.Sprintf("k%05d", i)] = json.RawMessage(`1`)
	}
	_, err = controlClient(t, base).Publish(ctx, "over.ns", controlapi.PublishRequest{Puts: over})
	var ae *controlapi.Error
	if want := fmt.Sprintf("(the embedded store takes %d operations, which leaves %d keys a publish); publish the change in parts of at most %[2]d keys", store.EmbeddedMaxTxnOps, store.EmbeddedMaxTxnOps-store.PublishOverheadOps); !errors.As(err, &ae) || ae.StatusCode != http.StatusRequestEntityTooLarge || !strings.HasSuffix(ae.Message, want) {
		t.Errorf("a publish past the embedded store's limit: %v; want 413 ending %q", err, want)
	}
	list, err := controlClient(t, base).Namespaces(ctx, controlapi.NamespacesOptions{Prefix: ns})
	if err != nil || len(list.Namespaces) != 1 || list.Namespaces[0].Revision != rev || list.Namespaces[0].Reason != "bulk" {
		t.Fatalf("namespaces: %+v, %v", list, err)
	}
}
