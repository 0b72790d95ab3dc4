package dataplane

import (
	"encoding/json"
	"fmt"
	"reflect"
	"strings"
	"testing"

	"github.com/holdfast-dev/holdfast/internal/version"
	"github.com/holdfast-dev/holdfast/internal/wire"
	"github.com/holdfast-dev/holdfast/transport"
)

// parseAckBodyJSON is parseAckBody with encoding/json alone, as it was
// before ackDecoder: the baseline FuzzAckBody and the benchmarks hold it
// to.
func parseAckBodyJSON(data []byte, ownIDs bool) ([]transport.Ack, bool, error) {
	var body ackBody
	if err := unmarshal(data, &body); err != nil {
		return nil, false, err
	}
	return checkAckBody(body, ownIDs, false)
}

// ackBodySeeds are bodies clients send and bodies they should not:
// escapes, nesting, numbers at the int64 edges, unknown fields,
// duplicates, nulls, case, trailing data.
var ackBodySeeds = []string{
	// From the tests of the handlers.
	`{"client_id":"c1","ns":"app","revision":2,"status":"ack"}`,
	`{"client_id":"c2","ns":"app","revision":2,"status":"nack","error":"schema says no"}`,
	`{"client_id":"c3","ns":"app","revision":1,"status":"ack","extra":1}`,
	`{"client_id":`, `{"client_id":"c1","ns":"app","revision":2,"status":"maybe"}`,
	`{"client_id":"c","acks":[{"ns":"app","revision":1,"status":"ack"}]}`,
	`{"client_id":"c1","acks":[{"ns":"a","revision":1,"status":"ack"},{"ns":"b","revision":2,"status":"nack","error":"bad"},{"ns":"gone","revision":2,"status":"ack"},{"client_id":"other","ns":"b","revision":2,"status":"nack","error":"bad"}]}`,
	`{"client_id":"c2","acks":[{"ns":"a","revision":1,"status":"ack"},{"ns":"b","revision":1,"status":"maybe"}]}`,
	`{"client_id":"","acks":[{"ns":"a","revision":1,"status":"ack"}]}`,
	`{"client_id":"c2","acks":[{"ns":"a","revision":-1,"status":"ack"}]}`,
	`{"client_id":"c2","acks":[{"ns":"A!","revision":1,"status":"ack"}]}`,
	`{"client_id":"c2","acks":[1]}`, `{"client_id":"c3","acks":[]}`,
	`{"client_id":"c1","acks":[{"ns":"app","revision":1,"status":"ack"},{"ns":"app","revision":2,"status":"would_nack","error":"strict","rollout":"r1"}]}`,
	`{"client_id":"c","ns":"..","status":"ack"}`, `{"client_id":"c\u0000","ns":"a","status":"ack"}`,
	`{"revision":1e99}`, `nul`, `{"client_id":"c","ns":"a","status":"ack","x":[]}`,
	// As transport sends them: each ack's own client_id empty.
	`{"client_id":"host-1","acks":[{"client_id":"","ns":"app","revision":7,"status":"ack"},{"client_id":"","ns":"db.main","revision":7,"status":"nack","error":"port: want a number"}]}`,
	// Escapes and UTF-8.
	`{"client_id":"c\u0031","ns":"a","revision":1,"status":"ack"}`,
	`{"client_id":"c","ns":"a","revision":1,"status":"nack","error":"bad \"x\": \u003cy\u003e \ud83d\ude00 \ud800 \udc00x \\ \/ \b\f\n\r\t"}`,
	"{\"client_id\":\"c\xff\",\"ns\":\"a\",\"revision\":1,\"status\":\"ack\"}",
	"{\"client_id\":\"c\xc3\xa9\",\"ns\":\"a\",\"revision\":1,\"status\":\"nack\",\"error\":\"\xe2\x82\xac \xed\xa0\x80\"}",
	"{\"client_id\":\"c\x01\",\"ns\":\"a\",\"status\":\"ack\"}", `{"client_id":"c\x","ns":"a"}`, `{"client_id":"c\u12","ns":"a"}`,
	`{"n\u0073":"a","client_id":"c","status":"ack"}`, "{\"\xc5\xbftatus\":\"ack\",\"client_id\":\"c\",\"ns\":\"a\"}",
	"{\"client_id\":\"c\",\"ns\":\"a\",\"status\":\"ack\",\"\xff\":1}",
	// Case-insensitive keys, as encoding/json matches them.
	`{"Client_ID":"c","NS":"a","Revision":3,"STATUS":"ack","Error":"e"}`,
	`{"client_id":"c","ACKS":[{"Ns":"a","revision":1,"status":"ack","Acks":[1]}]}`,
	// Numbers at the int64 edges and past them.
	`{"client_id":"c","ns":"a","revision":9223372036854775807,"status":"ack"}`,
	`{"client_id":"c","ns":"a","revision":9223372036854775808,"status":"ack"}`,
	`{"client_id":"c","ns":"a","revision":-9223372036854775808,"status":"ack"}`,
	`{"client_id":"c","ns":"a","revision":-9223372036854775809,"status":"ack"}`,
	`{"client_id":"c","ns":"a","revision":18446744073709551616,"status":"ack"}`,
	`{"client_id":"c","ns":"a","revision":99999999999999999999,"status":"ack"}`,
	`{"client_id":"c","ns":"a","revision":-0,"status":"ack"}`, `{"client_id":"c","ns":"a","revision":0,"status":"ack"}`,
	`{"client_id":"c","ns":"a","revision":01,"status":"ack"}`, `{"client_id":"c","ns":"a","revision":1.0,"status":"ack"}`,
	`{"client_id":"c","ns":"a","revision":1e3,"status":"ack"}`, `{"client_id":"c","ns":"a","revision":1E+3,"status":"ack"}`,
	`{"client_id":"c","ns":"a","revision":-,"status":"ack"}`, `{"client_id":"c","ns":"a","revision":+1,"status":"ack"}`,
	`{"client_id":"c","ns":"a","revision":"1","status":"ack"}`, `{"client_id":"c","ns":"a","revision":true,"status":"ack"}`,
	// Unknown fields, any value, nested.
	`{"client_id":"c","x":{"a":[1,{"b":null},"s\"",true,false,-1.5e-3]},"ns":"a","status":"ack","y":[[[]]],"z":{}}`,
	`{"client_id":"c","acks":[{"ns":"a","status":"ack","stage":{"n":[1,2,{"x":"\ud800"}]}}],"w":"x"}`,
	`{"client_id":"c","x":[1,],"ns":"a","status":"ack"}`, `{"client_id":"c","x":{"a"},"ns":"a","status":"ack"}`,
	`{"client_id":"c","x":tru,"ns":"a","status":"ack"}`, `{"client_id":"c","x":nulls,"ns":"a","status":"ack"}`,
	// Duplicates and nulls.
	`{"client_id":"c","client_id":"d","ns":"a","ns":"b","status":"ack","revision":1,"revision":2}`,
	`{"client_id":"c","ns":"a","ns":null,"status":"ack","revision":1,"revision":null,"error":null}`,
	`{"client_id":"c","acks":[{"ns":"a","status":"ack"}],"acks":[{"revision":3}]}`,
	`{"client_id":"c","acks":[{"ns":"a","status":"ack"},{"ns":"b","status":"ack"}],"acks":[{"revision":3}],"acks":[{},{}]}`,
	`{"client_id":"c","acks":[{"ns":"a","status":"ack"}],"acks":null}`,
	`{"client_id":"c","acks":null,"acks":[{"ns":"a","status":"ack"}]}`,
	`{"client_id":"c","acks":[null,{"ns":"a","status":"ack"}]}`, `{"client_id":"c","acks":[{"ns":"a","status":"ack"},null]}`,
	`{"client_id":null,"ns":"a","status":"ack"}`, `{"client_id":"c","acks":{}}`, `{"client_id":"c","acks":"x"}`,
	`{"client_id":"c","acks":[{"ns":"a","status":"ack"}]`, `{"client_id":"c","acks":[{"ns":"a","status":"ack"},]}`,
	`{"client_id":1,"ns":"a","status":"ack"}`, `{"client_id":"c","ns":["a"],"status":"ack"}`, `{"client_id":"c","ns":"a","status":{}}`,
	// White space, and what is not one object.
	" \t\r\n{ \"client_id\" : \"c\" ,\n\"acks\" : [ { \"ns\" : \"a\" , \"revision\" : 1 , \"status\" : \"ack\" } ] } \n",
	`{"client_id":"c","ns":"a","status":"ack"} x`, `{"client_id":"c","ns":"a","status":"ack"}{}`,
	`{"client_id":"c","ns":"a","status":"ack"}}`, `{"client_id":"c","ns":"a","status":"ack",}`,
	`{"client_id" "c"}`, `{client_id:"c"}`, `{'client_id':'c'}`, "\ufeff{\"client_id\":\"c\",\"ns\":\"a\",\"status\":\"ack\"}",
	"", " ", "\v", `null`, `{}`, `[]`, `"x"`, `1`, `true`, `{"acks":[]}`, "{\"client_id\":\"c\",\"ns\":\"a\",\"status\":\"ack\"}\x00",
	// Rollout reports: the id, its case, its length, a would-nack.
	`{"client_id":"c","ns":"a","revision":3,"status":"ack","rollout":"r-0123456789ab"}`,
	`{"client_id":"c","acks":[{"ns":"a","revision":3,"status":"would_nack","error":"x","Rollout":"r1"},{"ns":"a","revision":3,"status":"nack","ROLLOUT":null}]}`,
	`{"client_id":"c","ns":"a","revision":3,"status":"ack","rollout":1}`, `{"client_id":"c","ns":"a","status":"would_nack","rollout":"r\u0031"}`,
	`{"client_id":"c","ns":"a","status":"ack","rollout":"` + strings.Repeat("r", 64) + `"}`, `{"client_id":"c","ns":"a","status":"ack","rollout":"` + strings.Repeat("r", 65) + `"}`,
	// SDK versions: this one's, another, its case, its form, its length.
	`{"client_id":"c","ns":"a","revision":3,"status":"ack","sdk_version":"0.1.0"}`,
	`{"client_id":"c","acks":[{"ns":"a","revision":3,"status":"ack","sdk_version":"1.2.0-rc.1+b.5"},{"ns":"b","revision":3,"status":"nack","error":"x","SDK_Version":"0.1.0"}]}`,
	`{"client_id":"c","ns":"a","status":"ack","sdk_version":"0.1 (patched)"}`, `{"client_id":"c","ns":"a","status":"ack","sdk_version":1}`,
	`{"client_id":"c","ns":"a","status":"ack","sdk_version":null}`, `{"client_id":"c","ns":"a","status":"ack","sdk_version":"0.1"}`,
	`{"client_id":"c","ns":"a","status":"ack","sdk_version":"` + strings.Repeat("1", 64) + `"}`, `{"client_id":"c","ns":"a","status":"ack","sdk_version":"` + strings.Repeat("1", 65) + `"}`,
	// Namespaces at the edges of their pattern, and lengths.
	`{"client_id":"c","ns":"a.b_c-d9","status":"ack"}`, `{"client_id":"c","ns":"-a","status":"ack"}`, `{"client_id":"c","ns":".","status":"ack"}`,
	`{"client_id":"c","ns":"` + strings.Repeat("a", 128) + `","status":"ack"}`, `{"client_id":"c","ns":"` + strings.Repeat("a", 129) + `","status":"ack"}`,
	`{"client_id":"` + strings.Repeat("c", 256) + `","ns":"a","status":"ack"}`, `{"client_id":"` + strings.Repeat("c", 257) + `","ns":"a","status":"ack"}`,
	`{"client_id":"c","ns":"a","status":"nack","error":"` + strings.Repeat("e", maxAckErrorLen+1) + `"}`,
	// Nesting past the 64 levels SkipValue keeps on its stack (its limit,
	// encoding/json's 10000, is TestAckBodyNestingLimit's: too big a seed
	// slows the fuzzer down).
	`{"client_id":"c","acks":[{"ns":"a","status":"ack","x":` + strings.Repeat("[", 70) + strings.Repeat("]", 70) + `}]}`,
	`{"client_id":"c","ns":"a","status":"ack","x":` + strings.Repeat(`{"a":`, 70) + "1" + strings.Repeat("}", 69) + `}`,
}

