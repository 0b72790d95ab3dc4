package store

import (
	"context"
	"log/slog"

	"go.uber.org/zap/zapcore"
)

// slogCore is a zapcore.Core that writes to a slog.Logger: the embedded
// etcd logs through zap, the server through slog. etcd's Info is chatty
// (every raft step at start), so it goes to slog's Debug; Warn and above
// keep their level.
type slogCore struct {
	log    *slog.Logger
	fields []zapcore.Field
}

func newSlogCore(log *slog.Logger) zapcore.Core { return &slogCore{log: log} }

func level(l zapcore.Level) slog.Level {
	switch {
	case l >= zapcore.ErrorLevel:
		return slog.LevelError
	case l == zapcore.WarnLevel:
		return slog.LevelWarn
	default:
		return slog.LevelDebug
	}
}

func (c *slogCore) Enabled(l zapcore.Level) bool {
	return c.log.Enabled(context.Background(), level(l))
}

func (c *slogCore) With(fields []zapcore.Field) zapcore.Core {
	return &slogCore{log: c.log, fields: append(c.fields[:len(c.fields):len(c.fields)], fields...)}
}

func (c *slogCore) Check(e zapcore.Entry, ce *zapcore.CheckedEntry) *zapcore.CheckedEntry {
	if c.Enabled(e.Level) {
		return ce.AddCore(e, c)
	}
	return ce
}

func (c *slogCore) Write(e zapcore.Entry, fields []zapcore.Field) error {
	enc := zapcore.NewMapObjectEncoder()
	for _, f := range c.fields {
		f.AddTo(enc)
	}
	for _, f := range fields {
		f.AddTo(enc)
	}
	attrs := make([]slog.Attr, 0, len(enc.Fields))
	for k, v := range enc.Fields {
		attrs = append(attrs, slog.Any(k, v))
	}
	c.log.LogAttrs(context.Background(), level(e.Level), e.Message, attrs...)
	return nil
}

func (c *slogCore) Sync() error { return nil }
