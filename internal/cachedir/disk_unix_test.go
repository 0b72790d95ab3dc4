//go:build darwin || dragonfly || freebsd || linux || netbsd || openbsd

package cachedir

import "syscall"

func mkfifo(path string) error { return syscall.Mkfifo(path, 0o600) }
