package cachedir

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/holdfast-dev/holdfast/internal/snapshot"
)

// Dir is a cache directory of last-good namespace files, one file per
// namespace, named "<namespace>.hfc". Save replaces a file atomically; Load
// reads one back and never serves a damaged file. A Dir is safe for
// concurrent use; Save and Load of one namespace are serialised within the
// process.
//
// # Sharing a directory between processes
//
// Several processes (or several Dirs of one process) may share a directory.
// Save never replaces a newer record of the same store id with an older
// one, whoever wrote it: under an exclusive lock of the namespace's file
// across processes, it reads the header of the file on disk and refuses
// with a *SupersededError (errors.Is ErrSuperseded) when that record is
// newer (see SupersededError for the rule). A record of another store id
// replaces it: store ids have no order, and a new one means the store was
// reset.
//
// The lock is flock(2) on a separate, empty file per namespace,
// "<namespace>.hfc.lock" (the data file is replaced by rename, which would
// leave a lock on it behind with the old inode). It is held only around
// reading the old header and the rename, never while the new file is
// written, and never between calls; lock files are left in place (removing
// one another process may be waiting on would defeat it). Where flock does
// not exist (Windows, Plan 9, AIX, Solaris, js, wasip1) or the file system
// refuses it, the comparison is made under the in-process lock only, and two
// processes' saves of one namespace at the same moment may still cross.
//
// # Durability
//
// Save writes a temporary file in the directory, fsyncs it, renames it over
// the namespace's file (github.com/google/renameio/v2) and then fsyncs the
// directory, which renameio does not do, so that the rename itself survives a
// power loss. After a crash the file holds either the previous record or the
// new one, whole; a temporary file may be left behind, and OpenDir removes
// those older than a minute (younger ones may belong to a writer in another
// process sharing the directory).
//
// # Platforms
//
// On Unix the above holds as stated. On Windows, where renameio has no
// implementation, Save writes and fsyncs a temporary file and renames it over
// the target with os.Rename (MoveFileEx with MOVEFILE_REPLACE_EXISTING);
// directories cannot be fsynced there, so a rename may be lost on power
// failure (the previous file then remains, whole). File modes are advisory on
// Windows, and the device names (con, nul, aux, prn, com1–9, lpt1–9) are
// refused as namespace names there.
type Dir struct {
	path        string        // read-only after OpenDir
	log         *slog.Logger  // read-only after OpenDir
	lockTimeout time.Duration // read-only after OpenDir (tests set it before use)

	mu    sync.Mutex
	locks map[string]*sync.Mutex // guarded by mu; per namespace, never removed

	noLocking sync.Once // logs once that the file system cannot lock

	// Tests set these before use: called, when not nil, while Save
	// waits for another holder of a namespace's lock, and after it has
	// compared, before it renames.
	hookLockWait, hookBeforeCommit func()
}

// Errors of the on-disk store.
var (
	// ErrCorrupt marks a last-good file that cannot be served: truncated,
	// damaged, of a foreign format or version, failing its checksum, or
	// naming another namespace. Load moves such a file aside; the caller
	// proceeds as if there were none.
	ErrCorrupt = errors.New("cache: corrupt last-good file")
	// ErrInvalidNamespace is returned for a namespace name that is not
	// ^[a-z0-9][a-z0-9._-]{0,127}$ and so could not name a file in the
	// directory safely.
	ErrInvalidNamespace = errors.New("cache: invalid namespace name")
	// ErrSuperseded marks a Save refused because the file on disk holds a
	// newer record of the same store id, written by another process or
	// another Dir sharing the directory. It is not a write error: the
	// file is left as it was, holding better data than the record
	// refused. The error is a *SupersededError.
	ErrSuperseded = errors.New("cache: superseded by a newer record on disk")
)

