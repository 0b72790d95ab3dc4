package store

import (
	"context"
	"log/slog"
	"strings"
	"sync/atomic"

	"go.uber.org/zap/zapcore"
)

// slogCore is a zapcore.Core that writes to a slog.Logger: the embedded
// etcd logs through zap, the server through slog. etcd's Info is chatty
// (every raft step at start), so it goes to slog's Debug; Warn and above
// keep their level, except the embedded member's known messages that are
// no operator's concern (see demoted), which go to Debug too.
type slogCore struct {
	log     *slog.Logger
	fields  []zapcore.Field
	closing *atomic.Bool // set when the store stops its member
}

func newSlogCore(log *slog.Logger, closing *atomic.Bool) zapcore.Core {
	return &slogCore{log: log, closing: closing}
}

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

// startNotices are the WARNs every start of the embedded member logs,
// true of its setup and nothing an operator can change: its client and
// peer listeners are one loopback port each (it serves only this
// process), and its authentication is off (the server's tokens guard the
// data, and etcd's simple tokens are never issued).
var startNotices = map[string]bool{
	"Running http and grpc server on single port. This is not recommended for production.": true,
	"simple token is not cryptographically signed":                                         true,
}

// stopNotices are the messages of the embedded member's listeners ending
// as it stops: logged as ERROR or WARN by etcd, with an error saying the
// listener closed.
var stopNotices = map[string]bool{
	"setting up serving from embedded etcd failed.": true,
	"stopping insecure grpc server due to error":    true,
	"stopped insecure grpc server due to error":     true,
}

// closedErrors are the errors of a listener that closed.
var closedErrors = []string{"use of closed network connection", "server closed", "Server closed"}

// demoted reports whether the entry is one of the embedded member's known
// messages that are no operator's concern: a start notice, or a stop
// notice while the store closes with a listener's closed error.
func (c *slogCore) demoted(e zapcore.Entry, fields []zapcore.Field) bool {
	if e.Level < zapcore.WarnLevel {
		return false
	}
	if startNotices[e.Message] {
		return true
	}
	if !stopNotices[e.Message] || c.closing == nil || !c.closing.Load() {
		return false
	}
	for _, f := range fields {
		err, ok := f.Interface.(error)
		if f.Type != zapcore.ErrorType || !ok {
			continue
		}
		for _, s := range closedErrors {
			if strings.Contains(err.Error(), s) {
				return true
			}
		}
	}
	return false
}

func (c *slogCore) Enabled(l zapcore.Level) bool {
	return c.log.Enabled(context.Background(), level(l))
}

func (c *slogCore) With(fields []zapcore.Field) zapcore.Core {
	return &slogCore{log: c.log, fields: append(c.fields[:len(c.fields):len(c.fields)], fields...), closing: c.closing}
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
	l := level(e.Level)
	if c.demoted(e, fields) {
		l = slog.LevelDebug
	}
	if !c.log.Enabled(context.Background(), l) {
		return nil
	}
	c.log.LogAttrs(context.Background(), l, e.Message, attrs...)
	return nil
}

func (c *slogCore) Sync() error { return nil }
