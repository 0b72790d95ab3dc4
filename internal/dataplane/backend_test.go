package dataplane

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"net"
	"slices"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/holdfast-dev/holdfast/internal/wire"
	"github.com/holdfast-dev/holdfast/transport"
)

// memBackend is a Backend for the data plane's own tests: an origin's
// namespaces, one revision counter, every change kept (no compaction).
// The reference server's MVCC store (internal/fakeserver) is the real one.
type memBackend struct {
	mu   sync.Mutex
	id   string
	head int64
	nss  map[string]*memNS
	out  func(items ...HubItem)
}

type memNS struct {
	rev     int64
	live    map[string]json.RawMessage
	changes []*Change
}

var _ Backend = (*memBackend)(nil)

func newMemBackend() *memBackend {
	return &memBackend{id: "0123456789abcdef", nss: make(map[string]*memNS)}
}

// start serves the data plane over b on a free loopback port and returns
// it; it is closed with the test.
func (b *memBackend) start(t testing.TB, opts ...Option) *Server {
	t.Helper()
	s, err := New(b, opts...)
	if err != nil {
		t.Fatal(err)
	}
	b.mu.Lock()
	b.out = s.Enqueue
	b.mu.Unlock()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Listen(l); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// url is the base URL of s.
func url(s *Server) string { return "http://" + s.Addr() }

// publish commits puts (JSON values) and deletes to ns as the next
// revision and hands the change to the server.
func (b *memBackend) publish(ns string, puts map[string]any, deletes ...string) int64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	n := b.nss[ns]
	if n == nil {
		n = &memNS{live: map[string]json.RawMessage{}}
		b.nss[ns] = n
	}
	b.head++
	cs := transport.ChangeSet{Namespace: ns, Revision: b.head, PrevRevision: n.rev, StoreID: b.id, CommittedAt: time.Now().UTC()}
	live := maps.Clone(n.live)
	for k, v := range puts {
		data, err := json.Marshal(v)
		if err != nil {
			panic(err)
		}
		if cs.Puts == nil {
			cs.Puts = make(map[string]json.RawMessage)
		}
		cs.Puts[k], live[k] = data, data
	}
	for _, k := range deletes {
		if _, ok := live[k]; ok {
			cs.Deletes = append(cs.Deletes, k)
			delete(live, k)
		}
	}
	c := &Change{Gen: 1, CS: cs}
	n.rev, n.live, n.changes = b.head, live, append(n.changes, c)
	if b.out != nil {
		b.out(HubItem{C: c, Gen: 1})
	}
	return b.head
}

func (b *memBackend) Info() (string, int64, int64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.id, b.head, 0
}

func (b *memBackend) NsRevision(ns string) (int64, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if n := b.nss[ns]; n != nil {
		return n.rev, true
	}
	return 0, false
}

func (b *memBackend) Snapshot(ns string) (Snapshot, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	n := b.nss[ns]
	if n == nil {
		return Snapshot{StoreID: b.id, Cursor: b.head}, fmt.Errorf("%w: %q", ErrUnknownNamespace, ns)
	}
	return Snapshot{StoreID: b.id, Rev: n.rev, Cursor: b.head, Values: n.live}, nil
}

// backlogLocked returns n's changes after since.
func backlogLocked(n *memNS, since int64) []*Change {
	i := sort.Search(len(n.changes), func(i int) bool { return n.changes[i].CS.Revision > since })
	return n.changes[i:len(n.changes):len(n.changes)]
}

func (b *memBackend) Subscribe(ns string, since int64, register func(Subscription)) (Subscription, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	sub := Subscription{StoreID: b.id, Gen: 1, Head: b.head}
	n := b.nss[ns]
	switch {
	case n == nil:
		return sub, fmt.Errorf("%w: %q", ErrUnknownNamespace, ns)
	case since > b.head:
		return sub, fmt.Errorf("%w: cursor %d is above the store's head %d", transport.ErrCursorAhead, since, b.head)
	case since < 0:
		since = b.head
	}
	sub.NsRev, sub.Backlog = n.rev, backlogLocked(n, since)
	if register != nil {
		register(sub)
	}
	return sub, nil
}

func (b *memBackend) SubscribeMany(reqs []SinceReq, register func(Subscription, []string)) (Subscription, []wire.NamespaceEndedBody) {
	b.mu.Lock()
	defer b.mu.Unlock()
	sub := Subscription{StoreID: b.id, Gen: 1, Head: b.head}
	var ended []wire.NamespaceEndedBody
	var names []string
	for _, r := range reqs {
		n := b.nss[r.Name]
		if n == nil || r.Since > b.head {
			ended = append(ended, wire.NamespaceEndedBody{Namespace: r.Name, Code: transport.CodeNotFound, Message: "no such namespace"})
			continue
		}
		names = append(names, r.Name)
		sub.Backlog = append(sub.Backlog, backlogLocked(n, r.Since)...)
	}
	slices.SortFunc(sub.Backlog, func(x, y *Change) int { return int(x.CS.Revision - y.CS.Revision) })
	if register != nil {
		register(sub, names)
	}
	return sub, ended
}

func (b *memBackend) Generation() uint64 { return 1 }

func (b *memBackend) Known(acks []transport.Ack) []transport.Ack {
	b.mu.Lock()
	defer b.mu.Unlock()
	return slices.DeleteFunc(acks, func(a transport.Ack) bool { return b.nss[a.Namespace] == nil || a.Revision > b.head })
}

func (b *memBackend) Freshness(...string) (time.Duration, bool) { return 0, false }

func (b *memBackend) Demand(context.Context, []SinceReq) map[string]error { return nil }
