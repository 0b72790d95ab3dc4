package fakeserver

import (
	"errors"
	"net"
	"syscall"
	"testing"
)

// bindPort binds a socket to addr's port as a program with no
// SO_REUSEADDR would, and lets it go.
func bindPort(t *testing.T, addr string) error {
	t.Helper()
	ta, err := net.ResolveTCPAddr("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer syscall.Close(fd)
	return syscall.Bind(fd, &syscall.SockaddrInet4{Port: ta.Port, Addr: [4]byte(ta.IP.To4())})
}

// TestStoppedServerKeepsItsPort: while stopped, the server's port is
// bound without a listener: a dial is refused, as after a crash, and
// nobody else can bind it (the kernel's choice of a free port passes
// over it), so Restart listens on it again. Close lets it go.
func TestStoppedServerKeepsItsPort(t *testing.T) {
	s := start(t)
	addr := s.Addr()
	if err := s.Stop(); err != nil {
		t.Fatal(err)
	}
	if _, err := net.Dial("tcp", addr); !errors.Is(err, syscall.ECONNREFUSED) {
		t.Fatalf("a dial of the stopped server: %v, want connection refused", err)
	}
	if err := bindPort(t, addr); !errors.Is(err, syscall.EADDRINUSE) {
		t.Fatalf("a bind of the stopped server's port: %v, want address in use", err)
	}
	if err := s.Restart(); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Publish("app", map[string]any{"a": 1}); err != nil {
		t.Fatal(err)
	}
	resp, err := newClient(t).Get(s.URL() + "/sdk/snapshot?ns=app")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("a snapshot after the restart: %s", resp.Status)
	}

	// Close lets the port go (a server no client ever reached: no
	// connection of its lingers in TIME_WAIT on the port).
	s2 := start(t)
	addr2 := s2.Addr()
	if err := s2.Stop(); err != nil {
		t.Fatal(err)
	}
	if err := s2.Close(); err != nil {
		t.Fatal(err)
	}
	if err := bindPort(t, addr2); err != nil {
		t.Fatalf("a bind of a closed server's port: %v", err)
	}
}
