package fakeserver

import (
	"net"
	"syscall"
)

// reservePort binds a TCP socket to addr's port without listening on it
// and returns its release (nil when it cannot). On Linux a listen on
// port 0 and an outgoing connection's choice of port pass over a port
// bound so; an explicit listen on it (with SO_REUSEADDR, as Go's) still
// succeeds, so Restart need not let it go first. SO_REUSEADDR here: the
// server's closed connections in TIME_WAIT would refuse the bind.
func reservePort(addr net.Addr) func() {
	ta, ok := addr.(*net.TCPAddr)
	if !ok {
		return nil
	}
	var (
		sa     syscall.Sockaddr
		family int
	)
	if ip4 := ta.IP.To4(); ip4 != nil {
		family, sa = syscall.AF_INET, &syscall.SockaddrInet4{Port: ta.Port, Addr: [4]byte(ip4)}
	} else {
		family, sa = syscall.AF_INET6, &syscall.SockaddrInet6{Port: ta.Port, Addr: [16]byte(ta.IP.To16())}
	}
	fd, err := syscall.Socket(family, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil
	}
	if syscall.SetsockoptInt(fd, syscall.SOL_SOCKET, syscall.SO_REUSEADDR, 1) != nil || syscall.Bind(fd, sa) != nil {
		_ = syscall.Close(fd)
		return nil
	}
	return func() { _ = syscall.Close(fd) }
}
