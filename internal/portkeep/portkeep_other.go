//go:build !linux

package portkeep

import (
	"fmt"
	"net"
)

// Keep keeps nothing here (doc.go).
func Keep(net.Addr) (release func()) { return func() {} }

// Loopback returns a port of 127.0.0.1 free a moment ago (doc.go).
func Loopback() (port int, release func(), err error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, nil, fmt.Errorf("portkeep: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, func() {}, nil
}
