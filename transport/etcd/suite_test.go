package etcd_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/holdfast-dev/holdfast/internal/sdksuite"
	"github.com/holdfast-dev/holdfast/transport"
	"github.com/holdfast-dev/holdfast/transport/etcd"
)

// TestSDKAgainstTheEtcdSource runs the SDK's end-to-end suite (the one
// package config runs against the reference server and the server module
// against holdfast server) against the etcd source: clients of a source
// that reaches the shared cluster through a proxy in front of each member,
// which the suite's faults take down, cut and black-hole. What a source
// has not (bearer tokens, long-poll) the suite skips; a store reset is a
// new cluster behind the proxies.
func TestSDKAgainstTheEtcdSource(t *testing.T) {
	sdksuite.Run(t, func(t testing.TB, o sdksuite.Options) sdksuite.Server {
		t.Helper()
		if o.BearerToken != "" {
			t.Skip("the etcd source has no bearer tokens")
		}
		cl := sharedCluster(t)
		ps := startProxies(t, cl)
		return &suiteSource{
			t:   t,
			cl:  cl,
			ps:  ps,
			pub: newSource(t, cl.endpoints()),
			src: &faultSource{Source: newSource(t, ps.urls(), suiteSourceOptions()...)},
		}
	})
}

// The timings of the clients' source. The suite's heartbeat; an idle
// timeout (the source's, which is also its QuietLimit: how long a
// namespace stays Fresh without a confirmation) well within the black-hole
// case's bound of three heartbeats and a second, and well over a loaded
// machine's pauses; a request timeout short enough that a snapshot with
// the path down fails within the case of a server down at open (300 ms),
// as a refused connection does over HTTP.
func suiteSourceOptions() []etcd.Option {
	return []etcd.Option{
		etcd.WithHeartbeat(sdksuite.Heartbeat),
		etcd.WithIdleTimeout(10 * sdksuite.Heartbeat),
		etcd.WithRequestTimeout(5 * sdksuite.Heartbeat),
	}
}

// suiteSource is the suite's Server over the etcd source: publishes go
// straight to the cluster, the clients' source through the proxies.
type suiteSource struct {
	t   testing.TB
	cl  *cluster
	ps  proxies
	pub *etcd.Source
	src *faultSource
}

func (s *suiteSource) Target() sdksuite.Target { return sdksuite.Source(s.src) }

func (s *suiteSource) Publish(ns string, puts map[string]any, deletes ...string) (int64, error) {
	return sourcePublisher{s.pub}.Publish(ns, puts, deletes...)
}

func (s *suiteSource) Compact(rev int64) (int64, error) {
	ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
	defer cancel()
	cli := s.cl.client(s.t)
	if rev == 0 {
		resp, err := cli.Get(ctx, etcd.KeyRoot)
		if err != nil {
			return 0, err
		}
		rev = resp.Header.Revision
	}
	if _, err := cli.Compact(ctx, rev); err != nil {
		return 0, err
	}
	return rev, nil
}

// Stop cuts the path to every member; the cluster runs on.
func (s *suiteSource) Stop() error    { s.ps.setDown(true); return nil }
func (s *suiteSource) Restart() error { s.ps.setDown(false); return nil }

// ResetStore starts a new cluster, whose revisions start again, with a
// store id of its own, and turns the proxies to it.
func (s *suiteSource) ResetStore() string {
	cl := startCluster(s.t)
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		s.t.Fatal(err)
	}
	id := hex.EncodeToString(b[:])
	ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
	defer cancel()
	if _, err := cl.client(s.t).Put(ctx, etcd.StoreIDKey, id); err != nil {
		s.t.Fatal(err)
	}
	s.cl, s.pub = cl, newSource(s.t, cl.endpoints())
	for i, p := range s.ps {
		p.retarget(cl.members[i].clientURL)
	}
	return id
}

func (s *suiteSource) DropStreams()         { s.ps.drop() }
func (s *suiteSource) SetBlackhole(on bool) { s.ps.setBlackhole(on) }
func (s *suiteSource) FailNext(n, status int, retryAfter time.Duration) {
	s.src.failNext(n, status, retryAfter)
}
func (s *suiteSource) Stats() sdksuite.Stats { return s.src.stats() }
func (s *suiteSource) OpenStreams() int      { return int(s.src.open.Load()) }

// faultSource is the etcd source, all of it, with the suite's counts of
// its calls and the failures FailNext asks for.
type faultSource struct {
	*etcd.Source

	snapshots, watches, streams, compacted atomic.Int64
	open                                   atomic.Int64 // watches in flight

	mu         sync.Mutex
	fail       int
	failStatus int
	failAfter  time.Duration
}

func (f *faultSource) failNext(n, status int, after time.Duration) {
	f.mu.Lock()
	f.fail, f.failStatus, f.failAfter = n, status, after
	f.mu.Unlock()
}

// refused returns the injected failure of this call, if any.
func (f *faultSource) refused() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.fail == 0 {
		return nil
	}
	f.fail--
	return &transport.StatusError{StatusCode: f.failStatus, Code: transport.CodeUnavailable, Message: "injected fault", RetryAfter: f.failAfter}
}

func (f *faultSource) Snapshot(ctx context.Context, req transport.SnapshotRequest) (*transport.Snapshot, error) {
	f.snapshots.Add(1)
	if err := f.refused(); err != nil {
		return nil, err
	}
	return f.Source.Snapshot(ctx, req)
}

func (f *faultSource) Watch(ctx context.Context, req transport.WatchRequest, handle func(transport.Event) error) error {
	f.watches.Add(1)
	f.open.Add(1)
	defer f.open.Add(-1)
	if err := f.refused(); err != nil {
		return err
	}
	err := f.Source.Watch(ctx, req, handle)
	if errors.Is(err, transport.ErrCompacted) {
		f.compacted.Add(1)
	}
	return err
}

func (f *faultSource) WatchStream(ctx context.Context, req transport.StreamRequest, handle func(transport.StreamEvent) error) error {
	f.streams.Add(1)
	f.open.Add(1)
	defer f.open.Add(-1)
	if err := f.refused(); err != nil {
		return err
	}
	return f.Source.WatchStream(ctx, req, func(ev transport.StreamEvent) error {
		if ev.Ended != nil && errors.Is(ev.Ended.Err, transport.ErrCompacted) {
			f.compacted.Add(1)
		}
		return handle(ev)
	})
}

func (f *faultSource) stats() sdksuite.Stats {
	return sdksuite.Stats{Snapshots: f.snapshots.Load(), Watches: f.watches.Load(), Streams: f.streams.Load(), Compacted: f.compacted.Load()}
}
