package relay

import (
	"fmt"
	"log/slog"

	"github.com/holdfast-dev/holdfast/internal/cachedir"
)

// lastGood is the relay's cache directory (WithCacheDir): the last good of
// every namespace it serves, in the SDK's file format, loaded before the
// relay dials its upstream and written as the upstream confirms it.
type lastGood struct {
	path    string
	log     *slog.Logger
	persist *cachedir.Persister // from Open on
}

// Open opens the directory and calls load with each namespace's file.
func (l *lastGood) Open(load func(*cachedir.Record)) error {
	dir, err := cachedir.OpenDir(l.path, cachedir.WithDirLogger(l.log))
	if err != nil {
		return fmt.Errorf("relay: %w", err)
	}
	names, err := dir.Namespaces()
	if err != nil {
		return fmt.Errorf("relay: %w", err)
	}
	l.persist = cachedir.NewPersister(dir, func(rec *cachedir.Record, err error) {
		if err != nil {
			l.log.Warn("relay: last-good file not written; serving goes on", "ns", rec.Namespace, "err", err)
		}
	})
	for _, ns := range names {
		rec, err := dir.Load(ns)
		if err != nil {
			l.log.Warn("relay: last-good file not loaded", "ns", ns, "err", err)
			continue
		}
		load(rec)
	}
	return nil
}

// Submit writes rec in the background.
func (l *lastGood) Submit(rec *cachedir.Record) { l.persist.Submit(rec) }

// Close flushes what was submitted.
func (l *lastGood) Close() error { return l.persist.Close() }
