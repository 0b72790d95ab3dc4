package transport

import (
	"strings"
	"testing"
)

func TestValidateClientID(t *testing.T) {
	for _, tc := range []struct {
		id string
		ok bool
	}{
		{"host-1", true},
		{"host-1 pid 7 é", true},
		{strings.Repeat("h", MaxClientIDBytes), true},
		{"", false},
		{strings.Repeat("h", MaxClientIDBytes+1), false},
		{"host\n1", false},
		{"host\x7f", false},
	} {
		if err := ValidateClientID(tc.id); (err == nil) != tc.ok {
			t.Errorf("ValidateClientID(%q) = %v, want ok %v", tc.id, err, tc.ok)
		}
	}
}
