package cache_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/holdfast-dev/holdfast/cache"
)

func TestEncodeDecodeRoundTrip(t *testing.T) {
	at := time.Unix(1700000000, 123456789)
	rec := &cache.Record{
		Namespace: "payments", StoreID: "store-1", Revision: 7, Cursor: 9, ConfirmedAt: at,
		Values: map[string]json.RawMessage{"timeout": json.RawMessage(`"250ms"`), "limits": json.RawMessage(`{"rps": 10}`)},
	}
	data, err := cache.Encode(rec)
	if err != nil {
		t.Fatal(err)
	}
	got, err := cache.Decode(data)
	if err != nil {
		t.Fatal(err)
	}
	if got.Namespace != rec.Namespace || got.StoreID != rec.StoreID || got.Revision != 7 || got.Cursor != 9 || !got.ConfirmedAt.Equal(at) {
		t.Fatalf("header = %+v", got)
	}
	if len(got.Values) != 2 || string(got.Values["timeout"]) != `"250ms"` || string(got.Values["limits"]) != `{"rps": 10}` {
		t.Fatalf("values = %q", got.Values)
	}
	got.Values["timeout"][1] = 'X' // the caller's own copy: decoding again is unaffected
	again, err := cache.Decode(data)
	if err != nil || string(again.Values["timeout"]) != `"250ms"` {
		t.Fatalf("decode again = %q, %v", again.Values["timeout"], err)
	}
}

func TestDecodeCorrupt(t *testing.T) {
	data, err := cache.Encode(&cache.Record{Namespace: "ns", Values: map[string]json.RawMessage{"k": json.RawMessage(`1`)}})
	if err != nil {
		t.Fatal(err)
	}
	for name, bad := range map[string][]byte{
		"empty":     nil,
		"truncated": data[:len(data)-1],
		"flipped":   append(append([]byte{}, data[:20]...), append([]byte{data[20] ^ 1}, data[21:]...)...),
		"foreign":   []byte("not a holdfast file at all"),
	} {
		if _, err := cache.Decode(bad); !errors.Is(err, cache.ErrCorrupt) {
			t.Errorf("%s: Decode error %v, want ErrCorrupt", name, err)
		}
	}
}

func TestEncodeRefuses(t *testing.T) {
	for name, rec := range map[string]*cache.Record{
		"nil":           nil,
		"bad namespace": {Namespace: "../etc"},
		"bad value":     {Namespace: "ns", Values: map[string]json.RawMessage{"k": json.RawMessage(`{`)}},
	} {
		if _, err := cache.Encode(rec); err == nil {
			t.Errorf("%s: Encode succeeded", name)
		}
	}
}

// A tool reads a namespace's last-good file and shows what a client would
// serve from it after a restart.
func ExampleDecode() {
	data, err := cache.Encode(&cache.Record{
		Namespace: "payments", StoreID: "store-1", Revision: 42, Cursor: 42,
		ConfirmedAt: time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC),
		Values:      map[string]json.RawMessage{"timeout": json.RawMessage(`"250ms"`)},
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	// In a tool: data, err := os.ReadFile(filepath.Join(dir, "payments.hfc"))
	rec, err := cache.Decode(data)
	if errors.Is(err, cache.ErrCorrupt) {
		fmt.Println("corrupt:", err)
		return
	}
	fmt.Println(rec.Namespace, rec.Revision, rec.ConfirmedAt.UTC().Format(time.RFC3339), string(rec.Values["timeout"]))
	// Output: payments 42 2025-01-02T03:04:05Z "250ms"
}
