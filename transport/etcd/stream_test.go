package etcd_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"

	"github.com/holdfast-dev/holdfast/internal/sdksuite"
	"github.com/holdfast-dev/holdfast/internal/testutil"
	"github.com/holdfast-dev/holdfast/transport"
	"github.com/holdfast-dev/holdfast/transport/etcd"
)

// countingWatcher counts the clientv3 Watch calls of a Source.
type countingWatcher struct {
	clientv3.Watcher
	calls atomic.Int64
}

func (w *countingWatcher) Watch(ctx context.Context, key string, opts ...clientv3.OpOption) clientv3.WatchChan {
	w.calls.Add(1)
	return w.Watcher.Watch(ctx, key, opts...)
}

// streamCounts are what a countedSource counts: clientv3 Watch calls, and
// the gRPC Watch streams the etcd client opened (by a stream interceptor),
// and how many are open (until a receive on one fails).
type streamCounts struct {
	watches     *countingWatcher
	grpcStreams atomic.Int64
	mu          sync.Mutex
	live        int
}

func (n *streamCounts) opened() {
	n.grpcStreams.Add(1)
	n.mu.Lock()
	defer n.mu.Unlock()
	n.live++
}

func (n *streamCounts) closed() {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.live--
}

func (n *streamCounts) open() int {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.live
}

// countedStream notes when its gRPC stream ends.
type countedStream struct {
	grpc.ClientStream
	once sync.Once
	n    *streamCounts
}

func (s *countedStream) RecvMsg(m any) error {
	err := s.ClientStream.RecvMsg(m)
	if err != nil {
		s.once.Do(s.n.closed)
	}
	return err
}

// countedSource returns a Source on a client of its own whose watch calls
// and gRPC watch streams are counted.
func countedSource(t *testing.T, cl *cluster, opts ...etcd.Option) (*etcd.Source, *streamCounts) {
	t.Helper()
	n := &streamCounts{}
	cli, err := clientv3.New(clientv3.Config{
		Endpoints:   cl.endpoints(),
		DialTimeout: 5 * time.Second,
		Logger:      zap.NewNop(),
		DialOptions: []grpc.DialOption{grpc.WithChainStreamInterceptor(
			func(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
				cs, err := streamer(ctx, desc, cc, method, opts...)
				if err != nil || method != "/etcdserverpb.Watch/Watch" {
					return cs, err
				}
				n.opened()
				return &countedStream{ClientStream: cs, n: n}, nil
			})},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cli.Close() })
	n.watches = &countingWatcher{Watcher: cli.Watcher}
	cli.Watcher = n.watches
	base := []etcd.Option{
		etcd.WithClient(cli),
		etcd.WithHeartbeat(testHeartbeat),
		etcd.WithIdleTimeout(testIdle),
		etcd.WithRequestTimeout(testRequest),
		etcd.WithLogger(sdksuite.Logger(t)),
	}
	src, err := etcd.New(append(base, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = src.Close() })
	return src, n
}

// streamStamped is a stream event and when the handler got it.
type streamStamped struct {
	transport.StreamEvent
	at time.Time
}

// streamInto runs src.WatchStream in a goroutine, sending its events to
// the returned channel and its result to the other; it ends with the test.
func streamInto(t *testing.T, src *etcd.Source, req transport.StreamRequest) (<-chan streamStamped, <-chan error) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	events, done, exited := make(chan streamStamped, 10000), make(chan error, 1), make(chan struct{})
	go func() {
		defer close(exited)
		done <- src.WatchStream(ctx, req, func(ev transport.StreamEvent) error {
			select {
			case events <- streamStamped{ev, time.Now()}:
			case <-ctx.Done():
			}
			return nil
		})
	}()
	t.Cleanup(func() { cancel(); <-exited })
	return events, done
}

func nextStreamEvent(t *testing.T, events <-chan streamStamped, done <-chan error, what string, match func(transport.StreamEvent) bool) streamStamped {
	t.Helper()
	deadline := time.After(waitLimit)
	for {
		select {
		case ev := <-events:
			if match(ev.StreamEvent) {
				return ev
			}
		case err := <-done:
			t.Fatalf("waiting for %s: the stream ended: %v", what, err)
		case <-deadline:
			t.Fatalf("timed out waiting for %s", what)
		}
	}
}