// SupersededError is the error of Save when the file holds a newer record
// of the same store id. A record on disk is newer when its revision is
// higher, or when its revision is the same and it was confirmed later (its
// data is then the same, and replacing it would only make the file look
// older). A record of the same revision confirmed later, or at the same
// time, does replace it: that only refreshes the file's age. It matches
// ErrSuperseded with errors.Is.
type SupersededError struct {
	Namespace string
	StoreID   string
	// Revision and ConfirmedAt are the refused record's.
	Revision    int64
	ConfirmedAt time.Time
	// DiskRevision and DiskConfirmedAt are the record's on disk.
	DiskRevision    int64
	DiskConfirmedAt time.Time
}

func (e *SupersededError) Error() string {
	if e.Revision != e.DiskRevision {
		return fmt.Sprintf("cache: save of namespace %q at revision %d not written: the file holds revision %d of store %q",
			e.Namespace, e.Revision, e.DiskRevision, e.StoreID)
	}
	return fmt.Sprintf("cache: save of namespace %q at revision %d confirmed %s not written: the file holds it confirmed %s",
		e.Namespace, e.Revision, e.ConfirmedAt.UTC().Format(time.RFC3339Nano), e.DiskConfirmedAt.UTC().Format(time.RFC3339Nano))
}

// Unwrap returns ErrSuperseded.
func (e *SupersededError) Unwrap() error { return ErrSuperseded }

// errNoLocking is tryLock's answer where locks across processes cannot be
// taken.
var errNoLocking = errors.New("cache: file locking not supported")

// CorruptError is the error of Load for a file that cannot be served. It
// matches ErrCorrupt with errors.Is.
type CorruptError struct {
	Path    string // the file as found
	Reason  string // what is wrong with it
	MovedTo string // where it was moved aside, or "" when it could not be
}

func (e *CorruptError) Error() string {
	if e.MovedTo == "" {
		return fmt.Sprintf("cache: corrupt last-good file %s: %s (could not move it aside)", e.Path, e.Reason)
	}
	return fmt.Sprintf("cache: corrupt last-good file %s: %s (moved to %s)", e.Path, e.Reason, e.MovedTo)
}

// Unwrap returns ErrCorrupt.
func (e *CorruptError) Unwrap() error { return ErrCorrupt }

// Record is one namespace's last-good state as kept on disk.
type Record struct {
	Namespace string
	StoreID   string
	Revision  int64
	Cursor    int64
	// ConfirmedAt is the wall-clock time the data was last confirmed
	// current (a snapshot, a change or a progress event). It is kept to
	// the nanosecond, without monotonic reading or location.
	ConfirmedAt time.Time
	// Snapshot holds the values. Save encodes it; Load builds it, with
	// the record's namespace, store id and revision.
	Snapshot *snapshot.Snapshot
	// NewHistory tells Save that the store's history was rewritten under
	// the same store id (restored from a backup: the same id, lower
	// revisions) and the caller knows this record to belong to the new
	// history: it then replaces a record of the same store id whatever
	// its revision. It is not kept in the file, and Load leaves it
	// false. Two processes that both set it may replace each other's
	// records of the new history with older ones: set it only until one
	// save of the new history has succeeded.
	NewHistory bool
}

// DirOption configures OpenDir.
type DirOption interface {
	apply(*dirOptions)
}

type dirOptions struct {
	log *slog.Logger
}

type dirOptionFunc func(*dirOptions)

func (f dirOptionFunc) apply(o *dirOptions) { f(o) }

// WithDirLogger sets the logger for files moved aside and temporary files
// swept. The default discards.
func WithDirLogger(l *slog.Logger) DirOption {
	return dirOptionFunc(func(o *dirOptions) { o.log = l })
}

const (
	fileExt    = ".hfc"
	corruptExt = ".corrupt"
	lockExt    = ".lock" // after fileExt: "<namespace>.hfc.lock"
	// defaultLockTimeout is how long Save waits for another process to
	// release a namespace's lock. It holds it for a header read and a
	// rename, so waiting longer means that process is stuck or stopped.
	defaultLockTimeout = 10 * time.Second
	// staleTempAge is how old a temporary file must be for OpenDir to
	// remove it.
	staleTempAge = time.Minute
	dirPerm      = 0o700
	filePerm     = 0o600
)

