package control

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/holdfast-dev/holdfast/controlapi"
	"github.com/holdfast-dev/holdfast/internal/controlplane"
)

// LintRoot is the key prefix of the lints: lint N's is LintRoot + N, its
// spec's JSON. Outside etcd.KeyRoot, so no namespace watch sees it.
const LintRoot = "/holdfast-lints/"

// lintStore is the control API's lint store (controlplane.LintStore) in
// etcd.
type lintStore struct{ cli *clientv3.Client }

var _ controlplane.LintStore = lintStore{}

func (s lintStore) PutLint(ctx context.Context, name string, l controlapi.Lint) error {
	b, err := json.Marshal(l)
	if err != nil {
		return err
	}
	key := LintRoot + name
	// A new lint counts against MaxLints; one replaced does not. The
	// count and the put are one transaction, guarded by the count's
	// revision: two saves at once cannot both pass the bound.
	for {
		resp, err := s.cli.Get(ctx, LintRoot, clientv3.WithPrefix(), clientv3.WithKeysOnly())
		if err != nil {
			return fmt.Errorf("control: lints: %w", err)
		}
		exists := false
		for _, kv := range resp.Kvs {
			exists = exists || string(kv.Key) == key
		}
		if !exists && len(resp.Kvs) >= controlplane.MaxLints {
			return fmt.Errorf("%w: %d lints already", controlplane.ErrFull, len(resp.Kvs))
		}
		txn, err := s.cli.Txn(ctx).
			If(clientv3.Compare(clientv3.ModRevision(LintRoot).WithPrefix(), "<", resp.Header.Revision+1)).
			Then(clientv3.OpPut(key, string(b))).Commit()
		if err != nil {
			return fmt.Errorf("control: lint %q: %w", name, err)
		}
		if txn.Succeeded {
			return nil
		}
	}
}

func (s lintStore) GetLint(ctx context.Context, name string) (controlapi.Lint, error) {
	resp, err := s.cli.Get(ctx, LintRoot+name)
	if err != nil {
		return controlapi.Lint{}, fmt.Errorf("control: lint %q: %w", name, err)
	}
	if len(resp.Kvs) == 0 {
		return controlapi.Lint{}, fmt.Errorf("%w: no lint named %s", controlplane.ErrNotFound, name)
	}
	var l controlapi.Lint
	if err := json.Unmarshal(resp.Kvs[0].Value, &l); err != nil {
		return controlapi.Lint{}, fmt.Errorf("control: lint %q: %w", name, err)
	}
	return l, nil
}

func (s lintStore) DeleteLint(ctx context.Context, name string) error {
	resp, err := s.cli.Delete(ctx, LintRoot+name)
	if err != nil {
		return fmt.Errorf("control: lint %q: %w", name, err)
	}
	if resp.Deleted == 0 {
		return fmt.Errorf("%w: no lint named %s", controlplane.ErrNotFound, name)
	}
	return nil
}

func (s lintStore) Lints(ctx context.Context) (map[string]controlapi.Lint, error) {
	resp, err := s.cli.Get(ctx, LintRoot, clientv3.WithPrefix())
	if err != nil {
		return nil, fmt.Errorf("control: lints: %w", err)
	}
	out := make(map[string]controlapi.Lint, len(resp.Kvs))
	for _, kv := range resp.Kvs {
		var l controlapi.Lint
		if err := json.Unmarshal(kv.Value, &l); err != nil {
			return nil, fmt.Errorf("control: lint %q: %w", kv.Key, err)
		}
		out[strings.TrimPrefix(string(kv.Key), LintRoot)] = l
	}
	return out, nil
}
