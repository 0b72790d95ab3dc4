package store

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/holdfast-dev/holdfast/transport"
)

// Bounds of the embedded member's requests. A publish is one transaction
// of an operation per key put or deleted, plus its meta key, its audit
// record and its index entry (PublishOverheadOps); etcd's defaults (128
// operations, 1.5 MiB) would hold about 125 keys. The embedded member
// takes EmbeddedMaxTxnOps operations and EmbeddedMaxRequestBytes: a
// publish within the control API's byte limit (640 KiB by default, its
// values stored twice, with the audit record, and its keys four times)
// fits, of up to EmbeddedMaxTxnOps-PublishOverheadOps keys.
const (
	EmbeddedMaxTxnOps       = 16384
	EmbeddedMaxRequestBytes = 8 << 20
	// etcdDefaultMaxTxnOps is etcd's default --max-txn-ops.
	etcdDefaultMaxTxnOps = 128
	// PublishOverheadOps are the operations of a publish beside its keys.
	PublishOverheadOps = 3
	// maxSendBytes bounds what the client sends in one request (gRPC's
	// default, 2 MiB, is below the embedded member's limit): the
	// members' own limit (--max-request-bytes) is the one that counts.
	maxSendBytes = 64 << 20
)

// TxnLimitError is a publish of more keys than the store takes in one
// transaction (etcd's --max-txn-ops): nothing was written. It is a
// transport.ErrTooLarge.
type TxnLimitError struct {
	Namespace string
	// Keys are the keys the publish puts and deletes; Ops its
	// transaction's operations.
	Keys, Ops int
	// MaxOps is the store's limit (0: not known: etcd refused it).
	MaxOps int
	// MaxKeys is how many keys a publish of the namespace may change at
	// most, beside its other operations.
	MaxKeys int
	// Embedded says the store is the server's embedded etcd, whose limit
	// is EmbeddedMaxTxnOps, no flag's.
	Embedded bool
}

func (e *TxnLimitError) Error() string {
	if e.Embedded {
		return fmt.Sprintf("publish to %q: %d keys are more than the store takes in one transaction (the embedded store takes %d operations, which leaves %d keys a publish); publish the change in parts of at most %d keys", e.Namespace, e.Keys, e.MaxOps, e.MaxKeys, e.MaxKeys)
	}
	if e.MaxOps == 0 {
		return fmt.Sprintf("publish to %q: %d keys are more than the store takes in one transaction (etcd refused its %d operations: its --max-txn-ops is lower); publish the change in smaller parts, or raise --max-txn-ops on every etcd member", e.Namespace, e.Keys, e.Ops)
	}
	return fmt.Sprintf("publish to %q: %d keys are more than the store takes in one transaction (etcd's --max-txn-ops is %d operations, which leaves %d keys a publish); publish the change in parts of at most %d keys, or raise --max-txn-ops on every etcd member", e.Namespace, e.Keys, e.MaxOps, e.MaxKeys, e.MaxKeys)
}

func (e *TxnLimitError) Unwrap() error { return transport.ErrTooLarge }

// RequestTooLargeError is a publish whose transaction is larger than the
// store takes in one request (etcd's --max-request-bytes): nothing was
// written. It is a transport.ErrTooLarge.
type RequestTooLargeError struct {
	Namespace string
	Keys      int
	Err       error
}

func (e *RequestTooLargeError) Error() string {
	return fmt.Sprintf("publish to %q: the change of %d keys is larger than the store takes in one request (etcd's --max-request-bytes; the values count twice, with their audit record); publish it in smaller parts, or raise --max-request-bytes on every etcd member: %v", e.Namespace, e.Keys, e.Err)
}

func (e *RequestTooLargeError) Unwrap() []error { return []error{transport.ErrTooLarge, e.Err} }

// requestTooLarge reports whether err is etcd's refusal of a request for
// its size: etcd's own (past --max-request-bytes), or gRPC's (past that
// and its overhead, on either side), not an overloaded member's.
func requestTooLarge(err error) bool {
	if errors.Is(err, rpctypes.ErrRequestTooLarge) {
		return true
	}
	st, ok := status.FromError(err)
	return ok && st.Code() == codes.ResourceExhausted && strings.Contains(st.Message(), "larger than max")
}

// probeKey is the key the probe of the operation limit reads (and never
// writes): under "/holdfast", which a user of the store may read.
const probeKey = "/holdfast-meta/txn-probe"

// probeCap bounds the probe: a cluster that takes this many operations
// in a transaction is said to take this many (as many as the embedded
// store's; a publish within the control API's byte limit rarely has more
// keys, and one that has is refused by etcd, then probed again).
const probeCap = EmbeddedMaxTxnOps

// ProbeMaxTxnOps finds how many operations the cluster of cli takes in
// one transaction (etcd's --max-txn-ops, which etcd does not expose):
// transactions of n reads of one key behind a comparison that never
// holds, which etcd refuses for their size before looking at anything
// else, and which read and write nothing. etcd's default (128), the most
// common, takes two of them to tell; another limit a search of up to 20.
// A cluster that takes probeCap is said to take probeCap.
func ProbeMaxTxnOps(ctx context.Context, cli *clientv3.Client) (int, error) {
	takes := func(n int) (bool, error) {
		ops := make([]clientv3.Op, n)
		for i := range ops {
			ops[i] = clientv3.OpGet(probeKey, clientv3.WithKeysOnly())
		}
		_, err := cli.Txn(ctx).If(clientv3.Compare(clientv3.Version(probeKey), "<", 0)).Then(ops...).Commit()
		switch {
		case err == nil:
			return true, nil
		case errors.Is(err, rpctypes.ErrTooManyOps):
			return false, nil
		}
		return false, fmt.Errorf("store: probing etcd's --max-txn-ops: %w", err)
	}
	return searchMaxTxnOps(takes)
}

// searchMaxTxnOps finds the largest n that takes accepts, up to probeCap.
func searchMaxTxnOps(takes func(n int) (bool, error)) (int, error) {
	// etcd's default first: most clusters keep it, and two small
	// transactions tell.
	ok, err := takes(etcdDefaultMaxTxnOps + 1)
	if err != nil {
		return 0, err
	}
	lo, hi := etcdDefaultMaxTxnOps+1, 2*etcdDefaultMaxTxnOps // lo taken, hi to try
	if !ok {
		if ok, err = takes(etcdDefaultMaxTxnOps); err != nil {
			return 0, err
		}
		if ok {
			return etcdDefaultMaxTxnOps, nil
		}
		lo, hi = 0, etcdDefaultMaxTxnOps // below the default
	}
	for ok {
		if ok, err = takes(hi); err != nil {
			return 0, err
		}
		if ok {
			if lo = hi; hi == probeCap {
				return probeCap, nil
			}
			hi = min(2*hi, probeCap)
		}
	}
	for hi-lo > 1 { // lo taken, hi refused
		mid := lo + (hi-lo)/2
		ok, err := takes(mid)
		if err != nil {
			return 0, err
		}
		if ok {
			lo = mid
		} else {
			hi = mid
		}
	}
	return lo, nil
}