// OpenDir opens the cache directory at path, creating it (and its parents)
// with mode 0700 when missing. An existing directory with group or other
// permissions is narrowed to 0700, except one with the sticky bit (such as
// /tmp), which is shared by design and refused: use a directory of its own.
// OpenDir removes temporary files left by a crashed Save.
func OpenDir(path string, opts ...DirOption) (*Dir, error) {
	var o dirOptions
	for _, opt := range opts {
		if opt != nil {
			opt.apply(&o)
		}
	}
	if o.log == nil {
		o.log = slog.New(slog.DiscardHandler)
	}
	if path == "" {
		return nil, errors.New("cache: empty cache directory path")
	}
	if err := os.MkdirAll(path, dirPerm); err != nil {
		return nil, fmt.Errorf("cache: create cache directory: %w", err)
	}
	fi, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("cache: cache directory: %w", err)
	}
	if !fi.IsDir() {
		return nil, fmt.Errorf("cache: cache directory %s is not a directory", path)
	}
	if fi.Mode()&fs.ModeSticky != 0 {
		return nil, fmt.Errorf("cache: cache directory %s is a shared (sticky) directory; use a subdirectory of its own", path)
	}
	if fi.Mode().Perm()&0o077 != 0 {
		if err := os.Chmod(path, dirPerm); err != nil {
			return nil, fmt.Errorf("cache: restrict cache directory to 0700: %w", err)
		}
	}
	d := &Dir{path: path, log: o.log, lockTimeout: defaultLockTimeout, locks: make(map[string]*sync.Mutex)}
	d.sweep(time.Now())
	return d, nil
}

// sweep removes temporary files of Save older than staleTempAge. Errors are
// logged: leftover temporary files waste space but are otherwise harmless.
func (d *Dir) sweep(now time.Time) {
	entries, err := os.ReadDir(d.path)
	if err != nil {
		d.log.Warn("cache: cannot list cache directory to sweep temporary files", "dir", d.path, "err", err)
		return
	}
	for _, e := range entries {
		if !e.Type().IsRegular() || !isTempName(e.Name()) {
			continue
		}
		fi, err := e.Info()
		if err != nil || now.Sub(fi.ModTime()) < staleTempAge {
			continue
		}
		p := filepath.Join(d.path, e.Name())
		if err := os.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
			d.log.Warn("cache: cannot remove stale temporary file", "file", p, "err", err)
			continue
		}
		d.log.Info("cache: removed stale temporary file", "file", p)
	}
}

// isTempName reports whether name is a temporary file of Save:
// "." + "<namespace>.hfc" + decimal digits (renameio's naming, and the
// Windows fallback's).
func isTempName(name string) bool {
	if !strings.HasPrefix(name, ".") {
		return false
	}
	i := strings.LastIndex(name, fileExt)
	if i < 2 { // at least "." and a one-letter namespace
		return false
	}
	digits := name[i+len(fileExt):]
	if digits == "" {
		return false
	}
	for _, c := range digits {
		if c < '0' || c > '9' {
			return false
		}
	}
	return validNamespace(name[1:i])
}

const maxNamespaceLen = 128

// validNamespace is the rule ^[a-z0-9][a-z0-9._-]{0,127}$ (which excludes
// "." and ".."), the same as transport.ValidateNamespace; cache keeps its
// own copy to depend on nothing but the standard library and renameio.
func validNamespace(ns string) bool {
	if len(ns) == 0 || len(ns) > maxNamespaceLen {
		return false
	}
	for i := 0; i < len(ns); i++ {
		c := ns[i]
		switch {
		case c >= 'a' && c <= 'z', c >= '0' && c <= '9':
		case i > 0 && (c == '.' || c == '_' || c == '-'):
		default:
			return false
		}
	}
	return true
}

// checkNamespace validates ns by the pattern, and then structurally, so that
// no name leaves the directory even if the pattern were loosened.
func checkNamespace(ns string) error {
	if !validNamespace(ns) || ns == "." || ns == ".." ||
		filepath.Base(ns) != ns || filepath.IsAbs(ns) || !filepath.IsLocal(ns) ||
		strings.ContainsAny(ns, `/\:`) || strings.ContainsRune(ns, os.PathSeparator) {
		return fmt.Errorf("%w: %.140q", ErrInvalidNamespace, ns)
	}
	return checkPlatformName(ns)
}

