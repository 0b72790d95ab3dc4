package access

import (
	"testing"
)

func TestNewSecret(t *testing.T) {
	a, b := NewSecret(), NewSecret()
	if a == b || len(a) != len(SecretPrefix)+43 || CheckSecret(a) != nil {
		t.Fatalf("secrets %q %q", a, b)
	}
}
