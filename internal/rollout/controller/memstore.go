package controller

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"sync"
)

// MemStore is a Store in memory, with the namespaces' content it commits
// to: for tests and a single process. Its leading condition (Commit.Leading)
// is a func() bool.
type MemStore struct {
	mu      sync.Mutex
	rev     int64
	apply   func(Commit) (int64, error)
	changed chan struct{} // closed at the next commit
	current map[string]*State
	ended   map[string][]*State // oldest first
	content map[string]map[string]json.RawMessage
	log     []Committed
}

// maxLog bounds the commits MemStore's Log keeps (the newest).
const maxLog = 4096

// Committed is one commit MemStore made.
type Committed struct {
	Revision int64
	Change   *Change // nil: the state alone
	State    *State
}

// NewMemStore returns an empty MemStore.
func NewMemStore() *MemStore {
	return &MemStore{current: make(map[string]*State), ended: make(map[string][]*State),
		content: make(map[string]map[string]json.RawMessage)}
}

// NewMemStoreOver returns an empty MemStore whose changes apply commits
// elsewhere (a server's own namespaces) and returns their revision; it is
// called under the store's lock, only once the commit's conditions hold,
// and its error fails the commit. Content is then empty: the namespaces
// are apply's.
func NewMemStoreOver(apply func(Commit) (int64, error)) *MemStore {
	m := NewMemStore()
	m.apply = apply
	return m
}

// Guard calls f with ns's current rollout (nil: none) under the store's
// lock, so that no commit happens meanwhile: a server refuses a plain
// publish while a rollout runs, and commits it, as one step.
func (m *MemStore) Guard(ns string, f func(cur *State) error) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	var cur *State
	if st := m.current[ns]; st != nil {
		cur = st.clone()
	}
	return f(cur)
}

// Changed returns a channel closed at the next commit.
func (m *MemStore) Changed() <-chan struct{} {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.changed == nil {
		m.changed = make(chan struct{})
	}
	return m.changed
}

// Current implements Store.
func (m *MemStore) Current(_ context.Context, ns string) (*State, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if st := m.current[ns]; st != nil {
		return st.clone(), nil
	}
	return nil, nil
}

// Running implements Store.
func (m *MemStore) Running(context.Context) ([]*State, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []*State
	for _, ns := range slices.Sorted(maps.Keys(m.current)) {
		if st := m.current[ns]; st.State == Running {
			out = append(out, st.clone())
		}
	}
	return out, nil
}

// List implements Store.
func (m *MemStore) List(_ context.Context, ns string) ([]*State, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []*State
	if st := m.current[ns]; st != nil {
		out = append(out, st.clone())
	}
	for i := len(m.ended[ns]) - 1; i >= 0; i-- {
		out = append(out, m.ended[ns][i].clone())
	}
	return out, nil
}

// Commit implements Store.
func (m *MemStore) Commit(_ context.Context, c Commit) (int64, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	ns := c.Next.Namespace
	cur := m.current[ns]
	switch {
	case c.Leading != nil && !c.Leading.(func() bool)():
		return 0, fmt.Errorf("%w: not leading", ErrConflict)
	case cur == nil && c.Prev != nil, cur != nil && (c.Prev == nil || c.Prev.Version != cur.Version):
		return 0, ErrConflict
	}
	var rev int64 // the change's
	if c.Change != nil && m.apply != nil {
		var err error
		if rev, err = m.apply(c); err != nil {
			return 0, err
		}
	}
	m.rev++
	if c.Change != nil && m.apply == nil {
		rev = m.rev
	}
	next := c.Next.clone()
	next.Version = m.rev
	if c.Change != nil {
		next.FillRevision(rev)
		c.Next.FillRevision(rev)
	}
	if c.Change != nil && m.apply == nil {
		data := m.content[ns]
		if data == nil {
			data = make(map[string]json.RawMessage)
			m.content[ns] = data
		}
		for k, v := range c.Change.Puts {
			data[k] = v
		}
		for _, k := range c.Change.Deletes {
			delete(data, k)
		}
	}
	if cur != nil && cur.ID != next.ID {
		m.ended[ns] = append(m.ended[ns], cur)
		if len(m.ended[ns]) > MaxKept {
			m.ended[ns] = slices.Delete(m.ended[ns], 0, len(m.ended[ns])-MaxKept)
		}
	}
	m.current[ns] = next
	if c.Change == nil {
		rev = m.rev
	}
	m.log = append(m.log, Committed{Revision: rev, Change: c.Change, State: next.clone()})
	if len(m.log) > maxLog {
		m.log = slices.Delete(m.log, 0, len(m.log)-maxLog)
	}
	if m.changed != nil {
		close(m.changed)
		m.changed = nil
	}
	return m.rev, nil
}

// Log returns the commits made (the newest maxLog), oldest first;
// Revision is the change's (for a commit of the state alone, the state's
// Version).
func (m *MemStore) Log() []Committed {
	m.mu.Lock()
	defer m.mu.Unlock()
	return slices.Clone(m.log)
}

// Content returns namespace ns's content.
func (m *MemStore) Content(ns string) map[string]json.RawMessage {
	m.mu.Lock()
	defer m.mu.Unlock()
	return maps.Clone(m.content[ns])
}
