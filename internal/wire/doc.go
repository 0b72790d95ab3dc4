// Package wire holds the parts of the data-plane protocol (docs/PROTOCOL.md)
// that only the project's own server side speaks: the reference server
// (internal/fakeserver, server/), the relay (relay/, internal/acks) and the
// holdfast command. A client of the SDK needs none of them, so they stay out
// of package transport's public surface.
//
// It builds on transport's wire types (Ack, Snapshot, ChangeSet, the error
// codes and sentinels) and adds:
//
//   - the bodies of batched and relayed acks (AckBatch, the members of an
//     ack a relay forwards unread: AckExtra) and of a relay's cohort
//     reports (CohortReport, checked by CheckCohortReport), with the
//     interfaces an upstream source offers for them (RelayAcker,
//     CohortAcker; transport.HTTPSource and transport.FailoverSource
//     implement both);
//   - the body of a stream's ended event and of a stream long-poll
//     (NamespaceEndedBody, StreamEventsResponse);
//   - helpers a server writes with: EncodeValues (a snapshot's values),
//     ETag, TruncateAckError, AgeFromMillis.
//
// transport's HTTP source encodes and decodes the same bodies with
// unexported code of its own (transport cannot import this package, which
// imports it): this package's tests pin that both ends' ETag agree, and
// the reference server's tests, which run the HTTP source against it, the
// bodies.
package wire