// Path returns the file of namespace ns, or an error wrapping
// ErrInvalidNamespace.
func (d *Dir) Path(ns string) (string, error) {
	if err := checkNamespace(ns); err != nil {
		return "", err
	}
	return filepath.Join(d.path, ns+fileExt), nil
}

func (d *Dir) lock(ns string) *sync.Mutex {
	d.mu.Lock()
	defer d.mu.Unlock()
	l, ok := d.locks[ns]
	if !ok {
		l = new(sync.Mutex)
		d.locks[ns] = l
	}
	return l
}

// Save writes rec as its namespace's last-good file, replacing the previous
// one atomically, with mode 0600, and fsyncs the file and the directory
// before it returns. On error the previous file is left as it was.
//
// When the file holds a newer record of the same store id (see
// SupersededError; another process sharing the directory wrote it), Save
// leaves it and returns a *SupersededError, unless rec.NewHistory is set. A
// file that cannot be served (ErrCorrupt) is replaced. A file that cannot be
// read (permissions, I/O) is not: Save cannot tell whether it is newer and
// returns the error. Save waits up to 10 s for another process holding the
// namespace's lock, then fails with an error matching os.ErrDeadlineExceeded.
func (d *Dir) Save(rec *Record) error {
	if rec == nil {
		return errors.New("cache: save of a nil record")
	}
	path, err := d.Path(rec.Namespace)
	if err != nil {
		return err
	}
	data, err := Encode(rec)
	if err != nil {
		return err
	}
	l := d.lock(rec.Namespace)
	l.Lock()
	defer l.Unlock()
	if err := d.save(rec, path, data); err != nil {
		if errors.Is(err, ErrSuperseded) {
			return err
		}
		return fmt.Errorf("cache: save namespace %q: %w", rec.Namespace, err)
	}
	return nil
}

// save writes and fsyncs the new file, then, under the namespace's lock
// across processes, checks the file on disk and renames the new one over
// it. The write comes first so the lock is held briefly; a save refused
// then has written a temporary file for nothing, which is rare.
func (d *Dir) save(rec *Record, path string, data []byte) error {
	p, err := writeTemp(d.path, path, data)
	if err != nil {
		return err
	}
	defer p.cleanup()
	unlock, err := d.lockFile(path)
	if err != nil {
		return err
	}
	defer unlock()
	if err := d.mayReplace(path, rec); err != nil {
		return err
	}
	if d.hookBeforeCommit != nil {
		d.hookBeforeCommit()
	}
	return p.commit()
}

// mayReplace returns nil when rec may replace the file at path: there is
// none, it cannot be served, it holds another store id or an older record,
// or rec is of a new history. It returns a *SupersededError when the file
// holds a newer record, and the read error when it cannot be read. It reads
// the header and checks the checksum, streaming, and decodes the values only
// when it would refuse.
func (d *Dir) mayReplace(path string, rec *Record) error {
	h, err := statHeader(path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return nil
	case errors.Is(err, ErrCorrupt):
		d.log.Warn("cache: replacing a corrupt last-good file", "file", path, "reason", strings.TrimPrefix(err.Error(), ErrCorrupt.Error()+": "))
		return nil
	case err != nil:
		return fmt.Errorf("read the file it would replace: %w", err)
	case h.namespace != rec.Namespace:
		d.log.Warn("cache: replacing a last-good file of another namespace", "file", path, "holds", h.namespace)
		return nil
	}
	if rec.NewHistory || h.storeID != rec.StoreID || !diskNewer(h, rec) {
		return nil
	}
	// Refusing is rare: only then check the whole file, values too, so
	// that a file Load could not serve does not block saves.
	data, _, reason, err := readFile(path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return nil
	case err != nil:
		return fmt.Errorf("read the file it would replace: %w", err)
	case reason == "":
		if _, err := Decode(data); err != nil {
			reason = strings.TrimPrefix(err.Error(), ErrCorrupt.Error()+": ")
		}
	}
	if reason != "" {
		d.log.Warn("cache: replacing a corrupt last-good file", "file", path, "reason", reason)
		return nil
	}
	return &SupersededError{
		Namespace: rec.Namespace, StoreID: rec.StoreID,
		Revision: rec.Revision, ConfirmedAt: rec.ConfirmedAt,
		DiskRevision: h.revision, DiskConfirmedAt: h.confirmedAt(),
	}
}

