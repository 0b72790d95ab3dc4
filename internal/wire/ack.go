package wire

import (
	"bytes"
	"context"
	"encoding/json"
	"maps"
	"slices"
	"strconv"
)

// Ack statuses.
const (
	AckApplied  = "ack"
	AckRejected = "nack"
	// AckWouldReject is a prevalidation's report (docs/PROTOCOL.md,
	// "Staged rollouts"): the client's checks reject the staged change of
	// rollout Ack.Rollout, carried by Ack.Revision, whether or not the
	// client is in the stage; nothing was applied or rejected by it.
	AckWouldReject = "would_nack"
)

// MaxAckErrorBytes bounds Ack.Error: a client cuts a longer error, and the
// server keeps no more.
const MaxAckErrorBytes = 4 << 10

// Ack is the body of POST /sdk/ack: what one client applied or rejected.
type Ack struct {
	ClientID  string `json:"client_id"`
	Namespace string `json:"ns"`
	Revision  int64  `json:"revision"`
	Status    string `json:"status"` // AckApplied, AckRejected or AckWouldReject (a relay forwards any)
	Error     string `json:"error,omitempty"`
	// Rollout names the staged rollout the report is about: with
	// AckApplied or AckRejected, the client is in its stage, and applied
	// (serves) or rejected the staged change; with AckWouldReject, the
	// rollout whose change the client's checks reject. Empty otherwise.
	Rollout string `json:"rollout,omitempty"`
	// SDKVersion is the version of the client's SDK (config.Version,
	// "0.1.0"), which the server keeps with the client's reports (change
	// management compares it); empty when the client did not say (an SDK
	// before it, a hand-made client). A relay forwards it as it came. At
	// most MaxSDKVersionBytes of [0-9A-Za-z.+-] (ValidSDKVersion).
	SDKVersion string `json:"sdk_version,omitempty"`
	// Extra holds the fields of a client's report that this version does
	// not know, as the members of a JSON object (`"stage":10,"x":true`),
	// kept by a relay that forwards it: they are encoded back as they
	// came. Empty for an ack this version made.
	Extra string `json:"-"`
	// Identity is the name of the token a client's report came with, set
	// by the server (or relay) that took it: a rollout counts the nacks
	// of one identity once, whatever client ids they name. A relay
	// forwards it with its clients' reports; a server takes it from the
	// wire only from a relay-scope identity, sets it to the sender's
	// token name otherwise, and clears it without tokens. A client never
	// sends it.
	Identity string `json:"identity,omitempty"`
}

// MarshalJSON encodes the ack with its Extra fields after the known ones.
func (a Ack) MarshalJSON() ([]byte, error) { return appendAck(nil, a), nil }

// appendAck appends a's JSON (as MarshalJSON encodes it) to b. It writes
// the bytes itself: a relay encodes one ack per client per publish, and
// encoding/json would marshal each one twice (the ack, then its
// MarshalJSON's output checked again).
func appendAck(b []byte, a Ack) []byte {
	b = append(b, `{"client_id":`...)
	b = appendJSONString(b, a.ClientID)
	b = append(b, `,"ns":`...)
	b = appendJSONString(b, a.Namespace)
	b = append(b, `,"revision":`...)
	b = strconv.AppendInt(b, a.Revision, 10)
	b = append(b, `,"status":`...)
	b = appendJSONString(b, a.Status)
	if a.Error != "" {
		b = append(b, `,"error":`...)
		b = appendJSONString(b, a.Error)
	}
	if a.Rollout != "" {
		b = append(b, `,"rollout":`...)
		b = appendJSONString(b, a.Rollout)
	}
	if a.SDKVersion != "" {
		b = append(b, `,"sdk_version":`...)
		b = appendJSONString(b, a.SDKVersion)
	}
	if a.Identity != "" {
		b = append(b, `,"identity":`...)
		b = appendJSONString(b, a.Identity)
	}
	if a.Extra != "" {
		b = append(append(b, ','), a.Extra...)
	}
	return append(b, '}')
}

