//go:build darwin || dragonfly || freebsd || linux || netbsd || openbsd

package cache

import "syscall"

func mkfifo(path string) error { return syscall.Mkfifo(path, 0o600) }
