package store

import (
	"context"
	"fmt"
	"strings"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"google.golang.org/grpc"
	"google.golang.org/grpc/status"
)

// storeBuckets are the bounds of the store's request latency, in
// seconds: etcd's own request buckets and more above.
var storeBuckets = []float64{0.0005, 0.001, 0.002, 0.004, 0.008, 0.016, 0.032, 0.064, 0.128, 0.256, 0.512, 1.024, 2.048, 5, 10, 30}

// requestMetrics returns a gRPC interceptor that measures the etcd
// client's unary requests into holdfast.server.store.request.duration
// (seconds), by method (etcd's: Range, Txn, Put, LeaseGrant, …) and code
// (gRPC's: OK, Unavailable, DeadlineExceeded, …): the store's latency
// and errors as the server sees them.
func requestMetrics(mp metric.MeterProvider, scope string) (grpc.DialOption, error) {
	hist, err := mp.Meter(scope).Float64Histogram("holdfast.server.store.request.duration", metric.WithUnit("s"),
		metric.WithDescription("How long the store (etcd) took to answer the server's requests, by method and gRPC code."),
		metric.WithExplicitBucketBoundaries(storeBuckets...))
	if err != nil {
		return nil, fmt.Errorf("store: metrics: %w", err)
	}
	return grpc.WithChainUnaryInterceptor(func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		started := time.Now()
		err := invoker(ctx, method, req, reply, cc, opts...)
		if i := strings.LastIndexByte(method, '/'); i >= 0 {
			method = method[i+1:]
		}
		hist.Record(ctx, time.Since(started).Seconds(), metric.WithAttributes(
			attribute.String("method", method), attribute.String("code", status.Code(err).String())))
		return err
	}), nil
}