// FuzzAckBody holds ackDecoder to encoding/json: on every input the
// decoder reads what json.Unmarshal reads, field for field, or leaves the
// input to it; and parseAckBody, with either decoder, returns what
// encoding/json's path returns: the same acks or the same error.
func FuzzAckBody(f *testing.F) {
	for _, seed := range ackBodySeeds {
		f.Add([]byte(seed))
	}
	f.Fuzz(agreesWithJSON)
}

// FuzzAckBodyFields is FuzzAckBody for inputs shaped as clients send
// them: its fields put verbatim into a single ack and a batch of two, so
// that most inputs are ackDecoder's to read rather than left to
// encoding/json (few of FuzzAckBody's are).
func FuzzAckBodyFields(f *testing.F) {
	f.Add("host-1", "app", "ack", "", "7", "stage", "1", "")
	f.Add("c", "db.main", "nack", "port: bad", "-9223372036854775808", "Revision", `{"a":[1,"x"]}`, "\n")
	f.Add(`c\u0031`, "a", "ack", `\"q\" \ud800`, "1e3", "acks", "null", " \t")
	f.Add("cé", "A", "maybe", "\xff", "9223372036854775808", "ns", `"b"`, "\r")
	f.Add("c", "a", "would_nack", "strict", "3", "rollout", `"r-1"`, "")
	f.Add("c", "a", "ack", "", "3", "sdk_version", `"0.1.0"`, "")
	f.Fuzz(func(t *testing.T, clientID, ns, status, errText, rev, key, value, ws string) {
		member := func(k, v string) string { return ws + `"` + k + `"` + ws + ":" + ws + v + ws }
		one := "{" + member("ns", `"`+ns+`"`) + "," + member("revision", rev) + "," + member("status", `"`+status+`"`) +
			"," + member("error", `"`+errText+`"`) + "," + member(key, value) + "}"
		agreesWithJSON(t, []byte(`{"client_id":"`+clientID+`","acks":[`+one+","+one+"]}"))
		agreesWithJSON(t, []byte("{"+member("client_id", `"`+clientID+`"`)+","+one[1:]))
	})
}

