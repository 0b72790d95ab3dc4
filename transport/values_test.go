package transport

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"
)

func TestCountMembers(t *testing.T) {
	for obj, want := range map[string]int{
		`{}`: 0, ` { } `: 0, `{"a":1}`: 1, `{"a":{"b":1,"c":2},"d":[{"e":3}]}`: 2,
		`{"a:b":"c:d","e\"f:":"\\","g":"\\\":"}`: 3,
	} {
		if got := countMembers([]byte(obj), 10); got != want {
			t.Errorf("countMembers(%s) = %d, want %d", obj, got, want)
		}
	}
	if got := countMembers([]byte(`{"a":1,"b":2,"c":3}`), 1); got != 2 {
		t.Errorf("countMembers past a limit of 1 = %d, want 2 (it stops there)", got)
	}
}

// TestSnapshotTooManyKeys: a snapshot over WithMaxSnapshotKeys fails with
// ErrTooLarge naming the limit; one at the limit is accepted.
func TestSnapshotTooManyKeys(t *testing.T) {
	leakCheck(t)
	keys := 4
	srv := newServer(t, func(w http.ResponseWriter, r *http.Request) {
		var b strings.Builder
		for i := range keys {
			if i > 0 {
				b.WriteByte(',')
			}
			fmt.Fprintf(&b, `"k%d":{"nested":{"x":%d}}`, i, i)
		}
		fmt.Fprintf(w, `{"ns":"payments.prod","store_id":"s","revision":1,"cursor":1,"values":{%s}}`, b.String())
	})
	s := newSource(t, srv.URL, WithMaxSnapshotKeys(3))
	_, err := s.Snapshot(context.Background(), SnapshotRequest{Namespace: testNS})
	if !errors.Is(err, ErrTooLarge) || !strings.Contains(err.Error(), "more than 3 keys") || !strings.Contains(err.Error(), "WithMaxSnapshotKeys") {
		t.Fatalf("4 keys with a limit of 3: error = %v, want ErrTooLarge naming the limit", err)
	}
	keys = 3
	snap, err := s.Snapshot(context.Background(), SnapshotRequest{Namespace: testNS})
	if err != nil || len(valuesOf(t, snap)) != 3 {
		t.Fatalf("3 keys with a limit of 3: %v", err)
	}
}

func TestSnapshotValuesNotAnObject(t *testing.T) {
	for _, v := range []string{`[1]`, `"x"`, `1`} {
		_, err := decodeSnapshot([]byte(`{"ns":"payments.prod","store_id":"s","revision":1,"cursor":1,"values":`+v+`}`), testNS, 10)
		if !errors.Is(err, ErrMalformed) {
			t.Errorf("values %s: error = %v, want ErrMalformed", v, err)
		}
	}
	for _, v := range []string{`null`, ` {} `} {
		s, err := decodeSnapshot([]byte(`{"ns":"payments.prod","store_id":"s","revision":1,"cursor":1,"values":`+v+`}`), testNS, 10)
		if err != nil || len(valuesOf(t, s)) != 0 {
			t.Errorf("values %s: %v, want an empty namespace", v, err)
		}
	}
}

func TestIsStreamReset(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want bool
	}{
		{errors.New("stream error: stream ID 3; INTERNAL_ERROR; received from peer"), true},
		{fmt.Errorf("read: %w", errors.New("stream error: stream ID 15; CANCEL")), true},
		{errors.New("connection refused"), false},
		{nil, false},
	} {
		if got := isStreamReset(tc.err); got != tc.want {
			t.Errorf("isStreamReset(%v) = %v, want %v", tc.err, got, tc.want)
		}
	}
}