func describeStream(ev transport.StreamEvent) string {
	switch {
	case ev.Change != nil:
		return fmt.Sprintf("change %s@%d (prev %d)", ev.Change.Namespace, ev.Change.Revision, ev.Change.PrevRevision)
	case ev.Progress != nil:
		return fmt.Sprintf("progress %d", ev.Progress.Cursor)
	case ev.Ended != nil:
		return fmt.Sprintf("ended %s: %v", ev.Ended.Namespace, ev.Ended.Err)
	}
	return "empty event"
}

// streamChecker checks a stream's events as they come: changes of members
// only, in store order, chaining per namespace, none at or below what the
// stream already told; progress never backwards.
type streamChecker struct {
	t       *testing.T
	last    map[string]int64 // per namespace: its revision as delivered
	pos     int64            // the highest revision told, by change or progress
	changes map[string][]int64
	ended   map[string]error
}

func newStreamChecker(t *testing.T, req transport.StreamRequest, revs map[string]int64) *streamChecker {
	c := &streamChecker{t: t, last: map[string]int64{}, changes: map[string][]int64{}, ended: map[string]error{}}
	for _, r := range req.Namespaces {
		c.last[r.Namespace] = revs[r.Namespace]
	}
	return c
}

func (c *streamChecker) check(ev transport.StreamEvent) {
	c.t.Helper()
	switch {
	case ev.Change != nil:
		cs := ev.Change
		prev, ok := c.last[cs.Namespace]
		if !ok {
			c.t.Fatalf("%s: not a member of the stream", describeStream(ev))
		}
		if _, gone := c.ended[cs.Namespace]; gone {
			c.t.Fatalf("%s after the namespace ended", describeStream(ev))
		}
		if cs.Revision <= c.pos {
			c.t.Fatalf("%s at or below what the stream told, %d: out of store order or twice", describeStream(ev), c.pos)
		}
		if cs.PrevRevision != prev {
			c.t.Fatalf("%s; want prev %d", describeStream(ev), prev)
		}
		c.last[cs.Namespace], c.pos = cs.Revision, cs.Revision
		c.changes[cs.Namespace] = append(c.changes[cs.Namespace], cs.Revision)
	case ev.Progress != nil:
		if ev.Progress.Cursor < c.pos {
			c.t.Fatalf("%s below what the stream told, %d", describeStream(ev), c.pos)
		}
		if ev.Progress.StoreID == "" {
			c.t.Fatalf("%s without a store id", describeStream(ev))
		}
		c.pos = ev.Progress.Cursor
	case ev.Ended != nil:
		c.ended[ev.Ended.Namespace] = ev.Ended.Err
	default:
		c.t.Fatal("an empty stream event")
	}
}

