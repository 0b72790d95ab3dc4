package portkeep

import (
	"fmt"
	"net"
	"sync"
	"syscall"
)

// Keep binds a socket to addr's port without listening and returns its
// release; it keeps nothing (a release that does nothing) when addr is
// not TCP or the bind fails.
func Keep(addr net.Addr) (release func()) {
	ta, ok := addr.(*net.TCPAddr)
	if !ok {
		return func() {}
	}
	fd, err := bound(ta)
	if err != nil {
		return func() {}
	}
	return closer(fd)
}

// Loopback keeps a free port of 127.0.0.1, chosen by the kernel as for a
// listen on port 0, until release.
func Loopback() (port int, release func(), err error) {
	fd, err := bound(&net.TCPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		return 0, nil, fmt.Errorf("portkeep: %w", err)
	}
	sa, err := syscall.Getsockname(fd)
	if err != nil {
		_ = syscall.Close(fd)
		return 0, nil, fmt.Errorf("portkeep: %w", err)
	}
	return sa.(*syscall.SockaddrInet4).Port, closer(fd), nil
}

// bound returns a TCP socket bound to a, not listening. SO_REUSEADDR:
// the server's closed connections in TIME_WAIT on the port would refuse
// the bind, and with it a server's own listen on the port is not refused.
func bound(a *net.TCPAddr) (int, error) {
	var (
		sa     syscall.Sockaddr
		family int
	)
	if ip4 := a.IP.To4(); ip4 != nil {
		family, sa = syscall.AF_INET, &syscall.SockaddrInet4{Port: a.Port, Addr: [4]byte(ip4)}
	} else {
		family, sa = syscall.AF_INET6, &syscall.SockaddrInet6{Port: a.Port, Addr: [16]byte(a.IP.To16())}
	}
	fd, err := syscall.Socket(family, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		return -1, err
	}
	if err := syscall.SetsockoptInt(fd, syscall.SOL_SOCKET, syscall.SO_REUSEADDR, 1); err != nil {
		_ = syscall.Close(fd)
		return -1, err
	}
	if err := syscall.Bind(fd, sa); err != nil {
		_ = syscall.Close(fd)
		return -1, err
	}
	return fd, nil
}

func closer(fd int) func() {
	var once sync.Once
	return func() { once.Do(func() { _ = syscall.Close(fd) }) }
}
