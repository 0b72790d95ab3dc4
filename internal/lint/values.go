package lint

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"reflect"
	"slices"
	"strconv"

	"cel.dev/cel-go/common/types"
	"cel.dev/cel-go/common/types/ref"
	"cel.dev/cel-go/common/types/traits"
)

// values is a namespace's values as a CEL map that decodes a key's JSON
// value when the expression reads it: a lint reads a few keys of a
// namespace that may hold thousands. Not safe for concurrent use (an
// evaluation is one goroutine's).
type values struct {
	raw     map[string]json.RawMessage
	decoded map[string]ref.Val
}

var (
	_ traits.Mapper = (*values)(nil)
	_ ref.Val       = (*values)(nil)
)

func newValues(raw map[string]json.RawMessage) *values {
	return &values{raw: raw}
}

// Find implements traits.Mapper: a key's value, decoded once.
func (m *values) Find(key ref.Val) (ref.Val, bool) {
	k, ok := key.(types.String)
	if !ok {
		if types.IsUnknownOrError(key) {
			return key, false
		}
		return nil, false
	}
	if v, ok := m.decoded[string(k)]; ok {
		return v, true
	}
	raw, ok := m.raw[string(k)]
	if !ok {
		return nil, false
	}
	v, err := decodeValue(raw)
	if err != nil {
		return types.NewErr("key %q: %v", string(k), err), true
	}
	if m.decoded == nil {
		m.decoded = make(map[string]ref.Val)
	}
	m.decoded[string(k)] = v
	return v, true
}

// Get implements traits.Indexer: a missing key is an error.
func (m *values) Get(key ref.Val) ref.Val {
	v, ok := m.Find(key)
	if !ok {
		return types.ValOrErr(v, "no such key: %v", key)
	}
	return v
}

// Contains implements traits.Container.
func (m *values) Contains(key ref.Val) ref.Val {
	v, ok := m.Find(key)
	if !ok && v != nil && types.IsUnknownOrError(v) {
		return v
	}
	return types.Bool(ok)
}

// Size implements traits.Sizer.
func (m *values) Size() ref.Val { return types.Int(len(m.raw)) }

// Iterator implements traits.Iterable: the keys, sorted.
func (m *values) Iterator() traits.Iterator {
	keys := make([]string, 0, len(m.raw))
	for k := range m.raw {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return types.NewStringList(types.DefaultTypeAdapter, keys).(traits.Iterable).Iterator()
}

// materialize returns every value decoded, as a CEL map.
func (m *values) materialize() traits.Mapper {
	out := make(map[ref.Val]ref.Val, len(m.raw))
	for k := range m.raw {
		v, _ := m.Find(types.String(k))
		out[types.String(k)] = v
	}
	return types.NewRefValMap(types.DefaultTypeAdapter, out)
}

// ConvertToNative implements ref.Val.
func (m *values) ConvertToNative(t reflect.Type) (any, error) {
	return m.materialize().ConvertToNative(t)
}

// ConvertToType implements ref.Val.
func (m *values) ConvertToType(t ref.Type) ref.Val {
	switch t {
	case types.MapType:
		return m
	case types.TypeType:
		return types.MapType
	}
	return types.NewErr("type conversion error from map to '%s'", t)
}

// Equal implements ref.Val.
func (m *values) Equal(other ref.Val) ref.Val { return m.materialize().Equal(other) }

// Type implements ref.Val.
func (m *values) Type() ref.Type { return types.MapType }

// Value implements ref.Val.
func (m *values) Value() any { return m.raw }

// decodeValue decodes one JSON value as CEL's: an integral number is an
// int, another a double.
func decodeValue(raw json.RawMessage) (ref.Val, error) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, err
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return nil, errors.New("trailing data after the JSON value")
	}
	return toCEL(v)
}

func toCEL(v any) (ref.Val, error) {
	switch v := v.(type) {
	case nil:
		return types.NullValue, nil
	case bool:
		return types.Bool(v), nil
	case string:
		return types.String(v), nil
	case json.Number:
		return number(v)
	case []any:
		out := make([]ref.Val, len(v))
		for i, e := range v {
			c, err := toCEL(e)
			if err != nil {
				return nil, err
			}
			out[i] = c
		}
		return types.NewRefValList(types.DefaultTypeAdapter, out), nil
	case map[string]any:
		out := make(map[ref.Val]ref.Val, len(v))
		for k, e := range v {
			c, err := toCEL(e)
			if err != nil {
				return nil, err
			}
			out[types.String(k)] = c
		}
		return types.NewRefValMap(types.DefaultTypeAdapter, out), nil
	}
	return nil, fmt.Errorf("unexpected JSON value %T", v)
}

// number is a JSON number as an int when it is integral and fits, else a
// double.
func number(n json.Number) (ref.Val, error) {
	if i, err := strconv.ParseInt(string(n), 10, 64); err == nil {
		return types.Int(i), nil
	}
	f, err := strconv.ParseFloat(string(n), 64)
	if err != nil && !errors.Is(err, strconv.ErrRange) {
		return nil, err
	}
	if f == math.Trunc(f) && f >= math.MinInt64 && f < math.MaxInt64 {
		return types.Int(int64(f)), nil
	}
	return types.Double(f), nil
}
