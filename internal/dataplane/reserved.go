package dataplane

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"reflect"
	"strconv"
	"strings"
	"sync"

	"github.com/holdfast-dev/holdfast/internal/rollout"
	"github.com/holdfast-dev/holdfast/internal/wire"
	"github.com/holdfast-dev/holdfast/transport"
)

// A client that predates staged rollouts does not list
// transport.CapabilityRollout in its request's Holdfast-Capabilities: it
// would serve a reserved key (rollout.Key) as an ordinary key, and its own
// strict checks might nack every stage. Every data-plane reply to it
// leaves reserved keys out, so that it keeps serving the base
// (docs/PROTOCOL.md, "Staged rollouts").

// rolloutAware reports whether the client of r evaluates rollouts itself:
// it lists transport.CapabilityRollout in Holdfast-Capabilities.
func rolloutAware(r *http.Request) bool {
	for _, v := range r.Header.Values(transport.HeaderCapabilities) {
		for v != "" {
			var c string
			c, v, _ = strings.Cut(v, ",")
			if strings.TrimSpace(c) == transport.CapabilityRollout {
				return true
			}
		}
	}
	return false
}

// withoutReserved returns content without its reserved keys (the base a
// client serves): content itself when it has none, else a copy.
func withoutReserved(content map[string]json.RawMessage) map[string]json.RawMessage {
	if !hasReserved(content) {
		return content
	}
	out := maps.Clone(content)
	maps.DeleteFunc(out, func(k string, _ json.RawMessage) bool { return rollout.Reserved(k) })
	return out
}

// hasReserved reports whether values holds a reserved key.
func hasReserved(values map[string]json.RawMessage) bool {
	for k := range values {
		if rollout.Reserved(k) {
			return true
		}
	}
	return false
}

// reservedScans remembers, by namespace, the base of the content last
// asked for: the content without its reserved keys. Content is replaced,
// never mutated (store.live, followed.live), so the base holds for as
// long as the map is the one scanned: a 304 to a client that predates
// rollouts costs no scan of every key, and a 200 no copy of them. It
// keeps at most two maps per namespace alive, and forgets them all past
// maxReservedScans namespaces.
type reservedScans struct {
	mu sync.Mutex
	m  map[string]reservedScan
}

type reservedScan struct {
	values map[string]json.RawMessage // kept, so that no other map takes its address
	base   map[string]json.RawMessage // values itself when it holds no reserved key
}

const maxReservedScans = 4096

// base returns values, ns's content, without its reserved keys (shared,
// never mutate), and whether it had any.
func (r *reservedScans) base(ns string, values map[string]json.RawMessage) (map[string]json.RawMessage, bool) {
	r.mu.Lock()
	e, ok := r.m[ns]
	r.mu.Unlock()
	if !ok || reflect.ValueOf(e.values).UnsafePointer() != reflect.ValueOf(values).UnsafePointer() {
		e = reservedScan{values: values, base: values}
		if hasReserved(values) {
			e.base = withoutReserved(values)
		}
		r.mu.Lock()
		if r.m == nil || len(r.m) >= maxReservedScans {
			r.m = make(map[string]reservedScan)
		}
		r.m[ns] = e
		r.mu.Unlock()
	}
	return e.base, len(e.base) != len(values)
}

// baseETag is the ETag of a snapshot without its reserved keys,
// "<store_id>.base.<revision>": another representation of the same
// revision than wire.ETag's, so that no HTTP cache takes one for the
// other. The part after the last "." is still the revision.
func baseETag(storeID string, rev int64) string {
	return `"` + storeID + ".base." + strconv.FormatInt(rev, 10) + `"`
}

// view returns c as a client sees it: c itself for one that evaluates
// rollouts (aware), else c's base view.
func (c *Change) view(aware bool) *Change {
	if aware {
		return c
	}
	return c.baseView()
}

