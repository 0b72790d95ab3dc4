//go:build !windows

package cache

import (
	"os"

	"github.com/google/renameio/v2"
)

// writeFileAtomic replaces path with data: renameio writes a temporary file
// in dir (the same file system, so the rename is atomic), fsyncs it and
// renames it over path. The explicit options matter: renameio.WriteFile
// would let an existing file's wider mode win, and without WithTempDir the
// temporary file may land in another file system. renameio does not fsync
// the directory, so without syncDir the rename may not survive a power loss.
func writeFileAtomic(dir, path string, data []byte) error {
	t, err := renameio.NewPendingFile(path,
		renameio.WithTempDir(dir),
		renameio.WithPermissions(filePerm),
		renameio.WithStaticPermissions(filePerm))
	if err != nil {
		return err
	}
	defer t.Cleanup() // removes the temporary file unless it was renamed
	if _, err := t.Write(data); err != nil {
		return err
	}
	if err := t.CloseAtomicallyReplace(); err != nil {
		return err
	}
	return syncDir(dir)
}

// syncDir fsyncs a directory, making renames in it durable.
func syncDir(dir string) error {
	f, err := os.Open(dir)
	if err != nil {
		return err
	}
	err = f.Sync()
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

func checkPlatformName(string) error { return nil }
