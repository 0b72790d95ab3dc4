package dataplane

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/holdfast-dev/holdfast/internal/rollout"
	"github.com/holdfast-dev/holdfast/internal/wire"
	"github.com/holdfast-dev/holdfast/transport"
)

// Limits on what clients send.
const (
	maxAckBytes    = 64 << 10 // one ack
	maxAckBatch    = 1 << 20  // a batch
	maxAckErrorLen = transport.MaxAckErrorBytes
)

// ackBody is the body of POST /sdk/ack: one transport.Ack, or (Acks not
// nil) a wire.AckBatch.
type ackBody struct {
	transport.Ack
	Acks []transport.Ack `json:"acks"`
}

// parseAckBody decodes and checks the body of POST /sdk/ack, a single ack
// or a batch; batch says which. Every ack of a batch gets the batch's
// client_id, but with ownIDs (transport.CapabilityAckRelay) one that names
// its own keeps it. One bad ack refuses the whole body. Unknown fields are
// allowed, so that newer clients can send more; a relay (relay) keeps
// them (transport.Ack.Extra) and takes any status, to forward what it
// does not know.
func parseAckBody(data []byte, ownIDs, relay bool) (acks []transport.Ack, batch bool, err error) {
	var d ackDecoder
	return d.parse(data, ownIDs, relay)
}

// checkAckBody checks a decoded body and returns its acks; a relay's
// (relay) may have any status.
func checkAckBody(body ackBody, ownIDs, relay bool) (acks []transport.Ack, batch bool, err error) {
	if body.Acks == nil {
		ack, err := checkAck(body.Ack, relay)
		if err != nil {
			return nil, false, err
		}
		return []transport.Ack{ack}, false, nil
	}
	for i := range body.Acks {
		if !ownIDs || body.Acks[i].ClientID == "" {
			body.Acks[i].ClientID = body.ClientID
		}
		ack, err := checkAck(body.Acks[i], relay)
		if err != nil {
			return nil, true, fmt.Errorf("%w (ack %d of the batch)", err, i)
		}
		body.Acks[i] = ack
	}
	return body.Acks, true, nil
}

// parseRelayedAckBody is parseAckBody for a relay: each ack decoded on its
// own, to keep what this version does not know of it.
func parseRelayedAckBody(data []byte, ownIDs bool) (acks []transport.Ack, batch bool, err error) {
	var body struct {
		transport.Ack
		Acks []json.RawMessage `json:"acks"`
	}
	if err := unmarshal(data, &body); err != nil {
		return nil, false, err
	}
	if body.Acks == nil {
		body.Ack.Extra = wire.AckExtra(data, "acks")
		ack, err := checkAck(body.Ack, true)
		if err != nil {
			return nil, false, err
		}
		return []transport.Ack{ack}, false, nil
	}
	acks = make([]transport.Ack, len(body.Acks))
	for i, raw := range body.Acks {
		var a transport.Ack
		if err := unmarshal(raw, &a); err != nil {
			return nil, true, fmt.Errorf("%w (ack %d of the batch)", err, i)
		}
		if !ownIDs || a.ClientID == "" {
			a.ClientID = body.ClientID
		}
		a.Extra = wire.AckExtra(raw)
		if acks[i], err = checkAck(a, true); err != nil {
			return nil, true, fmt.Errorf("%w (ack %d of the batch)", err, i)
		}
	}
	return acks, true, nil
}

// unmarshal decodes exactly one JSON value (json.Unmarshal refuses
// trailing data), without the allocations of a Decoder: the ack path.
func unmarshal(data []byte, v any) error {
	if len(bytes.TrimSpace(data)) == 0 {
		return fmt.Errorf("%w: empty body", ErrInvalid)
	}
	if err := json.Unmarshal(data, v); err != nil {
		return fmt.Errorf("%w: body: %v", ErrInvalid, err)
	}
	return nil
}

// parseAck decodes and checks the body of POST /sdk/ack. Unknown fields are
// allowed, so that newer clients can send more.
func parseAck(data []byte) (transport.Ack, error) {
	var ack transport.Ack
	if err := unmarshal(data, &ack); err != nil {
		return ack, err
	}
	return checkAck(ack, false)
}

// checkAck checks one ack, cutting a long error. A relay (relay) takes
// any status that is a token: a report of a later protocol, forwarded for
// its upstream to judge.
func checkAck(ack transport.Ack, relay bool) (transport.Ack, error) {
	if err := transport.ValidateClientID(ack.ClientID); err != nil {
		return ack, fmt.Errorf("%w: client_id: %v", ErrInvalid, err)
	}
	known := ack.Status == transport.AckApplied || ack.Status == transport.AckRejected || ack.Status == transport.AckWouldReject
	switch {
	case ack.Revision < 0:
		return ack, fmt.Errorf("%w: negative revision %d", ErrInvalid, ack.Revision)
	case !known && !(relay && isToken(ack.Status)):
		return ack, fmt.Errorf("%w: status %q (want %q, %q or %q)", ErrInvalid, ack.Status, transport.AckApplied, transport.AckRejected, transport.AckWouldReject)
	case len(ack.Rollout) > rollout.MaxIDLen:
		return ack, fmt.Errorf("%w: rollout must have at most %d bytes", ErrInvalid, rollout.MaxIDLen)
	case !wire.ValidSDKVersion(ack.SDKVersion):
		return ack, fmt.Errorf("%w: sdk_version must be at most %d letters, digits, '.', '+' or '-', beginning with a letter or digit", ErrInvalid, wire.MaxSDKVersionBytes)
	}
	if !isNamespace(ack.Namespace) { // the regexp costs more than decoding the ack
		if err := transport.ValidateNamespace(ack.Namespace); err != nil {
			return ack, fmt.Errorf("%w: %w", ErrInvalid, err)
		}
	}
	if len(ack.Error) > maxAckErrorLen {
		ack.Error = ack.Error[:maxAckErrorLen]
	}
	return ack, nil
}

// isNamespace reports whether transport.ValidateNamespace takes s:
// ^[a-z0-9][a-z0-9._-]{0,127}$, by hand.
func isNamespace(s string) bool {
	if s == "" || len(s) > 128 || !(s[0] >= 'a' && s[0] <= 'z' || s[0] >= '0' && s[0] <= '9') {
		return false
	}
	for i := 1; i < len(s); i++ {
		if c := s[i]; !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-') {
			return false
		}
	}
	return true
}

// isToken reports whether s is [a-z0-9_-]{1,64}.
func isToken(s string) bool {
	if s == "" || len(s) > 64 {
		return false
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '_' || c == '-') {
			return false
		}
	}
	return true
}

// parseCursor parses a cursor; "" means "from the head" (-1).
func parseCursor(s string) (int64, error) {
	if s == "" {
		return -1, nil
	}
	c, err := strconv.ParseInt(strings.TrimSpace(s), 10, 64)
	if err != nil || c < 0 {
		return 0, fmt.Errorf("%w: cursor %q is not a non-negative integer", ErrInvalid, s)
	}
	return c, nil
}

// parseDuration accepts Go durations ("1.5s") and whole seconds ("30").
func parseDuration(s string) (time.Duration, error) {
	if n, err := strconv.ParseInt(s, 10, 64); err == nil && n >= 0 && n < 1<<31 {
		return time.Duration(n) * time.Second, nil
	}
	d, err := time.ParseDuration(s)
	if err != nil || d < 0 {
		return 0, fmt.Errorf("%w: duration %q (want e.g. \"30s\")", ErrInvalid, s)
	}
	return d, nil
}
