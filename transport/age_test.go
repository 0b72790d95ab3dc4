package transport

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"testing"

	"github.com/holdfast-dev/holdfast/internal/wire"
)

// The age of relayed data (docs/PROTOCOL.md, "Age of relayed data"): what
// a client takes from the headers and bodies of a server's replies.

func TestParseAge(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want int64
	}{
		{"", 0},
		{"0", 0},
		{"1500", 1500},
		{" 42\t", 42},
		{"+5", 5},
		{"1.9", 1},      // a fraction is cut
		{"2.5e3", 2500}, // an exponent is read
		{"-0", 0},
		// Fresher than the server's upstream said: never.
		{"-1", 0},
		{"-1e400", 0},
		{"-9223372036854775809", 0},
		// Absurd: very old, never new.
		{"315360000000", maxAgeMillis},
		{"315360000001", maxAgeMillis},
		{"9223372036854775808", maxAgeMillis},
		{"1e400", maxAgeMillis},
		// Not a number says nothing.
		{"abc", 0},
		{"12abc", 0},
		{"Inf", 0},
		{"NaN", 0},
		{"0x10", 0},
		{"--1", 0},
		{"1e", 0},
		{`"12"`, 0},
		{"true", 0},
		{"null", 0},
	} {
		if got := parseAge(tc.in); got != tc.want {
			t.Errorf("parseAge(%q) = %d; want %d", tc.in, got, tc.want)
		}
	}
}

func TestUnconfirmedFlag(t *testing.T) {
	for _, tc := range []struct {
		json string
		want bool
	}{
		{"", false}, {"null", false}, {"false", false}, {"true", true},
		// Garbled: not taken for a confirmation.
		{`"yes"`, true}, {`"false"`, true}, {"1", true}, {"0", true}, {"{}", true},
	} {
		if got := unconfirmedJSON(json.RawMessage(tc.json)); got != tc.want {
			t.Errorf("unconfirmedJSON(%s) = %v; want %v", tc.json, got, tc.want)
		}
	}
	for _, tc := range []struct {
		values []string
		want   bool
	}{
		{nil, false}, {[]string{""}, false}, {[]string{"false"}, false}, {[]string{" FALSE "}, false},
		{[]string{"true"}, true}, {[]string{"True"}, true}, {[]string{"1"}, true}, {[]string{"garbage"}, true},
		{[]string{"false", "true"}, true},
	} {
		h := http.Header{}
		for _, v := range tc.values {
			h.Add(HeaderUnconfirmed, v)
		}
		if got := unconfirmedHeader(h); got != tc.want {
			t.Errorf("unconfirmedHeader(%q) = %v; want %v", tc.values, got, tc.want)
		}
	}
}

// snapshotReply serves one snapshot reply: status, age headers, body.
func snapshotReply(t *testing.T, status int, age, unconfirmed, body string) *HTTPSource {
	t.Helper()
	srv := newServer(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set(HeaderStoreID, "store-1")
		w.Header().Set(HeaderRevision, "41")
		w.Header().Set(HeaderCursor, "97")
		if age != "" {
			w.Header().Set(HeaderAge, age)
		}
		if unconfirmed != "" {
			w.Header().Set(HeaderUnconfirmed, unconfirmed)
		}
		if status == http.StatusNotModified {
			w.WriteHeader(status)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		_, _ = w.Write([]byte(body))
	})
	return newSource(t, srv.URL)
}