// TestAckBodyNestingLimit: an unknown field nested as deep as
// encoding/json takes (10000 levels) is skipped, one level deeper refused,
// in an ack and at the top.
func TestAckBodyNestingLimit(t *testing.T) {
	for _, tc := range []struct {
		body string
		ok   bool
	}{
		{`{"client_id":"c","acks":[{"ns":"a","status":"ack","x":` + strings.Repeat("[", 9997) + strings.Repeat("]", 9997) + `}]}`, true},
		{`{"client_id":"c","acks":[{"ns":"a","status":"ack","x":` + strings.Repeat("[", 9998) + strings.Repeat("]", 9998) + `}]}`, false},
		{`{"client_id":"c","ns":"a","status":"ack","x":` + strings.Repeat(`{"a":`, 9999) + "1" + strings.Repeat("}", 9999) + `}`, true},
		{`{"client_id":"c","ns":"a","status":"ack","x":` + strings.Repeat(`{"a":`, 10000) + "1" + strings.Repeat("}", 10000) + `}`, false},
	} {
		if (json.Unmarshal([]byte(tc.body), &ackBody{}) == nil) != tc.ok {
			t.Fatalf("encoding/json's limit is not 10000 levels any more")
		}
		var body ackBody
		if (&ackDecoder{}).decode([]byte(tc.body), &body) != tc.ok {
			t.Errorf("decode of %d bytes nested at the limit (ok %v): %v", len(tc.body), tc.ok, !tc.ok)
		}
		agreesWithJSON(t, []byte(tc.body))
	}
}

