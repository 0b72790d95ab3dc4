package config

import (
	"testing"
	"time"
)

// TestReadsDoNotAllocate holds contract point 1: every getter is a pointer
// load and a map lookup, with no allocation, hit or miss or mismatch.
func TestReadsDoNotAllocate(t *testing.T) {
	if testing.CoverMode() != "" {
		t.Skip("coverage instrumentation allocates")
	}
	n, names := benchNamespace(t, 100)
	k := names[42]
	reads := map[string]func(){
		"Get":            func() { n.Get(k) },
		"Get miss":       func() { n.Get("absent") },
		"Int":            func() { n.Int(k, 0) },
		"Int mismatch":   func() { n.String(k, "") },
		"Float":          func() { n.Float(k, 0) },
		"Bool":           func() { n.Bool(k, false) },
		"Duration":       func() { n.Duration(k, time.Second) },
		"Snapshot.Int":   func() { n.Snapshot().Int(k, 0) },
		"Revision":       func() { n.Revision() },
		"Snapshot.Len":   func() { n.Snapshot().Len() },
		"Value.Kind":     func() { v, _ := n.Get(k); _ = v.Kind() },
		"Snapshot.Value": func() { s := n.Snapshot(); s.Get(k) },
	}
	for name, read := range reads {
		if allocs := testing.AllocsPerRun(1000, read); allocs != 0 {
			t.Errorf("%s allocates %.1f times per call", name, allocs)
		}
	}
}
