package listen

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"time"
)

// The defaults of Config (docs/SECURITY.md).
const (
	// DefaultMaxConns is the connection cap of a listener: above the
	// 10,000 clients a relay is sized for, below the 20,000 descriptors
	// a process has here (each loopback connection costs two).
	DefaultMaxConns = 15000
	// DefaultIdleTimeout closes a connection with nothing in flight: an
	// HTTP/1.1 connection between requests, an HTTP/2 one with no open
	// stream. An SDK client always holds its watch stream, so it never
	// idles.
	DefaultIdleTimeout = 2 * time.Minute
	// DefaultReadHeaderTimeout bounds a request's headers, and a TLS
	// handshake.
	DefaultReadHeaderTimeout = 10 * time.Second
	// DefaultMaxHeaderBytes bounds a request's headers (HTTP/1.1 and
	// HTTP/2, CONTINUATION frames included): room for a stream of
	// transport.MaxStreamNamespaces namespaces of the longest names in its
	// URL.
	DefaultMaxHeaderBytes = 256 << 10
	// DefaultMaxConcurrentStreams bounds the streams of one HTTP/2
	// connection.
	DefaultMaxConcurrentStreams = 250
	// DefaultMaxReadFrameSize bounds an HTTP/2 frame a client sends.
	DefaultMaxReadFrameSize = 64 << 10
	// DefaultWriteByteTimeout closes an HTTP/2 connection that accepts no
	// byte for that long while the server has some to write (a client
	// that stopped reading its socket).
	DefaultWriteByteTimeout = 30 * time.Second
)

// Config is one listener's.
type Config struct {
	// Name names the listener in logs ("data", "admin").
	Name string
	// Addr is the HOST:PORT to listen on.
	Addr string
	// TLS serves TLS with HTTP/2 through ALPN; nil: plaintext, HTTP/1.1
	// and h2c.
	TLS *TLS
	// Plaintext allows a listener without TLS on an address other than
	// loopback.
	Plaintext bool
	// TrustedProxies are the peers whose plaintext requests may carry a
	// token: TLS-terminating balancers.
	TrustedProxies []netip.Prefix
	// MaxConns caps the open connections (0: DefaultMaxConns; negative:
	// no cap).
	MaxConns int
	// IdleTimeout (0: DefaultIdleTimeout) and ReadHeaderTimeout (0:
	// DefaultReadHeaderTimeout).
	IdleTimeout       time.Duration
	ReadHeaderTimeout time.Duration
	// BodyGrace (0: DefaultBodyGrace), MinBodyRate in bytes a second (0:
	// DefaultMinBodyRate) and BodyTimeout (0: DefaultBodyTimeout) bound a
	// request body: it is cut at BodyGrace + bytes read / MinBodyRate from
	// its start, and at BodyTimeout at the latest. At the connection cap,
	// a connection whose body has been below MinBodyRate for half a second is
	// closed to admit a new one.
	BodyGrace   time.Duration
	MinBodyRate int64
	BodyTimeout time.Duration
	// Logger (nil: discard).
	Logger *slog.Logger
	// ConnState and BaseContext are http.Server's.
	ConnState   func(net.Conn, http.ConnState)
	BaseContext func(net.Listener) context.Context
}

func (c *Config) logger() *slog.Logger {
	if c.Logger == nil {
		return slog.New(slog.DiscardHandler)
	}
	return c.Logger
}

func (c *Config) name() string {
	if c.Name == "" {
		return "listener"
	}
	return c.Name
}

// ErrPlaintext is returned by Listen for a listener without TLS on an
// address other than loopback, without Config.Plaintext.
var ErrPlaintext = errors.New("listen: plaintext on an address other than loopback needs TLS (-tls-cert, -tls-key) or -plaintext")

// Server is an http.Server that serves TLS when its Config has it.
type Server struct {
	*http.Server
	tls bool
}

// Serve serves l: over TLS when the Config had it (l is a plain TCP
// listener, as Listen returns), else plaintext.
func (s *Server) Serve(l net.Listener) error {
	if s.tls {
		return s.Server.ServeTLS(l, "", "")
	}
	return s.Server.Serve(l)
}

