package etcd

import (
	"context"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// etcdWatch is one clientv3 watch on a gRPC stream of its own (its
// context's metadata names it), asked for WithCreatedNotify.
//
// clientv3 (v3.6) leaves such a gRPC stream open for as long as the
// client lives when its only watch is cancelled before etcd has created
// it: the cancelled watch stays queued for creation, and the stream shuts
// down only when it closes a created one. A stream that ends quickly
// (the SDK reopens its stream as namespaces join) hit that under load:
// two gRPC streams open where one was wanted. So stopWatch cancels a watch
// only once etcd has created it (or a request timeout has passed).
type etcdWatch struct {
	cancel  context.CancelFunc
	chc     chan clientv3.WatchChan // Watch's result, once it returns
	ch      clientv3.WatchChan      // nil until the owner received it from chc
	created bool                    // a response came on ch: etcd created the watch
}

// startWatch opens a watch of key with wctx's values (its metadata), not
// its cancellation: stopWatch ends it. clientv3's Watch blocks until a
// member accepts the watch: it runs aside, so that the owner's idle
// timeout holds meanwhile.
func (s *Source) startWatch(wctx context.Context, key string, opts ...clientv3.OpOption) *etcdWatch {
	c, cancel := context.WithCancel(context.WithoutCancel(wctx))
	w := &etcdWatch{cancel: cancel, chc: make(chan clientv3.WatchChan, 1)}
	go func() { w.chc <- s.cli.Watch(c, key, append(opts, clientv3.WithCreatedNotify())...) }()
	return w
}

// stopWatch ends w, whose owner reads it no more. A watch etcd has
// created is cancelled at once; one not yet created is cancelled in the
// background once it is, or after the request timeout, or at Close.
// Either way Watch has returned when the Source's wait group is done.
func (s *Source) stopWatch(w *etcdWatch) {
	if w.created {
		w.cancel()
		return
	}
	s.wg.Add(1) // the owner holds one until it returns: Close has not begun waiting
	go func() {
		defer s.wg.Done()
		timer := time.NewTimer(s.opts.requestTimeout)
		defer timer.Stop()
		ch := w.ch
		if ch == nil {
			select {
			case ch = <-w.chc:
			case <-timer.C:
			case <-s.base.Done():
			}
		}
		if ch != nil {
			select {
			case <-ch: // the first response: the creation, or the end
			case <-timer.C:
			case <-s.base.Done():
			}
		}
		w.cancel()
		if ch == nil {
			<-w.chc
		}
	}()
}