// baseView returns c without reserved keys: c itself when it touches none,
// else a change of the same revision and prev_revision (an empty one when
// it touched nothing else: the client's chain of revisions stays whole).
// It is built once, on first use by a client that predates rollouts, and
// shared by all of them; a change that touches no reserved key costs them
// a scan of its keys, once.
func (c *Change) baseView() *Change {
	c.baseOnce.Do(func() {
		c.base = c
		if touchesReserved(&c.CS) {
			c.base = &Change{Gen: c.Gen, Seq: c.Seq, CS: stripChangeSet(c.CS)}
		}
	})
	return c.base
}

// touchesReserved reports whether cs puts or deletes a reserved key.
func touchesReserved(cs *transport.ChangeSet) bool {
	if hasReserved(cs.Puts) {
		return true
	}
	for _, k := range cs.Deletes {
		if rollout.Reserved(k) {
			return true
		}
	}
	return false
}

// stripChangeSet returns cs without its reserved keys. A relay's change
// keeps its upstream's bytes (Raw) but for its puts and deletes, so that
// fields this version does not know still pass through.
func stripChangeSet(cs transport.ChangeSet) transport.ChangeSet {
	out := cs
	out.Puts, out.Deletes = nil, nil
	for k, v := range cs.Puts {
		if !rollout.Reserved(k) {
			if out.Puts == nil {
				out.Puts = make(map[string]json.RawMessage, len(cs.Puts))
			}
			out.Puts[k] = v
		}
	}
	for _, k := range cs.Deletes {
		if !rollout.Reserved(k) {
			out.Deletes = append(out.Deletes, k)
		}
	}
	if cs.Raw != nil {
		raw, err := stripRaw(cs.Raw, out.Puts, out.Deletes)
		if err != nil {
			// Cannot happen for bytes that decoded into cs: the known
			// fields, encoded afresh, are still the change.
			raw = nil
		}
		out.Raw = raw
	}
	return out
}

// errNotObject: a change set's bytes are not one JSON object.
var errNotObject = errors.New("dataplane: change set is not one JSON object")

// stripRaw re-encodes the change-set object raw with puts and deletes in
// place of its own: every other member is kept as it came, in its order.
// Every member that encoding/json would decode into ChangeSet.Puts or
// Deletes (names match case-insensitively, and a repeated one adds to, or
// replaces, the first) is dropped, so that what a client decodes from the
// result is exactly puts and deletes; the caller takes them from the
// decoded change set, where that merging has been done already.
func stripRaw(raw []byte, puts map[string]json.RawMessage, deletes []string) ([]byte, error) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return nil, errNotObject
	}
	out := make([]byte, 0, len(raw))
	out = append(out, '{')
	member := func(key string, value []byte) {
		if len(out) > 1 {
			out = append(out, ',')
		}
		k, _ := json.Marshal(key) // a string always marshals
		out = append(append(append(out, k...), ':'), value...)
	}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil, err
		}
		key, ok := tok.(string)
		if !ok {
			return nil, errNotObject
		}
		var value json.RawMessage
		if err := dec.Decode(&value); err != nil {
			return nil, err
		}
		if strings.EqualFold(key, "puts") || strings.EqualFold(key, "deletes") {
			continue
		}
		member(key, value)
	}
	if tok, err := dec.Token(); err != nil || tok != json.Delim('}') {
		return nil, errNotObject
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, fmt.Errorf("%w: data after the object", errNotObject)
	}
	if len(puts) > 0 {
		values, err := wire.EncodeValues(puts)
		if err != nil {
			return nil, err
		}
		member("puts", values)
	}
	if len(deletes) > 0 {
		d, err := json.Marshal(deletes)
		if err != nil {
			return nil, err
		}
		member("deletes", d)
	}
	return append(out, '}'), nil
}

// WithoutReserved returns content without its reserved keys (the base a
// client serves): content itself when it has none, else a copy.
func WithoutReserved(content map[string]json.RawMessage) map[string]json.RawMessage {
	return withoutReserved(content)
}
