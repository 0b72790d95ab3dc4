package transport

import (
	"context"
	"fmt"
	"slices"

	"github.com/holdfast-dev/holdfast/internal/wire"
)

// CapabilityAckRelay is the capability of a batched POST /sdk/ack (or
// ack-stream line) whose acks carry client ids of their own: a relay
// forwarding its clients' reports in one batch, each recorded for its own
// client. A server without it records every ack of a batch for the
// batch's client id.
const CapabilityAckRelay = "ack-relay"

// maxRelayedBatch bounds the acks of one relayed batch: about 100 bytes
// each, well within a server's 1 MiB body limit.
const maxRelayedBatch = 4096

// AckRelayed sends acks in batches of relayID whose acks keep their own
// client ids, over the ack stream when it is open. A server that does not
// offer CapabilityAckRelay gets one batch per client instead.
func (s *HTTPSource) AckRelayed(ctx context.Context, relayID string, acks []Ack) error {
	for _, a := range acks {
		// Any status: a relay forwards reports of later protocols too,
		// for its upstream to judge.
		if err := ValidateNamespace(a.Namespace); err != nil {
			return err
		}
		if a.Status == "" {
			return fmt.Errorf("transport: relayed ack of %q without a status", a.Namespace)
		}
		if a.ClientID == "" {
			return fmt.Errorf("transport: relayed ack of %q without a client id", a.Namespace)
		}
	}
	if len(acks) == 0 {
		return nil
	}
	if !s.offers(CapabilityAckRelay) {
		return s.AckBatch(ctx, acks)
	}
	var bs []wire.AckBatch
	for len(acks) > 0 {
		n := min(len(acks), maxRelayedBatch)
		b := wire.AckBatch{ClientID: relayID, Acks: acks[:n]}
		if slices.ContainsFunc(b.Acks, func(a Ack) bool { return len(a.Error) > MaxAckErrorBytes }) {
			// A copy, only then: acks is the caller's.
			b.Acks = slices.Clone(b.Acks)
			for i := range b.Acks {
				b.Acks[i].Error = wire.TruncateAckError(b.Acks[i].Error)
			}
		}
		acks = acks[n:]
		bs = append(bs, b)
	}
	return s.sendBatches(ctx, bs)
}
