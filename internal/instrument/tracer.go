package instrument

import (
	"context"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/holdfast-dev/holdfast/telemetry"
)

// Tracer starts holdfast's spans. A nil *Tracer starts none.
type Tracer struct {
	t trace.Tracer
}

// NewTracer returns a Tracer from tp; a nil tp means otel.GetTracerProvider().
func NewTracer(tp trace.TracerProvider) *Tracer {
	if tp == nil {
		tp = otel.GetTracerProvider()
	}
	return &Tracer{t: tp.Tracer(telemetry.ScopeName)}
}

// Start starts span name for namespace ns, a child of ctx's span, and
// returns the context that carries it and the function that ends it: a
// non-nil error marks the span failed and is recorded on it. End it once.
func (t *Tracer) Start(ctx context.Context, name, ns string) (context.Context, func(error)) {
	if t == nil {
		return ctx, endNothing
	}
	ctx, span := t.t.Start(ctx, name, trace.WithAttributes(telemetry.AttrNamespace.String(ns)))
	if !span.IsRecording() {
		return ctx, endNothing
	}
	return ctx, func(err error) {
		if err != nil {
			span.RecordError(err)
			span.SetStatus(codes.Error, err.Error())
		}
		span.End()
	}
}

func endNothing(error) {}
