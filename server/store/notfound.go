package store

import (
	"errors"
	"fmt"

	"github.com/holdfast-dev/holdfast/transport"
)

// NotFoundError is a namespace, or a revision or time of one, that the
// store holds no content for, said as an operator reads it. It is a
// transport.ErrNotFound.
type NotFoundError struct {
	Namespace string
	// What, when set, says what of the namespace is missing ("no revision
	// at or before 12"); empty: the namespace itself.
	What string
}

func (e *NotFoundError) Error() string {
	if e.What == "" {
		return fmt.Sprintf("namespace %q not found", e.Namespace)
	}
	return fmt.Sprintf("namespace %q: %s", e.Namespace, e.What)
}

func (e *NotFoundError) Unwrap() error { return transport.ErrNotFound }

// NamespaceNotFound is err said as an operator reads it when it is a
// transport.ErrNotFound of namespace ns (the etcd source's words are a
// program's), else err.
func NamespaceNotFound(ns string, err error) error {
	var nf *NotFoundError
	if !errors.As(err, &nf) && errors.Is(err, transport.ErrNotFound) {
		return &NotFoundError{Namespace: ns}
	}
	return err
}