// diskNewer is the rule of SupersededError for two records of one store id:
// the revision first, then the confirmation time.
func diskNewer(disk header, rec *Record) bool {
	if disk.revision != rec.Revision {
		return disk.revision > rec.Revision
	}
	return disk.confirmed > unixNano(rec.ConfirmedAt)
}

// unixNano is a confirmation time as the file keeps it (0 = unknown).
func unixNano(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixNano()
}

// statHeader reads the header of the file at path and checks its checksum.
func statHeader(path string) (header, error) {
	f, fi, reason, err := openFile(path)
	if err != nil {
		return header{}, err
	}
	if reason != "" {
		return header{}, corruptf("%s", reason)
	}
	defer f.Close()
	return readHeader(f, fi.Size())
}

// lockFile takes the exclusive lock across processes of the namespace whose
// file is path, waiting up to d.lockTimeout, and returns the function that
// releases it. Where there are no such locks, it does nothing.
func (d *Dir) lockFile(path string) (unlock func(), err error) {
	if !haveFlock {
		return func() {}, nil
	}
	name := path + lockExt
	f, err := os.OpenFile(name, os.O_RDWR|os.O_CREATE, filePerm)
	if err != nil {
		return nil, fmt.Errorf("open lock file: %w", err)
	}
	deadline := time.Now().Add(d.lockTimeout)
	wait := time.Millisecond
	for {
		ok, err := tryLock(f)
		if errors.Is(err, errNoLocking) {
			d.noLocking.Do(func() {
				d.log.Warn("cache: the file system of the cache directory cannot lock files; saves of processes sharing it may cross", "dir", d.path)
			})
			ok, err = true, nil
		}
		switch {
		case err != nil:
			f.Close()
			return nil, err
		case ok:
			// Closing the file releases the lock.
			return func() { f.Close() }, nil
		case time.Now().After(deadline):
			f.Close()
			return nil, fmt.Errorf("lock %s held by another process for more than %v: %w", name, d.lockTimeout, os.ErrDeadlineExceeded)
		}
		if d.hookLockWait != nil {
			d.hookLockWait()
		}
		// flock cannot wait with a deadline: poll, backing off.
		time.Sleep(wait)
		wait = min(2*wait, 50*time.Millisecond)
	}
}

// Load reads namespace ns's last-good file.
//
// When there is none, the error wraps fs.ErrNotExist. When the file cannot be
// served (see ErrCorrupt), or a directory stands in its place, Load moves it
// aside to "<file>.corrupt" (replacing an older one), logs it, and returns a
// *CorruptError; the caller goes on as if there were no file. Other errors
// (permissions, I/O) leave the file where it is. Load returns either a whole,
// checked record or an error, never part of one.
func (d *Dir) Load(ns string) (*Record, error) {
	path, err := d.Path(ns)
	if err != nil {
		return nil, err
	}
	l := d.lock(ns)
	l.Lock()
	defer l.Unlock()

	data, fi, reason, err := readFile(path)
	if err != nil {
		return nil, fmt.Errorf("cache: load namespace %q: %w", ns, err)
	}
	if reason == "" {
		rec, err := Decode(data)
		switch {
		case err != nil:
			reason = strings.TrimPrefix(err.Error(), ErrCorrupt.Error()+": ")
		case rec.Namespace != ns:
			reason = fmt.Sprintf("file holds namespace %q", rec.Namespace)
		default:
			return rec, nil
		}
	}
	return nil, d.moveAside(path, fi, reason)
}

