package config

import (
	"fmt"
	"reflect"
	"sync"
	"sync/atomic"
)

// Binding holds one key's value decoded into a Go type, decoded once per
// change rather than on every read. Get is one atomic load. Make it with
// Bind.
type Binding[T any] struct {
	ns   *Namespace
	key  string
	def  T
	mu   sync.Mutex // serialises refresh: a later refresh reads newer data
	v    atomic.Pointer[T]
	errs atomic.Int64
	last atomic.Pointer[error] // nil while the bound value is good
	stop func()
	// shadow decodes a T that holds a time.Duration, from "250ms"
	// strings too (bind_duration.go); nil for any other T.
	shadow *shadow
}

// Bind decodes key into a T now and after every change of key (with
// encoding/json), so that reading it costs one atomic load. While the key is
// absent, Get returns def. A time.Duration in T (T itself, or a field or
// element at any depth) decodes from the strings the Duration getter reads
// ("250ms", "1m30s") as well as from a number of nanoseconds.
//
// A value that does not decode into a T is not bound: the previous value
// stays, and the error is kept (Err), counted (Errors), shown in the
// namespace's Status (LastError, of kind ErrorBind) and in its metrics (an
// apply result "bind_error"). The next value that decodes replaces it and
// clears Err (and marks that LastError Recovered). Updates run on the
// namespace's callback goroutine, in order with its OnChange callbacks;
// Stop ends them.
func Bind[T any](ns *Namespace, key string, def T) *Binding[T] {
	b := &Binding[T]{ns: ns, key: key, def: def, shadow: newShadow(reflect.TypeFor[T]())}
	b.v.Store(&b.def)
	b.stop = ns.OnChange(key, func(Change) { b.refresh() })
	b.refresh()
	return b
}

// refresh decodes what the namespace serves now. Callbacks run after the
// swap, so this is never older than the change that triggered it.
func (b *Binding[T]) refresh() {
	b.mu.Lock()
	defer b.mu.Unlock()
	v, ok := b.ns.Get(b.key)
	if !ok {
		b.v.Store(&b.def)
		b.clearErr()
		return
	}
	var x T
	if err := b.decode(v, &x); err != nil {
		err = fmt.Errorf("config: bind %q: %w", b.key, err)
		// Status first, then Err, then the count: whoever sees one sees
		// those before it.
		b.ns.bindFailed(err)
		b.last.Store(&err)
		b.errs.Add(1)
		return
	}
	b.v.Store(&x)
	b.clearErr()
}

func (b *Binding[T]) decode(v Value, dst *T) error {
	if b.shadow == nil || v.Kind() == KindInvalid {
		return v.Decode(dst)
	}
	return b.shadow.decode(v.Raw(), dst)
}

// clearErr forgets the last decode error once a good value is bound.
func (b *Binding[T]) clearErr() {
	if p := b.last.Swap(nil); p != nil {
		b.ns.bindRecovered(*p)
	}
}

// Get returns the bound value. The caller must not modify what it points
// into (maps, slices): every reader shares it.
func (b *Binding[T]) Get() T { return *b.v.Load() }

// Err returns the error of the last value that did not decode, or nil once
// a value that decodes (or the default, for an absent key) is bound again.
func (b *Binding[T]) Err() error {
	if p := b.last.Load(); p != nil {
		return *p
	}
	return nil
}

// Errors counts values that did not decode, ever: it does not go down when
// Err clears.
func (b *Binding[T]) Errors() int64 { return b.errs.Load() }

// Stop ends the updates; Get keeps returning the last value.
func (b *Binding[T]) Stop() { b.stop() }
