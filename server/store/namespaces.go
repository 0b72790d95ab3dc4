package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/holdfast-dev/holdfast/transport"
	"github.com/holdfast-dev/holdfast/transport/etcd"
)

// Namespaces is holdfast server's write path over a store: it publishes
// and rolls back namespaces in the layout the etcd source reads
// (etcd.Prefix, etcd.Meta), keeps their audit log, answers the audit's
// queries (History, ValuesAt, ValuesAtTime, Diff) and trims the log
// (TrimAudit). It is safe for concurrent use. Close it when done.
type Namespaces struct {
	cli            *clientv3.Client
	log            *slog.Logger
	requestTimeout time.Duration
	maxValueBytes  int
	// maxTxnOps is the store's limit on a transaction's operations (0:
	// not known yet: learnt at the first refusal).
	maxTxnOps atomic.Int64
	embedded  bool

	base   context.Context // cancelled by Close: ends every call
	cancel context.CancelFunc
	mu     sync.Mutex // guards closed and calls.Add
	closed bool
	calls  sync.WaitGroup
}

// NamespacesConfig configures NewNamespaces.
type NamespacesConfig struct {
	// Client reaches the store (required). Close does not close it. Its
	// user name (etcd's authentication) is the actor of a publish that
	// names none.
	Client *clientv3.Client
	// Logger receives what the write path logs (default: discard).
	Logger *slog.Logger
	// RequestTimeout bounds every request to etcd, on top of the
	// caller's context (default etcd.DefaultRequestTimeout).
	RequestTimeout time.Duration
	// MaxValueBytes bounds one key's value, in a publish and in the
	// content the queries read (default etcd.DefaultMaxValueBytes, the
	// etcd source's own default).
	MaxValueBytes int
	// MaxTxnOps is the store's limit on a transaction's operations
	// (etcd's --max-txn-ops: Store.MaxTxnOps): a publish past it is
	// refused with a *TxnLimitError before it is sent. 0: not known; the
	// first refusal probes it (ProbeMaxTxnOps).
	MaxTxnOps int
	// Embedded says the store is the server's embedded etcd (a refusal
	// then names no flag to raise).
	Embedded bool
}

// ErrClosed is returned by every method of closed Namespaces.
var ErrClosed = errors.New("store: namespaces closed")

// NewNamespaces returns the write path over cfg.Client.
func NewNamespaces(cfg NamespacesConfig) (*Namespaces, error) {
	if cfg.Client == nil {
		return nil, errors.New("store: namespaces need an etcd client")
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.RequestTimeout <= 0 {
		cfg.RequestTimeout = etcd.DefaultRequestTimeout
	}
	if cfg.MaxValueBytes <= 0 {
		cfg.MaxValueBytes = etcd.DefaultMaxValueBytes
	}
	n := &Namespaces{cli: cfg.Client, log: cfg.Logger, requestTimeout: cfg.RequestTimeout, maxValueBytes: cfg.MaxValueBytes, embedded: cfg.Embedded}
	n.maxTxnOps.Store(int64(max(0, cfg.MaxTxnOps)))
	n.base, n.cancel = context.WithCancel(context.Background())
	return n, nil
}

// Close ends the calls in flight, waits for them to return, and makes
// every later call return ErrClosed. It leaves the client open, and is
// safe to call more than once.
func (s *Namespaces) Close() error {
	s.mu.Lock()
	s.closed = true
	s.mu.Unlock()
	s.cancel()
	s.calls.Wait()
	return nil
}

// enter registers a call, so that Close waits for it; the caller calls
// s.calls.Done when it returns.
func (s *Namespaces) enter() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return ErrClosed
	}
	s.calls.Add(1)
	return nil
}

// requestCtx bounds one request by the request timeout and by Close.
func (s *Namespaces) requestCtx(ctx context.Context) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithTimeout(ctx, s.requestTimeout)
	stop := context.AfterFunc(s.base, cancel)
	return ctx, func() { stop(); cancel() }
}

// meta is the value of a namespace's meta key as a publish writes it:
// the chain the etcd source reads (etcd.Meta) and the audit of the
// change. Records written before the audit fields existed hold only the
// chain (Kind is empty); every field added since is optional, so older
// readers still decode newer records.
type meta struct {
	etcd.Meta
	Actor      string `json:"actor,omitempty"`
	OnBehalfOf string `json:"on_behalf_of,omitempty"`
	Reason     string `json:"reason,omitempty"`
	Kind       string `json:"kind,omitempty"`
	RollbackOf int64  `json:"rollback_of,omitempty"`
	Change     string `json:"change,omitempty"`
	// Puts and Deletes are the keys the change put and deleted, sorted:
	// known whenever Kind is set (omitted when empty).
	Puts    []string `json:"puts,omitempty"`
	Deletes []string `json:"deletes,omitempty"`
}

// content returns the keys and values of a range read of a namespace's
// prefix, its meta key left out, and the namespace's revision there: the
// highest ModRevision, the meta key's included (a publish of deletes
// alone moves it).
func content(prefix string, kvs []*mvccpb.KeyValue) (map[string]json.RawMessage, int64) {
	values := make(map[string]json.RawMessage, len(kvs))
	var rev int64
	for _, kv := range kvs {
		rev = max(rev, kv.ModRevision)
		if key := string(kv.Key); key != prefix {
			values[key[len(prefix):]] = kv.Value
		}
	}
	return values, rev
}

// visibleContent is the content of a namespace as its queries show it:
// without the keys reserved to holdfast, and without keys that
// transport.ValidateKey refuses (written past a publish), within the
// etcd source's bounds on a value and on a snapshot.
func (s *Namespaces) visibleContent(ns, prefix string, kvs []*mvccpb.KeyValue) (map[string]json.RawMessage, int64, error) {
	values, rev := content(prefix, kvs)
	total := 0
	for k, v := range values {
		if reserved(k) {
			delete(values, k)
			continue
		}
		if err := transport.ValidateKey(k); err != nil {
			s.log.Warn("store: skipping a key that is not a valid holdfast key", "ns", ns, "key", k, "err", err)
			delete(values, k)
			continue
		}
		if len(v) > s.maxValueBytes {
			return nil, 0, fmt.Errorf("%w: %q in namespace %q holds %d bytes (limit %d)", transport.ErrTooLarge, k, ns, len(v), s.maxValueBytes)
		}
		if total += len(v); total > etcd.DefaultMaxSnapshotBytes {
			return nil, 0, fmt.Errorf("%w: values of %q exceed %d bytes", transport.ErrTooLarge, ns, etcd.DefaultMaxSnapshotBytes)
		}
	}
	return values, rev, nil
}
