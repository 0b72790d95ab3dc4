package transport

import "testing"

// TestChangeSetKeepsItsWireBytes: a decoded change set keeps the bytes it
// came as, fields this version does not know included (a relay serves
// them as they are).
func TestChangeSetKeepsItsWireBytes(t *testing.T) {
	in := []byte(`{"ns":"a","revision":2,"prev_revision":1,"store_id":"s","committed_at":"2026-01-01T00:00:00Z","puts":{"k":1},"future":{"x":1}}`)
	buf := append([]byte(nil), in...)
	cs, err := decodeAnyChangeSet(buf)
	if err != nil {
		t.Fatal(err)
	}
	clear(buf) // the caller's buffer, reused
	if string(cs.Raw) != string(in) {
		t.Fatalf("Raw = %s, want %s", cs.Raw, in)
	}
}
