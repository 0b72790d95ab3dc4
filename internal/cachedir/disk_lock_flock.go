//go:build darwin || dragonfly || freebsd || illumos || linux || netbsd || openbsd

package cachedir

import (
	"errors"
	"os"
	"syscall"
)

// haveFlock reports that tryLock locks across processes here.
const haveFlock = true

// tryLock takes an exclusive flock(2) on f without waiting. It reports false
// when another open file holds it (another process, or another Dir of this
// one: flock locks belong to the open file, not the process, unlike fcntl
// locks), and errNoLocking when the file system cannot lock.
func tryLock(f *os.File) (bool, error) {
	rc, err := f.SyscallConn()
	if err != nil {
		return false, err
	}
	var ferr error
	if err := rc.Control(func(fd uintptr) {
		for {
			ferr = syscall.Flock(int(fd), syscall.LOCK_EX|syscall.LOCK_NB)
			if ferr != syscall.EINTR {
				return
			}
		}
	}); err != nil {
		return false, err
	}
	switch {
	case ferr == nil:
		return true, nil
	case errors.Is(ferr, syscall.EWOULDBLOCK):
		return false, nil
	case errors.Is(ferr, syscall.ENOLCK), errors.Is(ferr, syscall.ENOTSUP),
		errors.Is(ferr, syscall.EOPNOTSUPP), errors.Is(ferr, syscall.ENOSYS):
		return false, errNoLocking
	default:
		return false, &os.PathError{Op: "flock", Path: f.Name(), Err: ferr}
	}
}
