package etcd

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/holdfast-dev/holdfast/internal/wire"
	"github.com/holdfast-dev/holdfast/transport"
)

// KeyRoot is the key prefix under which every namespace lives: namespace N
// is the prefix KeyRoot + N + "/".
const KeyRoot = "/holdfast/"

// ErrClosed is returned by every method of a closed Source.
var ErrClosed = errors.New("etcd: source closed")

// Prefix returns the key prefix of namespace ns: "/holdfast/" + ns + "/".
// Key k of the namespace is Prefix(ns) + k. The key equal to the prefix
// itself (an empty key name, which transport.ValidateKey refuses) is the
// namespace's meta key: a writer puts a Meta there in the same transaction
// as its puts and deletes (holdfast server's publish does).
func Prefix(ns string) string { return KeyRoot + ns + "/" }

// Meta is the value of a namespace's meta key, as far as the Source reads
// it: the namespace's revision before the change and the commit time,
// which chain each change set on the one before. A writer may store more
// fields beside them (holdfast server records the change's audit there);
// the Source ignores them.
type Meta struct {
	// PrevRevision is the namespace's revision before this change.
	PrevRevision int64     `json:"prev_revision"`
	CommittedAt  time.Time `json:"committed_at"`
}

// Source is a transport.Source over etcd v3. It is safe for concurrent use
// by any number of namespaces. Close it when done.
type Source struct {
	cli   *clientv3.Client
	owned bool
	opts  options
	log   *slog.Logger

	base    context.Context // cancelled by Close: ends every watch
	cancel  context.CancelFunc
	mu      sync.Mutex // guards closed and wg.Add
	closed  bool
	wg      sync.WaitGroup
	ids     storeIDs
	once    sync.Once
	errOnce error

	watchSeq atomic.Uint64
}

var _ transport.Source = (*Source)(nil)

// New returns a Source talking to etcd. It does not wait for a connection:
// the first Snapshot or Watch does, within its context and the request
// timeout.
func New(opts ...Option) (*Source, error) {
	o := defaultOptions()
	for _, opt := range opts {
		if opt != nil {
			opt.apply(&o)
		}
	}
	if err := o.validate(); err != nil {
		return nil, err
	}
	s := &Source{cli: o.client, opts: o, log: o.logger}
	if s.cli == nil {
		cli, err := clientv3.New(clientv3.Config{
			Endpoints:            o.endpoints,
			TLS:                  o.tls,
			Username:             o.username,
			Password:             o.password,
			DialTimeout:          o.dialTimeout,
			DialKeepAliveTime:    o.heartbeat,
			DialKeepAliveTimeout: o.idleTimeout,
			MaxCallRecvMsgSize:   o.maxSnapshotBytes + 64<<10, // the values and the keys' framing
			Logger:               zap.NewNop(),
		})
		if err != nil {
			return nil, fmt.Errorf("etcd: new client: %w", err)
		}
		s.cli, s.owned = cli, true
	}
	s.base, s.cancel = context.WithCancel(context.Background())
	return s, nil
}

// Client returns the etcd client the Source uses.
func (s *Source) Client() *clientv3.Client { return s.cli }

// Close ends every watch of the Source, waits for them to return, and
// closes the etcd client unless it came from WithClient. It is safe to call
// more than once and from several goroutines; later calls return the
// first call's result.
func (s *Source) Close() error {
	s.once.Do(func() {
		s.mu.Lock()
		s.closed = true
		s.mu.Unlock()
		s.cancel()
		s.wg.Wait()
		if s.owned {
			s.errOnce = s.cli.Close()
		}
	})
	return s.errOnce
}

// enter registers a call, so that Close waits for it; the caller calls
// s.wg.Done when it returns.
func (s *Source) enter() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return ErrClosed
	}
	s.wg.Add(1)
	return nil
}

// requestCtx bounds one unary request by the request timeout and by Close.
func (s *Source) requestCtx(ctx context.Context) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithTimeout(ctx, s.opts.requestTimeout)
	stop := context.AfterFunc(s.base, cancel)
	return ctx, func() { stop(); cancel() }
}

// StoreID formats an etcd cluster id as a store id: 16 hex digits, as
// etcdctl prints it.
func StoreID(clusterID uint64) string { return fmt.Sprintf("%016x", clusterID) }

// Snapshot reads the namespace's prefix in one linearizable range read. Its
// Revision is the highest ModRevision of the namespace's keys (the meta key
// included, so a publish of only deletes counts), its Cursor the read's
// header revision, its StoreID the store's (under StoreIDKey, else the
// cluster id; WithStoreID overrides both). A namespace without any key
// is transport.ErrNotFound. With KnownStoreID and KnownRevision matching the
// namespace's current revision, it answers transport.ErrNotModified after a
// keys-only read that returns one key. Both reads are linearizable, so every
// snapshot is marked Linearizable: one behind what a client applied, at the
// same store id, is proof that the store's history was rewritten.
func (s *Source) Snapshot(ctx context.Context, req transport.SnapshotRequest) (*transport.Snapshot, error) {
	snap, err := s.snapshot(ctx, req)
	if snap != nil {
		snap.Linearizable = true
	}
	return snap, err
}

