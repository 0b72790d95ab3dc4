package wire

import (
	"bytes"
	"context"
	"encoding/json"
	"maps"
	"slices"
	"unicode/utf8"

	"github.com/holdfast-dev/holdfast/transport"
)

// AckBatch is the body of a batched POST /sdk/ack (capability
// transport.CapabilityAckBatch): the acks of one client, across its
// namespaces; with transport.CapabilityAckRelay, the acks of a relay's
// clients, each with its own client id. It is also one line of an ack
// stream (transport.CapabilityAckStream).
type AckBatch struct {
	ClientID string          `json:"client_id"`
	Acks     []transport.Ack `json:"acks"`
}

// RelayAcker is implemented by sources that can forward the acks of many
// clients at once, each ack with its own ClientID (a relay's upstream:
// transport.HTTPSource and transport.FailoverSource).
type RelayAcker interface {
	// AckRelayed reports acks on behalf of their clients; relayID names
	// the relay that forwards them.
	AckRelayed(ctx context.Context, relayID string, acks []transport.Ack) error
}

// TruncateAckError cuts an ack's error to transport.MaxAckErrorBytes, at
// a rune's start: what a relay forwards of a client's error.
func TruncateAckError(s string) string {
	n := transport.MaxAckErrorBytes
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}

// knownAckField reports whether k names a field of transport.Ack on the
// wire.
func knownAckField(k string) bool {
	switch k {
	case "client_id", "ns", "revision", "status", "error", "rollout":
		return true
	}
	return false
}

// AckExtra returns the members of one ack object that transport.Ack does
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