// agreesWithJSON is FuzzAckBody's test of one input.
func agreesWithJSON(t *testing.T, data []byte) {
	t.Helper()
	var want ackBody
	jsonErr := json.Unmarshal(data, &want)
	var got ackBody
	if (&ackDecoder{}).decode(data, &got) {
		if jsonErr != nil {
			t.Fatalf("decoded %.300q, which encoding/json refuses: %v", data, jsonErr)
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("decoded %.300q as\n%#v\nencoding/json reads\n%#v", data, got, want)
		}
	}
	for _, ownIDs := range []bool{false, true} {
		wantAcks, wantBatch, wantErr := parseAckBodyJSON(data, ownIDs)
		interned := &ackDecoder{intern: true, reuse: true}
		for round := range 2 { // the second finds its strings interned
			for name, parse := range map[string]func([]byte, bool, bool) ([]transport.Ack, bool, error){
				"parseAckBody": parseAckBody, "stream's": interned.parse,
			} {
				acks, batch, err := parse(data, ownIDs, false)
				if fmt.Sprint(err) != fmt.Sprint(wantErr) || batch != wantBatch || !reflect.DeepEqual(acks, wantAcks) {
					t.Fatalf("%s (ownIDs %v, round %d) of %.300q: %v, %v, %#v\nencoding/json: %v, %v, %#v",
						name, ownIDs, round, data, err, batch, acks, wantErr, wantBatch, wantAcks)
				}
			}
		}
	}
	// A relay's: what parseRelayedAckBody (encoding/json alone, keeping
	// unknown fields) returns.
	for _, ownIDs := range []bool{false, true} {
		wantAcks, wantBatch, wantErr := parseRelayedAckBody(data, ownIDs)
		interned := &ackDecoder{intern: true, reuse: true}
		for round := range 2 {
			for name, parse := range map[string]func([]byte, bool, bool) ([]transport.Ack, bool, error){
				"parseAckBody": parseAckBody, "stream's": interned.parse,
			} {
				acks, batch, err := parse(data, ownIDs, true)
				if fmt.Sprint(err) != fmt.Sprint(wantErr) || batch != wantBatch || !reflect.DeepEqual(acks, wantAcks) {
					t.Fatalf("relay's %s (ownIDs %v, round %d) of %.300q: %v, %v, %#v\nencoding/json: %v, %v, %#v",
						name, ownIDs, round, data, err, batch, acks, wantErr, wantBatch, wantAcks)
				}
			}
		}
	}
	// checkAck's isNamespace is transport.ValidateNamespace's test.
	names := []string{string(data), want.Namespace}
	for _, a := range want.Acks {
		names = append(names, a.Namespace)
	}
	for _, ns := range names {
		if isNamespace(ns) != (transport.ValidateNamespace(ns) == nil) {
			t.Fatalf("isNamespace(%.300q) = %v; transport.ValidateNamespace: %v", ns, isNamespace(ns), transport.ValidateNamespace(ns))
		}
	}
}