// snapshot reads a snapshot for Snapshot.
func (s *Source) snapshot(ctx context.Context, req transport.SnapshotRequest) (*transport.Snapshot, error) {
	if err := transport.ValidateNamespace(req.Namespace); err != nil {
		return nil, err
	}
	if err := s.enter(); err != nil {
		return nil, err
	}
	defer s.wg.Done()
	ctx, cancel := s.requestCtx(ctx)
	defer cancel()
	prefix := Prefix(req.Namespace)

	if req.KnownStoreID != "" {
		resp, err := s.cli.Get(ctx, prefix, clientv3.WithPrefix(), clientv3.WithKeysOnly(),
			clientv3.WithSort(clientv3.SortByModRevision, clientv3.SortDescend), clientv3.WithLimit(1))
		if err != nil {
			return nil, MapError("snapshot", req.Namespace, err)
		}
		if id := s.storeID(ctx, resp.Header); id == req.KnownStoreID && len(resp.Kvs) > 0 && resp.Kvs[0].ModRevision == req.KnownRevision {
			return &transport.Snapshot{
				Namespace: req.Namespace, StoreID: id,
				Revision: req.KnownRevision, Cursor: resp.Header.Revision,
			}, transport.ErrNotModified
		}
	}

	resp, err := s.cli.Get(ctx, prefix, clientv3.WithPrefix())
	if err != nil {
		return nil, MapError("snapshot", req.Namespace, err)
	}
	if len(resp.Kvs) == 0 {
		return nil, fmt.Errorf("etcd: snapshot of %q: %w", req.Namespace, transport.ErrNotFound)
	}
	values, rev, err := s.decodeKVs(req.Namespace, resp.Kvs)
	if err != nil {
		return nil, err
	}
	obj, err := wire.EncodeValues(values)
	if err != nil {
		return nil, fmt.Errorf("etcd: snapshot of %q: %w", req.Namespace, err)
	}
	return &transport.Snapshot{
		Namespace: req.Namespace,
		StoreID:   s.storeID(ctx, resp.Header),
		Revision:  rev,
		Cursor:    resp.Header.Revision,
		Values:    obj,
	}, nil
}

// decodeKVs turns a range of a namespace's prefix into its values and
// revision, within the size limits. Keys that transport.ValidateKey refuses
// (written past holdfast) are skipped and logged.
func (s *Source) decodeKVs(ns string, kvs []*mvccpb.KeyValue) (map[string]json.RawMessage, int64, error) {
	prefix := Prefix(ns)
	values := make(map[string]json.RawMessage, len(kvs))
	var rev int64
	total := 0
	for _, kv := range kvs {
		rev = max(rev, kv.ModRevision)
		key := string(kv.Key)
		if key == prefix {
			continue // the meta key
		}
		name := key[len(prefix):]
		if err := transport.ValidateKey(name); err != nil {
			s.log.Warn("etcd: skipping a key that is not a valid holdfast key", "ns", ns, "key", key, "err", err)
			continue
		}
		if len(kv.Value) > s.opts.maxValueBytes {
			return nil, 0, fmt.Errorf("%w: %q in namespace %q holds %d bytes (limit %d)", transport.ErrTooLarge, name, ns, len(kv.Value), s.opts.maxValueBytes)
		}
		total += len(kv.Value)
		if total > s.opts.maxSnapshotBytes {
			return nil, 0, fmt.Errorf("%w: snapshot of %q exceeds %d bytes", transport.ErrTooLarge, ns, s.opts.maxSnapshotBytes)
		}
		values[name] = json.RawMessage(kv.Value)
	}
	return values, rev, nil
}

// MapError wraps an etcd client error from operation op on namespace ns
// ("" for none) as the Source's own errors are, so that callers tell them
// apart: credentials refused → transport.ErrUnauthorized, a message over
// the gRPC limit → transport.ErrTooLarge; the rest is wrapped as is.
func MapError(op, ns string, err error) error {
	what := fmt.Sprintf("%s of %q", op, ns)
	if ns == "" {
		what = op
	}
	switch {
	case errors.Is(err, rpctypes.ErrPermissionDenied), errors.Is(err, rpctypes.ErrAuthFailed),
		errors.Is(err, rpctypes.ErrInvalidAuthToken), errors.Is(err, rpctypes.ErrUserEmpty),
		errors.Is(err, rpctypes.ErrAuthOldRevision):
		return fmt.Errorf("etcd: %s: %w: %w", what, transport.ErrUnauthorized, err)
	}
	if st, ok := status.FromError(err); ok && st.Code() == codes.ResourceExhausted {
		return fmt.Errorf("etcd: %s: %w: %w", what, transport.ErrTooLarge, err)
	}
	return fmt.Errorf("etcd: %s: %w", what, err)
}

func itoa(n uint64) string { return strconv.FormatUint(n, 10) }

var _ transport.QuietLimiter = (*Source)(nil)

// QuietLimit is the idle timeout: a healthy watch confirms every
// heartbeat, well within it, so a client that has had no event for that
// long does not call its data fresh.
func (s *Source) QuietLimit() time.Duration { return s.opts.idleTimeout }
