//go:build !windows

package cachedir

import (
	"os"

	"github.com/google/renameio/v2"
)

// writeTemp writes data to a temporary file in dir and fsyncs it; commit
// then renames it over path. It is two steps so that Save holds the
// namespace's lock across processes for the rename only, not for the write.
// renameio writes the temporary file in dir (the same file system, so the
// rename is atomic). The explicit options matter: renameio.WriteFile would
// let an existing file's wider mode win, and without WithTempDir the
// temporary file may land in another file system.
func writeTemp(dir, path string, data []byte) (*pendingFile, error) {
	t, err := renameio.NewPendingFile(path,
		renameio.WithTempDir(dir),
		renameio.WithPermissions(filePerm),
		renameio.WithStaticPermissions(filePerm))
	if err != nil {
		return nil, err
	}
	if _, err := t.Write(data); err != nil {
		t.Cleanup()
		return nil, err
	}
	if err := t.Sync(); err != nil {
		t.Cleanup()
		return nil, err
	}
	return &pendingFile{t: t, dir: dir}, nil
}

type pendingFile struct {
	t   *renameio.PendingFile
	dir string
}

// commit renames the temporary file over its target and fsyncs the
// directory, which renameio does not do: without it the rename may not
// survive a power loss. (renameio fsyncs the file again first; it has
// nothing left to write.)
func (p *pendingFile) commit() error {
	if err := p.t.CloseAtomicallyReplace(); err != nil {
		return err
	}
	return syncDir(p.dir)
}

// cleanup removes the temporary file unless it was renamed.
func (p *pendingFile) cleanup() { p.t.Cleanup() }

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
