package relay

import (
	"context"
	"errors"
	"net"
	"net/http"
	"time"

	"github.com/holdfast-dev/holdfast/transport"
)

// Relay follows an upstream and serves its data plane. Create one with
// New; it is safe for concurrent use.
type Relay struct{}

// NamespaceStatus is what a relay knows of one namespace it follows.
type NamespaceStatus struct {
	Namespace string
	StoreID   string
	Revision  int64
	Cursor    int64
	// Age is how long ago the upstream last confirmed the data (zero
	// when it confirms it right now); Unconfirmed says it is not
	// confirming it now.
	Age         time.Duration
	Unconfirmed bool
	// Streams counts the downstream watch streams carrying it.
	Streams   int
	LastError string
}

// ErrClosed is returned by Serve once the relay is closed.
var ErrClosed = errors.New("relay: closed")

// New returns a relay following upstream. When upstream is a
// transport.StreamSource its one multi-namespace stream carries every
// namespace; acks go upstream when it is a transport.Acker. It loads the
// cache directory (WithCacheDir) before it dials.
func New(upstream transport.Source, opts ...Option) (*Relay, error) {
	return nil, errors.New("relay: not implemented yet")
}

// Handler returns the relay's data plane (/sdk/...): snapshot, long-poll,
// SSE watch and stream, ack.
func (r *Relay) Handler() http.Handler { return http.NotFoundHandler() }

// Serve serves the data plane on l (HTTP/1.1 and h2c) until ctx ends or
// the relay is closed; then it drains the streams and returns.
func (r *Relay) Serve(ctx context.Context, l net.Listener) error { return ErrClosed }

// Ready returns nil once the relay serves data: every namespace of
// WithNamespaces has data (from upstream or its cache), or, without any,
// once it has heard from its upstream.
func (r *Relay) Ready() error { return errors.New("relay: not ready") }

// Namespaces returns the status of every namespace followed, by name.
func (r *Relay) Namespaces() []NamespaceStatus { return nil }

// Close stops following, ends every downstream stream, flushes the cache
// and waits for every goroutine the relay started. It is idempotent.
func (r *Relay) Close() error { return nil }