// NewServer returns the server of a listener of c, serving h behind
// Guard, its request bodies bounded by c's BodyGrace, MinBodyRate and
// BodyTimeout.
func NewServer(h http.Handler, c Config) *Server {
	var protos http.Protocols
	protos.SetHTTP1(true)
	if c.TLS != nil {
		protos.SetHTTP2(true)
	} else {
		protos.SetUnencryptedHTTP2(true)
	}
	idle := c.IdleTimeout
	if idle == 0 {
		idle = DefaultIdleTimeout
	}
	rht := c.ReadHeaderTimeout
	if rht == 0 {
		rht = DefaultReadHeaderTimeout
	}
	srv := &http.Server{
		Handler:           c.bodyBounds().bound(Guard(h, c.TrustedProxies)),
		Protocols:         &protos,
		ReadHeaderTimeout: rht,
		IdleTimeout:       idle,
		MaxHeaderBytes:    DefaultMaxHeaderBytes,
		HTTP2: &http.HTTP2Config{
			MaxConcurrentStreams:      DefaultMaxConcurrentStreams,
			MaxReadFrameSize:          DefaultMaxReadFrameSize,
			MaxDecoderHeaderTableSize: 4096,
			// The encoder's table (response headers) held up to 4 KiB a
			// connection for headers a long-lived stream sends once:
			// 3 KiB a client of a relay at 4,000 TLS clients
			// (docs/PERFORMANCE.md, "Over TLS").
			MaxEncoderHeaderTableSize: 256,
			WriteByteTimeout:          DefaultWriteByteTimeout,
		},
		ErrorLog:    slog.NewLogLogger(c.logger().Handler(), slog.LevelDebug),
		ConnState:   bodyState(c.ConnState),
		BaseContext: c.BaseContext,
		ConnContext: connContext,
	}
	if c.TLS != nil {
		srv.TLSConfig = c.TLS.ServerConfig()
	}
	return &Server{Server: srv, tls: c.TLS != nil}
}

// Listen listens on c.Addr, capped at c.MaxConns connections, each
// connection's send buffer growing as its peer reads. Without
// TLS on an address other than loopback it needs c.Plaintext (else
// ErrPlaintext), and then logs a warning.
func Listen(c Config) (net.Listener, error) {
	if c.TLS == nil && !IsLoopbackAddr(c.Addr) {
		if !c.Plaintext {
			return nil, fmt.Errorf("%s %s: %w", c.name(), c.Addr, ErrPlaintext)
		}
		c.logger().Warn("PLAINTEXT on an address other than loopback: everything this listener serves travels in clear text, and tokens from peers other than loopback and -trusted-proxy are refused",
			"listener", c.name(), "addr", c.Addr)
	}
	l, err := net.Listen("tcp", c.Addr)
	if err != nil {
		return nil, err
	}
	n := c.MaxConns
	if n == 0 {
		n = DefaultMaxConns
	}
	if n < 0 {
		return pacedListener{l}, nil
	}
	lim := Limit(l, n, c.TLS == nil, c.logger().With("listener", c.name()))
	lim.reclaim = c.bodyBounds().rate
	return lim, nil
}

// IsLoopbackAddr reports whether HOST:PORT names only loopback: a
// loopback IP, or "localhost". An empty host, or 0.0.0.0, listens on
// every interface: not loopback.
func IsLoopbackAddr(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if strings.EqualFold(host, "localhost") {
		return true
	}
	a, err := netip.ParseAddr(host)
	return err == nil && a.Unmap().IsLoopback()
}

// ParseCIDRs parses comma-separated CIDRs (a bare IP is its own /32 or
// /128), for -trusted-proxy.
func ParseCIDRs(s string) ([]netip.Prefix, error) {
	var out []netip.Prefix
	for item := range strings.SplitSeq(s, ",") {
		item = strings.TrimSpace(item)
		if item == "" {
			continue
		}
		if !strings.Contains(item, "/") {
			a, err := netip.ParseAddr(item)
			if err != nil {
				return nil, err
			}
			out = append(out, netip.PrefixFrom(a.Unmap(), a.Unmap().BitLen()))
			continue
		}
		p, err := netip.ParsePrefix(item)
		if err != nil {
			return nil, err
		}
		out = append(out, p.Masked())
	}
	return out, nil
}