// A snapshot's age: a 304's from its headers (the *Snapshot returned with
// ErrNotModified carries it), a 200's from its body, the headers as a
// fallback; when both say, the staler wins. A bad value fails nothing.
func TestSnapshotAge(t *testing.T) {
	leakCheck(t)
	const fields = `"ns":"payments.prod","store_id":"store-1","revision":41,"cursor":97,"values":{"k":1}`
	for _, tc := range []struct {
		name            string
		status          int
		age, unconf     string // headers
		body            string // the members after fields
		wantAge         int64
		wantUnconfirmed bool
	}{
		{name: "origin", status: 200},
		{name: "body", status: 200, body: `,"age_ms":1500,"unconfirmed":true`, wantAge: 1500, wantUnconfirmed: true},
		{name: "headers only", status: 200, age: "2500", unconf: "true", wantAge: 2500, wantUnconfirmed: true},
		{name: "header older", status: 200, age: "9000", body: `,"age_ms":1500`, wantAge: 9000},
		{name: "body older", status: 200, age: "100", unconf: "false", body: `,"age_ms":1500,"unconfirmed":true`, wantAge: 1500, wantUnconfirmed: true},
		{name: "negative", status: 200, age: "-5000", body: `,"age_ms":-7000`},
		{name: "not numbers", status: 200, age: "soon", body: `,"age_ms":"12","unconfirmed":"maybe"`, wantUnconfirmed: true},
		{name: "absurd", status: 200, body: `,"age_ms":1e30`, wantAge: maxAgeMillis},
		{name: "past int64", status: 200, body: `,"age_ms":99999999999999999999999`, wantAge: maxAgeMillis},
		{name: "fraction", status: 200, body: `,"age_ms":12.75`, wantAge: 12},
		{name: "304 origin", status: 304},
		{name: "304", status: 304, age: "60000", unconf: "true", wantAge: 60000, wantUnconfirmed: true},
		{name: "304 bad", status: 304, age: "1.2.3", unconf: "false"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := snapshotReply(t, tc.status, tc.age, tc.unconf, "{"+fields+tc.body+"}")
			snap, err := s.Snapshot(context.Background(), SnapshotRequest{Namespace: testNS, KnownStoreID: "store-1", KnownRevision: 41})
			if tc.status == http.StatusNotModified && !errors.Is(err, ErrNotModified) || tc.status == http.StatusOK && err != nil {
				t.Fatalf("Snapshot = %+v, %v", snap, err)
			}
			if snap.AgeMillis != tc.wantAge || snap.Unconfirmed != tc.wantUnconfirmed {
				t.Errorf("age %d ms, unconfirmed %v; want %d, %v", snap.AgeMillis, snap.Unconfirmed, tc.wantAge, tc.wantUnconfirmed)
			}
		})
	}
}

// A watch's progress events carry their age, over SSE from the event
// (the reply's headers are the state at the stream's open, not of later
// events), over long-poll from the reply (its body, its headers as a
// fallback); changes carry none.
func TestWatchProgressAge(t *testing.T) {
	leakCheck(t)
	t.Run("sse", func(t *testing.T) {
		srv := newServer(t, func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set(HeaderAge, "99999")
			c := openSSE(t, w)
			c.send(EventChange, 11, change(11, 10, map[string]string{"a": "1"}))
			p := progress(11, 12)
			p.AgeMillis, p.Unconfirmed = 4000, true
			c.send(EventProgress, 12, p)
			c.send(EventProgress, 13, progress(11, 13))
			c.send(EventProgress, 14, `{"ns":"payments.prod","store_id":"store-1","revision":11,"cursor":14,"age_ms":-3,"unconfirmed":"?"}`)
			<-r.Context().Done()
		})
		var got []Event
		err := newSource(t, srv.URL).Watch(context.Background(), WatchRequest{Namespace: testNS, Since: 10}, collect(4, &got))
		if !errors.Is(err, errEnough) {
			t.Fatalf("Watch = %v", err)
		}
		want := []struct {
			age         int64
			unconfirmed bool
		}{{4000, true}, {0, false}, {0, true}}
		for i, w := range want {
			p := got[i+1].Progress
			if p == nil || p.AgeMillis != w.age || p.Unconfirmed != w.unconfirmed {
				t.Errorf("progress %d = %+v; want age %d ms, unconfirmed %v", i, p, w.age, w.unconfirmed)
			}
		}
	})
	t.Run("long-poll", func(t *testing.T) {
		srv := newServer(t, func(w http.ResponseWriter, r *http.Request) {
			switch r.URL.Query().Get("since") {
			case "10":
				writeJSON(t, w, http.StatusOK, EventsResponse{StoreID: "store-1", Cursor: 15, Revision: 11,
					Changes: []ChangeSet{change(11, 10, map[string]string{"a": "1"})}, AgeMillis: 7000, Unconfirmed: true})
			case "15":
				w.Header().Set(HeaderAge, "8000")
				w.Header().Set(HeaderUnconfirmed, "true")
				writeJSON(t, w, http.StatusOK, EventsResponse{StoreID: "store-1", Cursor: 16, Revision: 11, Changes: []ChangeSet{}})
			default:
				writeJSON(t, w, http.StatusOK, EventsResponse{StoreID: "store-1", Cursor: 17, Revision: 11, Changes: []ChangeSet{}})
			}
		})
		s := newSource(t, srv.URL, WithWatchMode(WatchLongPoll))
		var got []Event
		err := s.Watch(context.Background(), WatchRequest{Namespace: testNS, Since: 10}, collect(4, &got))
		if !errors.Is(err, errEnough) {
			t.Fatalf("Watch = %v", err)
		}
		if got[0].Change == nil {
			t.Fatalf("event 0 = %+v; want the change", got[0])
		}
		for i, w := range []struct {
			age         int64
			unconfirmed bool
		}{{7000, true}, {8000, true}, {0, false}} {
			p := got[i+1].Progress
			if p == nil || p.AgeMillis != w.age || p.Unconfirmed != w.unconfirmed {
				t.Errorf("progress %d = %+v; want age %d ms, unconfirmed %v", i, p, w.age, w.unconfirmed)
			}
		}
	})
}

