package control

import (
	"context"
	"errors"
	"fmt"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/holdfast-dev/holdfast/internal/presence"
	"github.com/holdfast-dev/holdfast/server/store"
	"github.com/holdfast-dev/holdfast/telemetry"
)

// MeterScope is the instrumentation scope of the server's instruments.
const MeterScope = "github.com/holdfast-dev/holdfast/server"

// The kinds of a commit (the "kind" attribute of
// holdfast.server.publish.duration).
const (
	kindPublish  = "publish"
	kindRollback = "rollback"
	kindRollout  = "rollout" // a rollout's stage, promotion or revert
)

// commitBuckets are the bounds of the publish commit latency, in seconds.
var commitBuckets = []float64{0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30}

// controlMetrics are the control plane's instruments; the zero value
// records nothing.
type controlMetrics struct {
	commit metric.Float64Histogram
	reg    metric.Registration
}

// committed records a commit of kind that started at started and ended
// with err.
func (m *controlMetrics) committed(ctx context.Context, kind string, started time.Time, err error) {
	if m.commit == nil {
		return
	}
	result := "ok"
	if err != nil {
		result = "error"
	}
	m.commit.Record(ctx, time.Since(started).Seconds(), metric.WithAttributes(attribute.String("kind", kind), attribute.String("result", result)))
}

func (m *controlMetrics) close() {
	if m.reg != nil {
		_ = m.reg.Unregister()
	}
}

// newControlMetrics registers the control plane's instruments with mp:
//
//	holdfast.server.publish.duration     histogram (s) of commits, by kind and result
//	holdfast.server.propagation.duration histogram (s) until a share of the clients acked a publish
//	holdfast.server.clients              clients connected to this server or a relay behind it, by state (live, stale)
//	holdfast.server.rollouts.running     rollouts running in the store
//	holdfast.server.rollout.stage        the stage (1 first) of each running rollout, by namespace
//	holdfast.server.audit.records        audit records in the store
func newControlMetrics(h *Handler, mp metric.MeterProvider) (controlMetrics, error) {
	meter := mp.Meter(MeterScope)
	commit, err1 := meter.Float64Histogram("holdfast.server.publish.duration", metric.WithUnit("s"),
		metric.WithDescription("How long a publish, rollback or rollout step took to commit in the store, by kind and result."),
		metric.WithExplicitBucketBoundaries(commitBuckets...))
	prop, err2 := meter.Float64Histogram("holdfast.server.propagation.duration", metric.WithUnit("s"),
		metric.WithDescription("How long after a publish this server committed the given share (0.5, 0.95, 1) of the namespace's clients known at the publish acked it."),
		metric.WithExplicitBucketBoundaries(propagationBuckets...))
	clients, err3 := meter.Int64ObservableGauge("holdfast.server.clients", metric.WithUnit("{client}"),
		metric.WithDescription("Clients connected to this server, directly or through relays, by state: live, or stale (unconfirmed, or disconnected under 5 s ago)."))
	running, err4 := meter.Int64ObservableGauge("holdfast.server.rollouts.running", metric.WithUnit("{rollout}"),
		metric.WithDescription("Rollouts running in the store."))
	stage, err5 := meter.Int64ObservableGauge("holdfast.server.rollout.stage",
		metric.WithDescription("The stage (1 first) of the rollout running on the namespace."))
	audit, err6 := meter.Int64ObservableGauge("holdfast.server.audit.records", metric.WithUnit("{record}"),
		metric.WithDescription("Audit records in the store, every namespace's."))
	if err := errors.Join(err1, err2, err3, err4, err5, err6); err != nil {
		return controlMetrics{}, fmt.Errorf("control: metrics: %w", err)
	}
	reg, err := meter.RegisterCallback(func(ctx context.Context, o metric.Observer) error {
		var live, stale int64
		now := time.Now()
		for _, e := range h.cfg.Presence.Entries() {
			switch e.Shown(now) {
			case presence.Live:
				live++
			case presence.Stale:
				stale++
			}
		}
		o.ObserveInt64(clients, live, metric.WithAttributes(attribute.String("state", string(presence.Live))))
		o.ObserveInt64(clients, stale, metric.WithAttributes(attribute.String("state", string(presence.Stale))))
		h.cfg.Acks.prop.expire(time.Now())
		ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		n := 0
		for _, ns := range h.active.namespaces() {
			st, err := rolloutStore{h}.Current(ctx, ns)
			if err != nil || st == nil {
				continue
			}
			n++
			o.ObserveInt64(stage, int64(st.Stage+1), metric.WithAttributes(telemetry.AttrNamespace.String(ns)))
		}
		o.ObserveInt64(running, int64(n))
		if resp, err := h.cli.Get(ctx, store.AuditRoot, clientv3.WithPrefix(), clientv3.WithCountOnly()); err == nil {
			o.ObserveInt64(audit, resp.Count)
		}
		return nil
	}, clients, running, stage, audit)
	if err != nil {
		return controlMetrics{}, fmt.Errorf("control: metrics: %w", err)
	}
	h.cfg.Acks.prop.measure(prop)
	return controlMetrics{commit: commit, reg: reg}, nil
}
