package tokens_test

import (
	"context"
	"errors"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/goleak"

	"github.com/holdfast-dev/holdfast/access"
	"github.com/holdfast-dev/holdfast/internal/testutil"
	"github.com/holdfast-dev/holdfast/server/store"
	"github.com/holdfast-dev/holdfast/server/tokens"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func openStore(t *testing.T) *store.Store {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	st, err := store.Open(ctx, store.Config{Kind: store.KindMemory})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	return st
}

func openTokens(t *testing.T, cli *clientv3.Client, cfg tokens.Config) *tokens.Store {
	t.Helper()
	ts, err := tokens.Open(context.Background(), cli, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(ts.Close)
	return ts
}

// TestLastUseIsCoalesced: a thousand authentications make one write of
// the last use per interval, not one per request (the key's etcd
// version counts its writes).
func TestLastUseIsCoalesced(t *testing.T) {
	st := openStore(t)
	ts := openTokens(t, st.Client, tokens.Config{UseInterval: 200 * time.Millisecond})
	secret := access.NewSecret()
	ctx := context.Background()
	if err := ts.Create(ctx, access.Record{Name: "svc", Hash: access.HashSecret(secret), Scopes: access.Scopes{Data: []string{"*"}}, Created: time.Now()}); err != nil {
		t.Fatal(err)
	}
	// Created with a data-only token: the store stays open (no admin).
	if ts.Table().Required() {
		t.Fatal("a store without an admin token requires tokens")
	}
	if err := ts.Create(ctx, access.Record{Name: "root", Hash: access.HashSecret(access.NewSecret()), Scopes: access.Scopes{Admin: true}, Created: time.Now()}); err != nil {
		t.Fatal(err)
	}
	if !ts.Table().Required() {
		t.Fatal("the first admin token did not make the store require tokens")
	}
	version := func() int64 {
		resp, err := st.Client.Get(ctx, tokens.UsePrefix+"svc")
		if err != nil || len(resp.Kvs) == 0 {
			return 0
		}
		return resp.Kvs[0].Version
	}
	for range 1000 {
		if _, ok := ts.Table().Authenticate(secret); !ok {
			t.Fatal("the token does not authenticate")
		}
	}
	testutil.Eventually(t, 5*time.Second, func() bool { return version() == 1 }, "one write of the last use")
	testutil.Consistently(t, 600*time.Millisecond, func() error {
		if v := version(); v != 1 {
			return errors.New("the last use was written again with no new use")
		}
		return nil
	})
	for range 1000 {
		ts.Table().Authenticate(secret)
	}
	testutil.Eventually(t, 5*time.Second, func() bool { return version() == 2 }, "a second write after new uses")
	list, err := ts.List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, info := range list {
		if info.Name == "svc" && info.LastUsed.IsZero() {
			t.Fatalf("list: %+v", list)
		}
	}

	// Revoked: the use key goes with the record, and no later write
	// brings it back.
	ts.Table().Authenticate(secret)
	if err := ts.Revoke(ctx, "svc"); err != nil {
		t.Fatal(err)
	}
	if _, ok := ts.Table().Authenticate(secret); ok {
		t.Fatal("a revoked token authenticates on the server that revoked it")
	}
	testutil.Consistently(t, 600*time.Millisecond, func() error {
		if v := version(); v != 0 {
			return errors.New("a revoked token's last use was written")
		}
		return nil
	})
	if err := ts.Revoke(ctx, "svc"); !errors.Is(err, tokens.ErrNotFound) {
		t.Fatalf("revoking again: %v", err)
	}
}

// TestCacheFollowsWritesPastIt: records written by another server (here:
// straight into etcd) reach the cache by the watch; an invalid record is
// left out, not fatal.
func TestCacheFollowsWritesPastIt(t *testing.T) {
	st := openStore(t)
	a := openTokens(t, st.Client, tokens.Config{})
	b := openTokens(t, st.Client, tokens.Config{})
	secret := access.NewSecret()
	ctx := context.Background()
	if err := a.Create(ctx, access.Record{Name: "ops", Hash: access.HashSecret(secret), Scopes: access.Scopes{Admin: true}, Created: time.Now()}); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 5*time.Second, func() bool { _, ok := b.Table().Authenticate(secret); return ok }, "the other cache learns the token")
	if _, err := st.Client.Put(ctx, tokens.Prefix+"broken", "{not json"); err != nil {
		t.Fatal(err)
	}
	if _, err := st.Client.Delete(ctx, tokens.Prefix+"ops"); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 5*time.Second, func() bool { _, ok := b.Table().Authenticate(secret); return !ok }, "the other cache forgets a deleted token")
	if !b.Table().Required() {
		t.Fatal("deleting the last admin token reopened the store")
	}
	if recs, _ := b.Table().Records(); len(recs) != 0 {
		t.Fatalf("records %+v", recs)
	}
}