// TestStreamTwentyNamespaces: 20 namespaces on one stream, publishes to
// them (and to others) in random order: each gets exactly its changes, in
// order, chained, and the stream is one clientv3 Watch on one gRPC watch
// stream.
func TestStreamTwentyNamespaces(t *testing.T) {
	cl := sharedCluster(t)
	pub := newSource(t, cl.endpoints())
	src, counts := countedSource(t, cl)

	var req transport.StreamRequest
	revs := map[string]int64{}
	for i := range 20 {
		ns := fmt.Sprintf("multi-%02d", i)
		revs[ns] = publish(t, pub, ns, map[string]any{"v": 0})
		req.Namespaces = append(req.Namespaces, transport.WatchRequest{Namespace: ns, Since: revs[ns]})
	}
	// Cursors differ: the stream starts at the smallest and drops the
	// replay below each member's own.
	for _, r := range req.Namespaces[:5] {
		revs[r.Namespace] = publish(t, pub, r.Namespace, map[string]any{"v": "before"})
	}
	events, done := streamInto(t, src, req)

	want := map[string][]int64{}
	for _, r := range req.Namespaces[:5] {
		want[r.Namespace] = []int64{revs[r.Namespace]}
	}
	rng := rand.New(rand.NewPCG(1, 2))
	var last int64
	for i := range 100 {
		ns := req.Namespaces[rng.IntN(len(req.Namespaces))].Namespace
		if i%10 == 0 {
			publish(t, pub, "unwatched", map[string]any{"i": i})
		}
		last = publish(t, pub, ns, map[string]any{"i": i})
		want[ns] = append(want[ns], last)
	}

	c := newStreamChecker(t, req, map[string]int64{})
	for _, r := range req.Namespaces {
		c.last[r.Namespace] = r.Since
	}
	for c.pos < last {
		ev := nextStreamEvent(t, events, done, fmt.Sprintf("every change up to %d", last), func(transport.StreamEvent) bool { return true })
		c.check(ev.StreamEvent)
	}
	for _, r := range req.Namespaces {
		if got, w := fmt.Sprint(c.changes[r.Namespace]), fmt.Sprint(want[r.Namespace]); got != w {
			t.Errorf("%s: changes %s; want %s", r.Namespace, got, w)
		}
	}
	if len(c.ended) > 0 {
		t.Errorf("ended: %v", c.ended)
	}
	if n := counts.watches.calls.Load(); n != 1 {
		t.Errorf("%d clientv3 Watch calls; want 1", n)
	}
	if n := counts.grpcStreams.Load(); n != 1 {
		t.Errorf("%d gRPC watch streams; want 1", n)
	}
}

// TestStreamBadRequest: a namespace named twice, too many namespaces, a
// negative cursor: the whole request fails with ErrBadRequest, before any
// watch.
func TestStreamBadRequest(t *testing.T) {
	cl := sharedCluster(t)
	src, counts := countedSource(t, cl)
	many := make([]transport.WatchRequest, transport.MaxStreamNamespaces+1)
	for i := range many {
		many[i] = transport.WatchRequest{Namespace: fmt.Sprintf("n%d", i), Since: 1}
	}
	for _, tc := range []struct {
		name string
		req  []transport.WatchRequest
	}{
		{"twice", []transport.WatchRequest{{Namespace: "a", Since: 1}, {Namespace: "b", Since: 1}, {Namespace: "a", Since: 2}}},
		{"invalid twice", []transport.WatchRequest{{Namespace: "Bad", Since: 1}, {Namespace: "Bad", Since: 1}}},
		{"too many", many},
		{"negative", []transport.WatchRequest{{Namespace: "a", Since: -1}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
			defer cancel()
			err := src.WatchStream(ctx, transport.StreamRequest{Namespaces: tc.req}, func(ev transport.StreamEvent) error {
				return fmt.Errorf("got %s from a refused request", describeStream(ev))
			})
			if !errors.Is(err, transport.ErrBadRequest) {
				t.Errorf("WatchStream = %v; want ErrBadRequest", err)
			}
		})
	}
	if n := counts.watches.calls.Load(); n != 0 {
		t.Errorf("%d watches for refused requests", n)
	}
}

// TestStreamInvalidNameAmongValid: an invalid name is an Ended event
// (ErrInvalidNamespace), the valid ones go on.
func TestStreamInvalidNameAmongValid(t *testing.T) {
	cl := sharedCluster(t)
	pub := newSource(t, cl.endpoints())
	src := newSource(t, cl.endpoints())
	ra := publish(t, pub, "valid-a", map[string]any{"v": 0})
	rb := publish(t, pub, "valid-b", map[string]any{"v": 0})
	req := transport.StreamRequest{Namespaces: []transport.WatchRequest{
		{Namespace: "valid-a", Since: ra}, {Namespace: "Not Valid", Since: ra}, {Namespace: "valid-b", Since: rb},
	}}
	events, done := streamInto(t, src, req)
	ev := nextStreamEvent(t, events, done, "the invalid name's end", func(ev transport.StreamEvent) bool { return ev.Ended != nil })
	if ev.Ended.Namespace != "Not Valid" || !errors.Is(ev.Ended.Err, transport.ErrInvalidNamespace) {
		t.Fatalf("got %s; want Not Valid ended with ErrInvalidNamespace", describeStream(ev.StreamEvent))
	}
	r1 := publish(t, pub, "valid-b", map[string]any{"v": 1})
	ev = nextStreamEvent(t, events, done, "valid-b's change", func(ev transport.StreamEvent) bool { return ev.Change != nil || ev.Ended != nil })
	if ev.Change == nil || ev.Change.Namespace != "valid-b" || ev.Change.Revision != r1 || ev.Change.PrevRevision != rb {
		t.Fatalf("got %s; want valid-b@%d after %d", describeStream(ev.StreamEvent), r1, rb)
	}
}

