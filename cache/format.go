package cache

import (
	"bytes"
	"encoding/json"
	"time"

	"github.com/holdfast-dev/holdfast/internal/cachedir"
	"github.com/holdfast-dev/holdfast/internal/snapshot"
)

// MaxFileSize is the largest last-good file Encode writes and Decode reads
// (1 GiB).
const MaxFileSize = 1 << 30

// ErrCorrupt marks a last-good file that cannot be served: truncated,
// damaged, of a foreign format or version, failing its checksum, or holding
// a value that is not JSON. Every error of Decode about the data wraps it.
var ErrCorrupt = cachedir.ErrCorrupt

// Record is one namespace's last-good state, as its file holds it.
type Record struct {
	Namespace string
	// StoreID names the server's store history the data came from;
	// Revision is the namespace's last change in it, and Cursor the
	// store-wide position a watch resumes from.
	StoreID  string
	Revision int64
	Cursor   int64
	// ConfirmedAt is when the client last confirmed the data current (a
	// snapshot, a change or a progress event): the file's age. It is kept
	// to the nanosecond, without monotonic reading or location; the zero
	// time means unknown.
	ConfirmedAt time.Time
	// Values maps each key to its JSON text.
	Values map[string]json.RawMessage
}

// Encode returns the file contents for rec. rec.Namespace must be a valid
// namespace name (^[a-z0-9][a-z0-9._-]{0,127}$), and every value one valid
// JSON value.
func Encode(rec *Record) ([]byte, error) {
	if rec == nil {
		return cachedir.Encode(nil)
	}
	s, err := snapshot.Build(rec.Namespace, rec.StoreID, rec.Revision, rec.Values)
	if err != nil {
		return nil, err
	}
	return cachedir.Encode(&cachedir.Record{
		Namespace: rec.Namespace, StoreID: rec.StoreID,
		Revision: rec.Revision, Cursor: rec.Cursor,
		ConfirmedAt: rec.ConfirmedAt, Snapshot: s,
	})
}

// Decode parses and checks a whole last-good file (see the package
// documentation). Any defect gives an error wrapping ErrCorrupt, and no
// record. data is not retained.
func Decode(data []byte) (*Record, error) {
	r, err := cachedir.Decode(data)
	if err != nil {
		return nil, err
	}
	values := make(map[string]json.RawMessage, r.Snapshot.Len())
	for k, raw := range r.Snapshot.RawAll() {
		values[k] = bytes.Clone(raw) // the caller's to modify, unlike the snapshot's memory
	}
	return &Record{
		Namespace: r.Namespace, StoreID: r.StoreID,
		Revision: r.Revision, Cursor: r.Cursor,
		ConfirmedAt: r.ConfirmedAt, Values: values,
	}, nil
}
