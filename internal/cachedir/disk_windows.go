//go:build windows

package cachedir

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// writeTemp writes data to a temporary file in dir, fsyncs and closes it;
// commit then renames it over path. renameio has no Windows implementation,
// so this is its sequence by hand (os.Rename is MoveFileEx with
// MOVEFILE_REPLACE_EXISTING). The temporary name, "." + base + digits, is the
// one OpenDir sweeps.
func writeTemp(dir, path string, data []byte) (_ *pendingFile, err error) {
	f, err := os.CreateTemp(dir, "."+filepath.Base(path)+"*")
	if err != nil {
		return nil, err
	}
	tmp := f.Name()
	defer func() {
		if err != nil {
			f.Close()
			os.Remove(tmp)
		}
	}()
	if _, err = f.Write(data); err != nil {
		return nil, err
	}
	if err = f.Sync(); err != nil {
		return nil, err
	}
	if err = f.Close(); err != nil {
		return nil, err
	}
	return &pendingFile{tmp: tmp, path: path}, nil
}

type pendingFile struct {
	tmp, path string
	done      bool
}

func (p *pendingFile) commit() error {
	if err := os.Rename(p.tmp, p.path); err != nil {
		return err
	}
	p.done = true
	return nil
}

// cleanup removes the temporary file unless it was renamed.
func (p *pendingFile) cleanup() {
	if !p.done {
		os.Remove(p.tmp)
	}
}

// syncDir is a no-op: Windows cannot fsync a directory handle opened this
// way; NTFS journals the rename's metadata itself.
func syncDir(string) error { return nil }

// checkPlatformName refuses DOS device names, which Windows resolves to
// devices whatever the extension ("nul.hfc" is the null device).
func checkPlatformName(ns string) error {
	base, _, _ := strings.Cut(ns, ".")
	switch base {
	case "con", "prn", "aux", "nul",
		"com1", "com2", "com3", "com4", "com5", "com6", "com7", "com8", "com9",
		"lpt1", "lpt2", "lpt3", "lpt4", "lpt5", "lpt6", "lpt7", "lpt8", "lpt9":
		return fmt.Errorf("%w: %q is a device name on Windows", ErrInvalidNamespace, ns)
	}
	return nil
}
