package transport

import (
	"context"
	"encoding/json"
	"errors"

	"github.com/holdfast-dev/holdfast/internal/wire"
)

// CapabilityPresence is the capability of POST /sdk/presence: a relay
// reports which of its clients are connected (docs/PROTOCOL.md,
// "Presence"), as changes, so that a server knows the clients behind its
// relays as it knows its own.
const CapabilityPresence = "presence"

// PathPresence is the path of a relay's presence reports.
const PathPresence = "/sdk/presence"

// CodePresenceUnknown: a presence report continues a run of reports the
// server does not know (it restarted, the relay failed over to it, a
// report was lost). It comes with 409 Conflict; nothing of the report was
// recorded, and the relay sends its whole set again.
const CodePresenceUnknown = "presence_unknown"

// ErrPresenceUnknown reports CodePresenceUnknown.
var ErrPresenceUnknown = errors.New("transport: presence reports unknown to the server")

// The sources a relay reports its clients' presence through.
var (
	_ wire.PresenceReporter = (*HTTPSource)(nil)
	_ wire.PresenceReporter = (*FailoverSource)(nil)
)

// PresenceOffered reports whether the server listed CapabilityPresence.
func (s *HTTPSource) PresenceOffered() bool { return s.offers(CapabilityPresence) }

// ReportPresence sends a relay's presence report, encoded by the relay,
// as one POST /sdk/presence. It returns ErrStreamUnsupported when the
// server does not offer CapabilityPresence, and an error wrapping
// ErrPresenceUnknown when the server does not know the run of reports.
func (s *HTTPSource) ReportPresence(ctx context.Context, report json.RawMessage) error {
	if !s.offers(CapabilityPresence) {
		return ErrStreamUnsupported
	}
	return s.postJSON(ctx, PathPresence, "presence report", "", report)
}

// ReportPresence sends the report to the current endpoint; one that
// does not know the relay's run of reports says so (ErrPresenceUnknown)
// and hears the whole set again.
func (f *FailoverSource) ReportPresence(ctx context.Context, report json.RawMessage) error {
	i := f.current()
	err := f.srcs[i].ReportPresence(ctx, report)
	f.after(ctx, i, err)
	return err
}

// PresenceOffered reports whether the current endpoint offers presence
// reports.
func (f *FailoverSource) PresenceOffered() bool { return f.srcs[f.current()].PresenceOffered() }
