package store

import "testing"

func TestCompactionOfRetention(t *testing.T) {
	for _, tc := range []struct {
		in, mode, value string
		bad             bool
	}{
		{"", "periodic", "0", false},
		{"100000", "revision", "100000", false},
		{"24h", "periodic", "24h", false},
		{"90m", "periodic", "90m", false},
		{"0", "", "", true},
		{"-5", "", "", true},
		{"30s", "", "", true},
		{"a week", "", "", true},
	} {
		mode, value, err := compaction(tc.in)
		if (err != nil) != tc.bad || mode != tc.mode || value != tc.value {
			t.Errorf("compaction(%q) = %q, %q, %v; want %q, %q, bad %v", tc.in, mode, value, err, tc.mode, tc.value, tc.bad)
		}
	}
}