// TestAckDecoderReadsWhatClientsSend: the bodies clients send, and the
// variants a later client may send (unknown fields, other key case,
// nulls, white space), do not fall back to encoding/json.
func TestAckDecoderReadsWhatClientsSend(t *testing.T) {
	batch, err := json.Marshal(wire.AckBatch{ClientID: "host-1", Acks: []transport.Ack{
		{Namespace: "app", Revision: 7, Status: transport.AckApplied},
		{Namespace: "db.main", Revision: 7, Status: transport.AckRejected, Error: "port: want a number, got 12.5 (ünïcode ok)", SDKVersion: version.SDK},
	}})
	if err != nil {
		t.Fatal(err)
	}
	single, err := json.Marshal(transport.Ack{ClientID: "host-1", Namespace: "app", Revision: 9223372036854775807, Status: transport.AckApplied})
	if err != nil {
		t.Fatal(err)
	}
	for _, body := range []string{
		string(batch), string(single),
		`{"client_id":"c","acks":[{"ns":"a","revision":1,"status":"ack","stage":{"n":[1,2.5e3,"x\"y",null,true]}}],"v":2}`,
		`{"Client_ID":"c","NS":"a","Revision":-3,"STATUS":"ack","error":null,"ns":null}`,
		" {\"client_id\" : \"c\",\n\t\"acks\":[null, {}]}\r\n", `{"client_id":"c","acks":[]}`, `{}`,
	} {
		var got, want ackBody
		if !(&ackDecoder{}).decode([]byte(body), &got) {
			t.Errorf("%s: left to encoding/json", body)
			continue
		}
		if err := json.Unmarshal([]byte(body), &want); err != nil || !reflect.DeepEqual(got, want) {
			t.Errorf("%s: decoded %#v; encoding/json %#v, %v", body, got, want, err)
		}
	}
}

// TestAckStreamDecoderAllocatesPerBatch: a stream's decoder allocates
// nothing once it saw the client's namespaces, and one slice per batch
// when its acks may be kept (a sink); not a string per ack.
func TestAckStreamDecoderAllocatesPerBatch(t *testing.T) {
	var buf strings.Builder
	buf.WriteString(`{"client_id":"host-1","acks":[`)
	for i := range 10 {
		if i > 0 {
			buf.WriteByte(',')
		}
		// Every other one with this SDK's version, as clients send it.
		sdk := ""
		if i%2 == 0 {
			sdk = `,"sdk_version":"` + version.SDK + `"`
		}
		fmt.Fprintf(&buf, `{"client_id":"","ns":"ns-%d","revision":%d,"status":"ack"%s}`, i, 100+i, sdk)
	}
	buf.WriteString(`]}`)
	line := []byte(buf.String())
	for _, tc := range []struct {
		dec  ackDecoder
		want float64
	}{{ackDecoder{intern: true, reuse: true}, 0}, {ackDecoder{intern: true}, 1}} {
		dec := tc.dec
		if _, _, err := dec.parse(line, false, false); err != nil {
			t.Fatal(err)
		}
		if n := testing.AllocsPerRun(100, func() {
			if acks, _, err := dec.parse(line, false, false); err != nil || len(acks) != 10 || acks[9].Revision != 109 || acks[8].SDKVersion != version.SDK {
				t.Fatal(acks, err)
			}
		}); n > tc.want {
			t.Errorf("reuse %v: %v allocations per batch of 10 acks, want %v", tc.dec.reuse, n, tc.want)
		}
	}
}
