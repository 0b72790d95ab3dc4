package main

import (
	"context"
	"fmt"

	"go.opentelemetry.io/otel/metric"

	holdfast "github.com/holdfast-dev/holdfast/server"
)

// changeMetrics registers holdfast_changes_overdue_review, read at each
// scrape from the store: the emergency publishes whose retro review is
// past its window without a second person's approval (the alert
// HoldfastChangeReviewOverdue of telemetry/alerts/holdfast-changes.rules.yml).
func changeMetrics(meter metric.Meter, srv *holdfast.Server) error {
	overdue, err := meter.Int64ObservableGauge("holdfast.changes.overdue_review", metric.WithUnit("{change}"),
		metric.WithDescription("Emergency publishes whose retro review is overdue."))
	if err != nil {
		return fmt.Errorf("metrics: %w", err)
	}
	_, err = meter.RegisterCallback(func(ctx context.Context, o metric.Observer) error {
		if n, err := srv.OverdueReviews(ctx); err == nil {
			o.ObserveInt64(overdue, int64(n))
		}
		return nil
	}, overdue)
	if err != nil {
		return fmt.Errorf("metrics: %w", err)
	}
	return nil
}
