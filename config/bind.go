package config

import (
	"fmt"
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
	last atomic.Pointer[error]
	stop func()
}

// Bind decodes key into a T now and after every change of key (with
// encoding/json), so that reading it costs one atomic load. While the key is
// absent, Get returns def. A value that does not decode into a T is not
// bound: the previous value stays, the error is counted and kept (Err), and
// the next change that decodes replaces it. Updates run on the namespace's
// callback goroutine, in order with its OnChange callbacks; Stop ends them.
func Bind[T any](ns *Namespace, key string, def T) *Binding[T] {
	b := &Binding[T]{ns: ns, key: key, def: def}
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
		return
	}
	var x T
	if err := v.Decode(&x); err != nil {
		err = fmt.Errorf("config: bind %q: %w", b.key, err)
		b.errs.Add(1)
		b.last.Store(&err)
		return
	}
	b.v.Store(&x)
}

// Get returns the bound value. The caller must not modify what it points
// into (maps, slices): every reader shares it.
func (b *Binding[T]) Get() T { return *b.v.Load() }

// Err returns the last decode error, or nil.
func (b *Binding[T]) Err() error {
	if p := b.last.Load(); p != nil {
		return *p
	}
	return nil
}

// Errors counts values that did not decode.
func (b *Binding[T]) Errors() int64 { return b.errs.Load() }

// Stop ends the updates; Get keeps returning the last value.
func (b *Binding[T]) Stop() { b.stop() }