// A stream's progress carries its age, over SSE and long-poll.
func TestWatchStreamProgressAge(t *testing.T) {
	leakCheck(t)
	req := StreamRequest{Namespaces: []WatchRequest{{Namespace: "a", Since: 5}, {Namespace: "b", Since: 5}}}
	for _, mode := range []WatchMode{WatchSSE, WatchLongPoll} {
		t.Run(mode.String(), func(t *testing.T) {
			srv := newServer(t, func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set(HeaderStoreID, "store-1")
				w.Header().Set(HeaderProtocol, "1")
				w.Header().Set(HeaderCapabilities, "stream")
				switch r.URL.Path {
				case PathStream:
					c := openSSE(t, w)
					c.send(EventProgress, 6, StreamProgress{StoreID: "store-1", Cursor: 6, AgeMillis: 3000, Unconfirmed: true})
					c.send(EventProgress, 7, StreamProgress{StoreID: "store-1", Cursor: 7})
					<-r.Context().Done()
				case PathStreamEvents:
					if strings.Contains(r.URL.RawQuery, "%3A5") { // the first poll: every ns at 5
						w.Header().Set(HeaderAge, "3000") // said by the headers alone
						w.Header().Set(HeaderUnconfirmed, "true")
						writeJSON(t, w, http.StatusOK, wire.StreamEventsResponse{StoreID: "store-1", Cursor: 6, Changes: []ChangeSet{}})
						return
					}
					writeJSON(t, w, http.StatusOK, wire.StreamEventsResponse{StoreID: "store-1", Cursor: 7, Changes: []ChangeSet{}})
				default:
					http.NotFound(w, r)
				}
			})
			s := newSource(t, srv.URL, WithWatchMode(mode))
			var got []*StreamProgress
			err := s.WatchStream(streamCtx(t), req, func(e StreamEvent) error {
				if e.Progress != nil {
					got = append(got, e.Progress)
				}
				if len(got) == 2 {
					return errEnough
				}
				return nil
			})
			if !errors.Is(err, errEnough) {
				t.Fatalf("WatchStream = %v", err)
			}
			if got[0].AgeMillis != 3000 || !got[0].Unconfirmed || got[1].AgeMillis != 0 || got[1].Unconfirmed {
				t.Errorf("progress %+v, %+v; want age 3000 ms unconfirmed, then 0 and confirmed", *got[0], *got[1])
			}
		})
	}
}