// readFile reads path whole. A directory or an oversized file gives a
// reason (the file is corrupt) rather than an error.
func readFile(path string) ([]byte, os.FileInfo, string, error) {
	f, fi, reason, err := openFile(path)
	if err != nil || reason != "" {
		return nil, fi, reason, err
	}
	defer f.Close()
	if fi.Size() > MaxFileSize {
		return nil, fi, fmt.Sprintf("file of %d bytes exceeds the %d limit", fi.Size(), MaxFileSize), nil
	}
	// Read one byte more than the size, to see a file that grew (it is
	// replaced by rename, never written in place, so it should not).
	data := make([]byte, fi.Size()+1)
	n, err := io.ReadFull(f, data)
	switch {
	case err == io.ErrUnexpectedEOF || err == io.EOF:
		return data[:n], fi, "", nil
	case err != nil:
		return nil, nil, "", err
	default:
		return nil, fi, "file grew while being read", nil
	}
}

// openFile opens path for reading if it is a regular file (or a symlink to
// one), and otherwise gives the reason it cannot be served (and no file).
func openFile(path string) (f *os.File, fi os.FileInfo, reason string, err error) {
	// Look before opening: opening a FIFO would block.
	if fi, err := os.Lstat(path); err != nil {
		return nil, nil, "", err
	} else if fi.IsDir() {
		return nil, fi, "a directory stands in its place", nil
	} else if !fi.Mode().IsRegular() && fi.Mode()&fs.ModeSymlink == 0 {
		return nil, fi, "not a regular file", nil
	}
	f, err = os.Open(path)
	if err != nil {
		return nil, nil, "", err
	}
	fi, err = f.Stat()
	if err != nil {
		f.Close()
		return nil, nil, "", err
	}
	switch {
	case fi.IsDir():
		reason = "a directory stands in its place"
	case !fi.Mode().IsRegular():
		reason = "not a regular file"
	default:
		return f, fi, "", nil
	}
	f.Close()
	return nil, fi, reason, nil
}

// moveAside renames a corrupt file (or directory) at path to
// path+".corrupt", logs, and returns the *CorruptError for it.
func (d *Dir) moveAside(path string, fi os.FileInfo, reason string) error {
	cerr := &CorruptError{Path: path, Reason: reason}
	// Under the lock, no other process's Save renames a file in between
	// the check and the move.
	unlock, err := d.lockFile(path)
	if err != nil {
		d.log.Warn("cache: corrupt last-good file not moved aside: cannot lock it", "file", path, "reason", reason, "err", err)
		return cerr
	}
	defer unlock()
	// Move only what was read: if another process replaced the file
	// meanwhile, leave the new one alone. (A symlink is not moved either:
	// its target is not ours to rename.)
	if cur, err := os.Lstat(path); err != nil || fi == nil || !os.SameFile(fi, cur) {
		d.log.Warn("cache: corrupt last-good file not moved aside: it changed meanwhile, or is a symlink", "file", path, "reason", reason)
		return cerr
	}
	to := path + corruptExt
	err = os.Rename(path, to)
	if err != nil {
		// An older .corrupt of the other kind (file vs directory) blocks
		// the rename: remove it and retry.
		if rerr := os.RemoveAll(to); rerr == nil {
			err = os.Rename(path, to)
		}
	}
	if err != nil {
		d.log.Error("cache: corrupt last-good file cannot be moved aside", "file", path, "reason", reason, "err", err)
		return cerr
	}
	cerr.MovedTo = to
	if err := syncDir(d.path); err != nil {
		d.log.Warn("cache: fsync of cache directory failed", "dir", d.path, "err", err)
	}
	d.log.Warn("cache: corrupt last-good file moved aside", "file", path, "moved_to", to, "reason", reason)
	return cerr
}

// Namespaces returns the namespaces that have a file in the directory, by
// name (a relay loads them all before it dials).
func (d *Dir) Namespaces() ([]string, error) {
	ents, err := os.ReadDir(d.path)
	if err != nil {
		return nil, fmt.Errorf("cache: list cache directory: %w", err)
	}
	var out []string
	for _, e := range ents {
		ns, ok := strings.CutSuffix(e.Name(), fileExt)
		if ok && e.Type().IsRegular() && checkNamespace(ns) == nil {
			out = append(out, ns)
		}
	}
	return out, nil
}
