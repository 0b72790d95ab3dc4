package wire

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
)

// plainAck is Ack as encoding/json encodes it without Ack.MarshalJSON:
// what appendAck must write, byte for byte, but for Extra.
type plainAck struct {
	ClientID  string `json:"client_id"`
	Namespace string `json:"ns"`
	Revision  int64  `json:"revision"`
	Status    string `json:"status"`
	Error     string `json:"error,omitempty"`
	Rollout   string `json:"rollout,omitempty"`
	SDK       string `json:"sdk_version,omitempty"`
}

// wantAck is the encoding of a that appendAck replaced: encoding/json's,
// with Extra's members after the known ones.
func wantAck(t *testing.T, a Ack) []byte {
	t.Helper()
	b, err := json.Marshal(plainAck{a.ClientID, a.Namespace, a.Revision, a.Status, a.Error, a.Rollout, a.SDKVersion})
	if err != nil {
		t.Fatal(err)
	}
	if a.Extra == "" {
		return b
	}
	return append(append(append(b[:len(b)-1], ','), a.Extra...), '}')
}

func checkAckEncoding(t *testing.T, a Ack) {
	t.Helper()
	if got, want := appendAck(nil, a), wantAck(t, a); !bytes.Equal(got, want) {
		t.Fatalf("appendAck(%+v) =\n%s\nwant\n%s", a, got, want)
	}
	ab := AckBatch{ClientID: a.ClientID + "-relay", Acks: []Ack{a, {Namespace: "b", Revision: 1, Status: AckApplied}}}
	want, err := json.Marshal(struct {
		ClientID string            `json:"client_id"`
		Acks     []json.RawMessage `json:"acks"`
	}{ab.ClientID, []json.RawMessage{wantAck(t, ab.Acks[0]), wantAck(t, ab.Acks[1])}})
	if err != nil {
		t.Fatal(err)
	}
	if got := AppendAckBatch(nil, ab); !bytes.Equal(got, want) {
		t.Fatalf("appendAckBatch =\n%s\nwant\n%s", got, want)
	}
	var back AckBatch
	if err := json.Unmarshal(AppendAckBatch(nil, ab), &back); err != nil {
		t.Fatalf("the batch does not decode: %v", err)
	}
}

func TestAckEncoding(t *testing.T) {
	for _, a := range []Ack{
		{},
		{ClientID: "checkout-7f9c", Namespace: "payments.prod", Revision: 4, Status: AckApplied},
		{ClientID: "c", Namespace: "n", Revision: -1, Status: AckRejected, Error: `bad "value" <script> & \ tab	nl
end`},
		{ClientID: "é\u2028\x00\xff", Namespace: "n", Revision: 9, Status: AckWouldReject, Rollout: "r-1", Error: "invalid \xc3"},
		{ClientID: "c", Namespace: "n", Revision: 2, Status: "later-status", Extra: `"stage":10,"x":{"a":[1,2]}`},
		{ClientID: "c", Namespace: "n", Revision: 3, Status: AckApplied, SDKVersion: "0.1.0"},
		{ClientID: "c", Namespace: "n", Revision: 3, Status: AckRejected, Error: "e", Rollout: "r-1", SDKVersion: "1.2.0-rc.1+b<5>", Extra: `"x":1`},
	} {
		checkAckEncoding(t, a)
	}
	if got := string(AppendAckBatch(nil, AckBatch{ClientID: "c"})); got != `{"client_id":"c","acks":null}` {
		t.Errorf("a batch without acks: %s", got)
	}
}

func FuzzAckEncoding(f *testing.F) {
	f.Add("checkout-7f9c", "payments.prod", int64(4), AckApplied, "", "", "0.1.0")
	f.Add("c<1>&", "n\"s", int64(-7), AckRejected, "why\n\t\\ \u2029", "r\xff", "")
	f.Fuzz(func(t *testing.T, client, ns string, rev int64, status, errMsg, rollout, sdk string) {
		checkAckEncoding(t, Ack{ClientID: client, Namespace: ns, Revision: rev, Status: status, Error: errMsg, Rollout: rollout, SDKVersion: sdk})
	})
}

// oldAck encodes as Ack.MarshalJSON did before appendAck: encoding/json
// for the ack, inside encoding/json for the batch.
type oldAck plainAck

func (a oldAck) MarshalJSON() ([]byte, error) { return json.Marshal(plainAck(a)) }

// relayedBatch is the most acks transport's HTTP source puts in one relayed
// batch.
const relayedBatch = 4096

// BenchmarkAckBatchEncoding: a relay's batch of 4096 forwarded acks,
// encoded the way it was (encoding/json, an ack's MarshalJSON inside the
// batch's) beside AppendAckBatch, in one run:
//
//	go test -run '^$' -bench AckBatchEncoding ./internal/wire/
func BenchmarkAckBatchEncoding(b *testing.B) {
	ab := AckBatch{ClientID: "relay-1"}
	old := struct {
		ClientID string   `json:"client_id"`
		Acks     []oldAck `json:"acks"`
	}{ClientID: "relay-1"}
	for i := range relayedBatch {
		a := Ack{ClientID: "scale-client-" + strings.Repeat("7", i%5) + "-000042", Namespace: "bench", Revision: 1234, Status: AckApplied}
		ab.Acks = append(ab.Acks, a)
		old.Acks = append(old.Acks, oldAck{a.ClientID, a.Namespace, a.Revision, a.Status, a.Error, a.Rollout, a.SDKVersion})
	}
	b.Run("encoding-json-before", func(b *testing.B) {
		b.ReportAllocs()
		for range b.N {
			if _, err := json.Marshal(old); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*relayedBatch), "ns/ack")
	})
	b.Run("AppendAckBatch", func(b *testing.B) {
		b.ReportAllocs()
		var buf []byte
		for range b.N {
			buf = AppendAckBatch(buf[:0], ab)
		}
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*relayedBatch), "ns/ack")
	})
}

func TestValidSDKVersion(t *testing.T) {
	for v, want := range map[string]bool{
		"": true, "0.1.0": true, "1.2.0-rc.1+build.5": true, "v0.0.0-20261206170000-0123456789ab": true,
		strings.Repeat("1", MaxSDKVersionBytes): true, strings.Repeat("1", MaxSDKVersionBytes+1): false,
		"0.1.0 (patched)": false, "0.1\n": false, `0.1"`: false, "0.1é": false, "-": false, ".1": false, "+b": false, "v1": true,
	} {
		if got := ValidSDKVersion(v); got != want {
			t.Errorf("ValidSDKVersion(%q) = %v, want %v", v, got, want)
		}
	}
}
