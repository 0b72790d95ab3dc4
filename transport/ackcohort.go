package transport

import (
	"context"
	"encoding/json"
	"errors"

	"github.com/holdfast-dev/holdfast/internal/wire"
)

// CapabilityAckCohort is the capability of POST /sdk/ack/cohort: a relay
// reports the outcomes of its clients by slot, not by client id. It names
// each client once (its slot in the relay's cohort of a namespace), then
// sends, per flush, each outcome with the runs of slots that reached it:
// when every client behind the relay applied a publish, that is one
// outcome with one run, whatever the number of clients. The server then
// spends per publish what the relay's outcomes take, not what its clients
// number.
const CapabilityAckCohort = "ack-cohort"

// PathAckCohort is the path of a relay's cohort reports.
const PathAckCohort = "/sdk/ack/cohort"

// CodeCohortUnknown: a cohort report names slots (or continues a list of
// members) the server does not know of: the server restarted, reset, or
// never heard of this epoch. It comes with 409 Conflict; nothing of the
// report was recorded, and the relay sends its members again from slot 0.
const CodeCohortUnknown = "cohort_unknown"

// ErrCohortUnknown reports CodeCohortUnknown.
var ErrCohortUnknown = errors.New("transport: cohort unknown to the server")

// Limits of one cohort report, checked by both ends (a relay before it
// sends, a server as it reads).
const (
	// MaxCohortSlots bounds a cohort's slots: the clients of one
	// namespace behind one relay. Past it, a relay reports the others'
	// outcomes one by one (AckRelayed).
	MaxCohortSlots = wire.MaxCohortSlots
	// MaxCohortRuns bounds the runs of one report's outcomes: a relay
	// sends more in several reports.
	MaxCohortRuns = wire.MaxCohortRuns
)

// The sources a relay forwards its clients' acks through.
var (
	_ wire.CohortAcker = (*HTTPSource)(nil)
	_ wire.CohortAcker = (*FailoverSource)(nil)
	_ wire.RelayAcker  = (*HTTPSource)(nil)
	_ wire.RelayAcker  = (*FailoverSource)(nil)
)

// CohortsOffered reports whether the server listed CapabilityAckCohort.
func (s *HTTPSource) CohortsOffered() bool { return s.offers(CapabilityAckCohort) }

// AckCohort sends a relay's cohort report, encoded and checked by the
// relay, as one POST /sdk/ack/cohort: the project's relay uses it; the
// report's form is not part of this package. It returns
// ErrStreamUnsupported when the server does not offer
// CapabilityAckCohort, and an error wrapping ErrCohortUnknown when the
// server does not know the slots the report names.
func (s *HTTPSource) AckCohort(ctx context.Context, relayID string, report json.RawMessage) error {
	if !s.offers(CapabilityAckCohort) {
		return ErrStreamUnsupported
	}
	return s.postJSON(ctx, PathAckCohort, "cohort report", relayID, report)
}