// TestStreamCompactedMember: one member's cursor compacted away is an
// Ended event with a *CompactedError; the others go on, on a new watch on
// the same gRPC stream, and miss nothing.
func TestStreamCompactedMember(t *testing.T) {
	cl := sharedCluster(t)
	pub := newSource(t, cl.endpoints())
	// No heartbeat in the test: one that read compacted-old's meta key at
	// the head before etcd reported the compaction would confirm it past
	// the compaction revision, and it would rightly go on.
	src, counts := countedSource(t, cl, etcd.WithHeartbeat(time.Minute), etcd.WithIdleTimeout(2*time.Minute))
	old := publish(t, pub, "compacted-old", map[string]any{"v": 0})
	publish(t, pub, "compacted-filler", map[string]any{"v": 0})
	publish(t, pub, "compacted-filler", map[string]any{"v": 1})
	cur := publish(t, pub, "compacted-current", map[string]any{"v": 0})
	compactEverywhere(t, cl, cur)
	req := transport.StreamRequest{Namespaces: []transport.WatchRequest{
		{Namespace: "compacted-old", Since: old}, {Namespace: "compacted-current", Since: cur},
	}}
	events, done := streamInto(t, src, req)
	c := newStreamChecker(t, req, map[string]int64{"compacted-old": old, "compacted-current": cur})
	ev := nextStreamEvent(t, events, done, "the compacted member's end", func(ev transport.StreamEvent) bool {
		c.check(ev)
		return ev.Ended != nil
	})
	var ce *transport.CompactedError
	if ev.Ended.Namespace != "compacted-old" || !errors.As(ev.Ended.Err, &ce) || ce.CompactRevision != cur {
		t.Fatalf("got %s; want compacted-old ended, compacted at %d", describeStream(ev.StreamEvent), cur)
	}
	var last int64
	for i := 1; i <= 3; i++ {
		publish(t, pub, "compacted-old", map[string]any{"v": i})
		last = publish(t, pub, "compacted-current", map[string]any{"v": i})
	}
	for c.pos < last {
		c.check(nextStreamEvent(t, events, done, "compacted-current's changes", func(transport.StreamEvent) bool { return true }).StreamEvent)
	}
	if n := len(c.changes["compacted-current"]); n != 3 {
		t.Errorf("compacted-current got %d changes; want 3", n)
	}
	if n := len(c.changes["compacted-old"]); n != 0 {
		t.Errorf("compacted-old got %d changes after it ended", n)
	}
	// The etcd client closes a gRPC watch stream when its last watch
	// ends: the watch after the compaction may open a new one as the old
	// one closes, and then only that one stays.
	testutil.Eventually(t, waitLimit, func() bool { return counts.open() == 1 }, "one gRPC watch stream open")
	if n := counts.grpcStreams.Load(); n > 2 {
		t.Errorf("%d gRPC watch streams; want at most 2 (one before the compaction, one after)", n)
	}
	t.Logf("clientv3 Watch calls: %d, gRPC watch streams: %d", counts.watches.calls.Load(), counts.grpcStreams.Load())
}

