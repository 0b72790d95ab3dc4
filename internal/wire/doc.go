// Package wire holds the bodies of the data-plane protocol
// (docs/PROTOCOL.md) that both ends encode or decode, once: package
// transport (the SDK's client) builds on them, and so do the project's
// own server side: the data plane (internal/dataplane), the reference
// server (internal/fakeserver), holdfast server, the relay and its ack
// queue (internal/acks).
//
// It imports nothing of holdfast, so that transport can import it.
// transport names what an SDK user sees of it (transport.Ack and
// transport.ChangeSet are aliases of Ack and ChangeSet; the limits, the
// name checks and the sentinels ErrMalformed, ErrBadRequest and
// ErrInvalidNamespace are the same values under transport's names); the
// rest a client of the SDK needs not, so it stays out of transport's
// public surface:
//
//   - the bodies of batched and relayed acks (AckBatch, AppendAckBatch,
//     the members of an ack a relay forwards unread: AckExtra) and of a
//     relay's cohort reports (CohortReport, checked by
//     CheckCohortReport), with the interfaces an upstream source offers
//     for them (RelayAcker, CohortAcker; transport.HTTPSource and
//     transport.FailoverSource implement both);
//   - the body of a stream's ended event and of a stream long-poll
//     (NamespaceEndedBody, StreamEventsResponse);
//   - helpers both ends write with: EncodeValues (a snapshot's values),
//     ETag, TruncateAckError, AgeFromMillis, Truncate.
package wire
