//go:build !linux

package fakeserver

import "net"

// reservePort reserves nothing here: whether a port bound without a
// listener is passed over by others' listens is Linux's behaviour
// (port_linux.go).
func reservePort(net.Addr) func() { return nil }