// compactEverywhere compacts the cluster at rev and waits until every
// member has applied it: Compact returns once the member that served it
// has, and a watch on a member behind would still replay the history.
func compactEverywhere(t *testing.T, cl *cluster, rev int64) {
	t.Helper()
	if _, err := cl.client(t).Compact(context.Background(), rev); err != nil {
		t.Fatal(err)
	}
	for _, m := range cl.members {
		cli, err := clientv3.New(clientv3.Config{Endpoints: []string{m.clientURL}, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
		if err != nil {
			t.Fatal(err)
		}
		testutil.Eventually(t, waitLimit, func() bool {
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			defer cancel()
			_, err := cli.Get(ctx, etcd.KeyRoot, clientv3.WithRev(rev-1), clientv3.WithSerializable(), clientv3.WithCountOnly())
			return errors.Is(err, rpctypes.ErrCompacted)
		}, "member "+m.name+" compacted at "+fmt.Sprint(rev))
		_ = cli.Close()
	}
}

// TestStreamCursorAhead: a member whose cursor is above the store's head
// ends with ErrCursorAhead; the others go on.
func TestStreamCursorAhead(t *testing.T) {
	cl := sharedCluster(t)
	pub := newSource(t, cl.endpoints())
	src := newSource(t, cl.endpoints())
	r := publish(t, pub, "ahead-ok", map[string]any{"v": 0})
	req := transport.StreamRequest{Namespaces: []transport.WatchRequest{
		{Namespace: "ahead-ok", Since: r}, {Namespace: "ahead-far", Since: r + 1_000_000},
	}}
	events, done := streamInto(t, src, req)
	ev := nextStreamEvent(t, events, done, "the ahead member's end", func(ev transport.StreamEvent) bool { return ev.Ended != nil })
	if ev.Ended.Namespace != "ahead-far" || !errors.Is(ev.Ended.Err, transport.ErrCursorAhead) {
		t.Fatalf("got %s; want ahead-far ended with ErrCursorAhead", describeStream(ev.StreamEvent))
	}
	r1 := publish(t, pub, "ahead-ok", map[string]any{"v": 1})
	ev = nextStreamEvent(t, events, done, "ahead-ok's change", func(ev transport.StreamEvent) bool { return ev.Change != nil || ev.Ended != nil })
	if ev.Change == nil || ev.Change.Revision != r1 {
		t.Fatalf("got %s; want ahead-ok@%d", describeStream(ev.StreamEvent), r1)
	}
}

// TestStreamProgressAfterAnUnwatchedPublish: a publish to a namespace the
// stream does not carry advances the stream's cursor within 1 s, with a
// heartbeat far longer than that (so not by the heartbeat's read).
func TestStreamProgressAfterAnUnwatchedPublish(t *testing.T) {
	cl := sharedCluster(t)
	pub := newSource(t, cl.endpoints())
	src := newSource(t, cl.endpoints(), etcd.WithHeartbeat(time.Minute), etcd.WithIdleTimeout(2*time.Minute))
	r := publish(t, pub, "progress-watched", map[string]any{"v": 0})
	events, done := streamInto(t, src, transport.StreamRequest{Namespaces: []transport.WatchRequest{{Namespace: "progress-watched", Since: r}}})
	// The first publish shows the watch is up (no heartbeat in the test).
	var worst time.Duration
	for i := range 5 {
		at := time.Now()
		rev := publish(t, pub, "progress-elsewhere", map[string]any{"i": i})
		ev := nextStreamEvent(t, events, done, fmt.Sprintf("progress to %d", rev), func(ev transport.StreamEvent) bool {
			if ev.Change != nil || ev.Ended != nil {
				t.Fatalf("got %s", describeStream(ev))
			}
			return ev.Progress.Cursor >= rev
		})
		took := ev.at.Sub(at)
		if i > 0 {
			worst = max(worst, took)
		}
		t.Logf("publish %d at revision %d: progress after %v", i, rev, took.Round(time.Microsecond))
	}
	if worst > time.Second {
		t.Errorf("progress came %v after a publish; want within 1s", worst)
	}
}

// TestStreamHeartbeatProgress: with no publish at all, the heartbeat
// confirms the stream at the head (a write outside the holdfast prefix
// moves it).
func TestStreamHeartbeatProgress(t *testing.T) {
	cl := sharedCluster(t)
	pub := newSource(t, cl.endpoints())
	src := newSource(t, cl.endpoints())
	r := publish(t, pub, "heartbeat-a", map[string]any{"v": 0})
	events, done := streamInto(t, src, transport.StreamRequest{Namespaces: []transport.WatchRequest{{Namespace: "heartbeat-a", Since: r}}})
	put, err := cl.client(t).Put(context.Background(), "/elsewhere/key", "x")
	if err != nil {
		t.Fatal(err)
	}
	head := put.Header.Revision
	nextStreamEvent(t, events, done, fmt.Sprintf("a heartbeat's progress to %d", head), func(ev transport.StreamEvent) bool {
		return ev.Progress != nil && ev.Progress.Cursor >= head
	})
}

// TestStreamThroughDroppedConnections: connections dropped under a stream
// (the etcd client resumes its watch): every member still gets each of its
// changes once, in order.
func TestStreamThroughDroppedConnections(t *testing.T) {
	cl := sharedCluster(t)
	ps := startProxies(t, cl)
	pub := newSource(t, cl.endpoints())
	src := newSource(t, ps.urls())
	var req transport.StreamRequest
	for i := range 5 {
		ns := fmt.Sprintf("dropped-%d", i)
		req.Namespaces = append(req.Namespaces, transport.WatchRequest{Namespace: ns, Since: publish(t, pub, ns, map[string]any{"v": 0})})
	}
	events, done := streamInto(t, src, req)
	c := newStreamChecker(t, req, map[string]int64{})
	for _, r := range req.Namespaces {
		c.last[r.Namespace] = r.Since
	}
	want := map[string]int{}
	var last int64
	for i := range 30 {
		ns := req.Namespaces[i%len(req.Namespaces)].Namespace
		last = publish(t, pub, ns, map[string]any{"i": i})
		want[ns]++
		if i%5 == 0 {
			ps.drop()
		}
	}
	for c.pos < last {
		c.check(nextStreamEvent(t, events, done, fmt.Sprintf("every change up to %d", last), func(transport.StreamEvent) bool { return true }).StreamEvent)
	}
	for _, r := range req.Namespaces {
		if got := len(c.changes[r.Namespace]); got != want[r.Namespace] {
			t.Errorf("%s: %d changes; want %d", r.Namespace, got, want[r.Namespace])
		}
	}
}

// TestWatchEndedEarlyLeavesNoGRPCStream: streams and watches that end
// before etcd has created their watch (as an SDK's stream does when
// namespaces join right after it opened) leave no gRPC watch stream
// open. clientv3 keeps one open for good when its only watch is
// cancelled before creation; the Source cancels only after it
// (etcdWatch). Without that, 20 of 20 stayed open.
func TestWatchEndedEarlyLeavesNoGRPCStream(t *testing.T) {
	cl := sharedCluster(t)
	run := map[string]func(*etcd.Source, context.Context) error{
		"stream": func(src *etcd.Source, ctx context.Context) error {
			return src.WatchStream(ctx, transport.StreamRequest{Namespaces: []transport.WatchRequest{{Namespace: "early-end"}}},
				func(transport.StreamEvent) error { return nil })
		},
		"watch": func(src *etcd.Source, ctx context.Context) error {
			return src.Watch(ctx, transport.WatchRequest{Namespace: "early-end"}, func(transport.Event) error { return nil })
		},
	}
	for name, watch := range run {
		t.Run(name, func(t *testing.T) {
			src, counts := countedSource(t, cl)
			for range 20 {
				ctx, cancel := context.WithCancel(context.Background())
				done := make(chan error, 1)
				go func() { done <- watch(src, ctx) }()
				cancel() // at once: most often before etcd created the watch
				if err := <-done; !errors.Is(err, context.Canceled) {
					t.Fatalf("%s: %v", name, err)
				}
			}
			testutil.EventuallyNil(t, waitLimit, func() error {
				if n := counts.open(); n != 0 {
					return fmt.Errorf("%d of %d gRPC watch streams still open", n, counts.grpcStreams.Load())
				}
				return nil
			}, "no gRPC watch stream left open")
		})
	}
}