// AppendAckBatch appends ab's JSON to b, as json.Marshal(ab) would.
func AppendAckBatch(b []byte, ab AckBatch) []byte {
	b = append(b, `{"client_id":`...)
	b = appendJSONString(b, ab.ClientID)
	if ab.Acks == nil {
		return append(b, `,"acks":null}`...)
	}
	b = append(b, `,"acks":[`...)
	for i, a := range ab.Acks {
		if i > 0 {
			b = append(b, ',')
		}
		b = appendAck(b, a)
	}
	return append(b, "]}"...)
}

// appendJSONString appends s quoted as encoding/json quotes it: as it is
// when every byte is printable ASCII but '"', '\\', '<', '>' and '&' (an id,
// a namespace, a status), through encoding/json otherwise.
func appendJSONString(b []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c >= 0x7f || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
			q, _ := json.Marshal(s)
			return append(b, q...)
		}
	}
	return append(append(append(b, '"'), s...), '"')
}

// AckBatch is the body of a batched POST /sdk/ack (capability
// transport.CapabilityAckBatch): the acks of one client, across its
// namespaces; with transport.CapabilityAckRelay, the acks of a relay's
// clients, each with its own client id. It is also one line of an ack
// stream (transport.CapabilityAckStream).
type AckBatch struct {
	ClientID string `json:"client_id"`
	Acks     []Ack  `json:"acks"`
}

// RelayAcker is implemented by sources that can forward the acks of many
// clients at once, each ack with its own ClientID (a relay's upstream:
// transport.HTTPSource and transport.FailoverSource).
type RelayAcker interface {
	// AckRelayed reports acks on behalf of their clients; relayID names
	// the relay that forwards them.
	AckRelayed(ctx context.Context, relayID string, acks []Ack) error
}

// MaxSDKVersionBytes bounds Ack.SDKVersion.
const MaxSDKVersionBytes = 64

// ValidSDKVersion reports whether v may be an ack's SDKVersion: empty (not
// said), or 1..MaxSDKVersionBytes of the letters, digits, '.', '+' and
// '-' of a semantic version ("0.1.0", "1.2.0-rc.1+build.5"), beginning
// with a letter or a digit.
func ValidSDKVersion(v string) bool {
	if len(v) > MaxSDKVersionBytes {
		return false
	}
	for i := 0; i < len(v); i++ {
		c := v[i]
		alnum := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
		if !alnum && (i == 0 || c != '.' && c != '+' && c != '-') {
			return false
		}
	}
	return true
}

// TruncateAckError cuts an ack's error to MaxAckErrorBytes, at a rune's
// start: what a client sends, and a relay forwards, of an error.
func TruncateAckError(s string) string { return TruncateUTF8(s, MaxAckErrorBytes) }

// knownAckField reports whether k names a field of Ack on the
// wire.
func knownAckField(k string) bool {
	switch k {
	case "client_id", "ns", "revision", "status", "error", "rollout", "sdk_version", "identity":
		return true
	}
	return false
}

// AckExtra returns the members of one ack object that Ack does
// not know, as Ack.Extra keeps them ("" when none), for a relay that
// forwards it; skip names more members to leave out.
func AckExtra(obj []byte, skip ...string) string {
	var all map[string]json.RawMessage
	if json.Unmarshal(obj, &all) != nil {
		return ""
	}
	var b []byte
	for _, k := range slices.Sorted(maps.Keys(all)) {
		if knownAckField(k) || slices.Contains(skip, k) {
			continue
		}
		if len(b) > 0 {
			b = append(b, ',')
		}
		q, _ := json.Marshal(k) // a string always marshals
		b = append(append(b, q...), ':')
		// Compact: a value laid out over lines must not break the line
		// of an ack stream that carries it on.
		var v bytes.Buffer
		_ = json.Compact(&v, all[k]) // valid: Unmarshal took it
		b = append(b, v.Bytes()...)
	}
	return string(b)
}
