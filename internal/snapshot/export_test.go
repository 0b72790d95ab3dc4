package snapshot

import "encoding/json"

// Helpers for this package's tests, which no library code needs.

// NewValue decodes one JSON value. raw must be a single valid JSON value;
// white space around it is allowed. NewValue keeps a copy of raw, so the
// caller may reuse it.
func NewValue(raw []byte) (Value, error) {
	d := new(valueData)
	if err := d.decode(raw); err != nil {
		return Value{}, err
	}
	return Value{d}, nil
}

// FromValues makes a Snapshot of already decoded values.
func FromValues(namespace, storeID string, revision int64, values map[string]Value) *Snapshot {
	x, err := layout(len(values), func(b *builder) error {
		for k := range values {
			b.count(k)
		}
		for k, v := range values {
			b.addValue(k, v.data())
		}
		return nil
	})
	if err != nil {
		panic("cache: " + err.Error()) // unreachable: a map has no key twice
	}
	return &Snapshot{namespace: namespace, storeID: storeID, revision: revision, index: x}
}

// RawValues returns a new map of every key to its JSON text.
func (s *Snapshot) RawValues() map[string]json.RawMessage {
	out := make(map[string]json.RawMessage, len(s.ents))
	for k, raw := range s.RawAll() {
		out[k] = raw
	}
	return out
}
