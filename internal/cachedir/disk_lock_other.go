//go:build !(darwin || dragonfly || freebsd || illumos || linux || netbsd || openbsd)

package cachedir

import "os"

// haveFlock reports that there is no cross-process lock here (Windows,
// Plan 9, AIX, Solaris, js and wasip1): Save then compares and writes under
// the in-process lock only, and creates no lock files.
const haveFlock = false

func tryLock(*os.File) (bool, error) { return false, errNoLocking }
