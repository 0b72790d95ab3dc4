package etcd

import (
	"context"
	"sync"

	"go.etcd.io/etcd/api/v3/etcdserverpb"
)

// StoreIDKey holds the store id: a random id that the first holdfast
// server of a store creates, so that every server of the store, and
// every Source, reports the same id, and a store rebuilt from nothing
// gets a new one. It lies outside KeyRoot: no namespace can hold
// it, and no namespace watch sees it.
const StoreIDKey = "/holdfast-meta/store-id"

// storeIDs caches the store id of each etcd cluster id seen: the id under
// StoreIDKey, or the cluster id itself (StoreID) when no holdfast server
// has created one.
type storeIDs struct {
	mu sync.Mutex
	m  map[uint64]string
}

// storeID returns the store id of the store that answered with header h.
// The first answer of a cluster costs one read of StoreIDKey; a failed
// read falls back to the cluster id without remembering it, so the next
// answer tries again.
func (s *Source) storeID(ctx context.Context, h *etcdserverpb.ResponseHeader) string {
	if h == nil {
		return ""
	}
	if s.opts.storeID != "" {
		return s.opts.storeID
	}
	s.ids.mu.Lock()
	id, ok := s.ids.m[h.ClusterId]
	s.ids.mu.Unlock()
	if ok {
		return id
	}
	rctx, cancel := s.requestCtx(ctx)
	resp, err := s.cli.Get(rctx, StoreIDKey)
	cancel()
	if err != nil {
		s.log.Debug("etcd: reading the store id failed; using the cluster id", "err", err)
		return StoreID(h.ClusterId)
	}
	id = StoreID(h.ClusterId)
	if len(resp.Kvs) > 0 && len(resp.Kvs[0].Value) > 0 {
		id = string(resp.Kvs[0].Value)
	}
	s.ids.mu.Lock()
	if s.ids.m == nil {
		s.ids.m = make(map[uint64]string)
	}
	s.ids.m[h.ClusterId] = id
	s.ids.mu.Unlock()
	return id
}
