package fakeserver

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"

	"github.com/holdfast-dev/holdfast/controlapi"
	"github.com/holdfast-dev/holdfast/internal/controlplane"
)

// lintStore keeps the lints of /control/lints in memory
// (controlplane.LintStore), each as its spec's JSON, as holdfast server
// keeps them in etcd: what is read back is a copy.
type lintStore struct {
	mu    sync.Mutex
	lints map[string][]byte
}

var _ controlplane.LintStore = (*lintStore)(nil)

func (s *lintStore) PutLint(_ context.Context, name string, l controlapi.Lint) error {
	b, err := json.Marshal(l)
	if err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.lints[name]; !ok && len(s.lints) >= controlplane.MaxLints {
		return fmt.Errorf("%w: %d lints already", controlplane.ErrFull, len(s.lints))
	}
	if s.lints == nil {
		s.lints = make(map[string][]byte)
	}
	s.lints[name] = b
	return nil
}

func (s *lintStore) GetLint(_ context.Context, name string) (controlapi.Lint, error) {
	s.mu.Lock()
	b, ok := s.lints[name]
	s.mu.Unlock()
	if !ok {
		return controlapi.Lint{}, fmt.Errorf("%w: no lint named %s", controlplane.ErrNotFound, name)
	}
	var l controlapi.Lint
	err := json.Unmarshal(b, &l)
	return l, err
}

func (s *lintStore) DeleteLint(_ context.Context, name string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.lints[name]; !ok {
		return fmt.Errorf("%w: no lint named %s", controlplane.ErrNotFound, name)
	}
	delete(s.lints, name)
	return nil
}

func (s *lintStore) Lints(context.Context) (map[string]controlapi.Lint, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make(map[string]controlapi.Lint, len(s.lints))
	for name, b := range s.lints {
		var l controlapi.Lint
		if err := json.Unmarshal(b, &l); err != nil {
			return nil, err
		}
		out[name] = l
	}
	return out, nil
}

// reset drops every lint (a new store).
func (s *lintStore) reset() {
	s.mu.Lock()
	s.lints = nil
	s.mu.Unlock()
}
