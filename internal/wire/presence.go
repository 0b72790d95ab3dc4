package wire

import (
	"context"
	"encoding/json"
	"fmt"
	"time"
)

// PresenceReport is the body of POST /sdk/presence: which clients are
// connected to a relay (or to a relay behind it), as changes since the
// relay's previous report of the same epoch, or whole (Full).
type PresenceReport struct {
	// RelayID names the relay; Epoch its run of reports: a relay that
	// starts afresh takes a new one. Seq numbers the reports of an
	// epoch from 1: a server that missed one (or does not know the
	// epoch) refuses the next with 409 presence_unknown, and the relay
	// sends its whole set again (Full).
	RelayID string `json:"relay_id"`
	Epoch   string `json:"epoch"`
	Seq     uint64 `json:"seq"`
	// Full: the report begins the relay's set afresh; the clients the
	// server held of the relay and that it does not list are gone. A set
	// larger than one report goes as a Full report followed by changes.
	Full bool `json:"full,omitempty"`
	// EveryMillis is how often at most the relay reports, changes or
	// not: a server that hears nothing from it for two of these holds
	// its clients stale (the relay is cut off from it).
	EveryMillis int64 `json:"every_ms"`
	// Live, Stale and Gone list the clients in each state now (Gone:
	// disconnected from the relay, as of the report).
	Live  []string `json:"live,omitempty"`
	Stale []string `json:"stale,omitempty"`
	Gone  []string `json:"gone,omitempty"`
	// Lost is what the relay, and the relays behind it, could not keep
	// of their clients' reports past a bound (docs/ROLLOUTS.md, "Bounds
	// and what the controller knows"): each count since the relay that
	// lost them started. Every report carries the whole list, so that a
	// server that missed one reads it again from the next. A server
	// counts them as reports missing: a rollout of their namespace holds.
	// Servers that do not know the field ignore it.
	Lost []LostReports `json:"lost,omitempty"`
}

// LostReports is what one relay lost of one kind: of Namespace, or of
// clients of any namespace (Namespace empty). A server counts an entry
// of a kind it does not know all the same, against its namespace.
type LostReports struct {
	Relay     string    `json:"relay"`
	Kind      string    `json:"kind"`
	Namespace string    `json:"ns,omitempty"`
	N         int64     `json:"n"`
	Last      time.Time `json:"last"` // when the last was lost
	// Current: the loss lasts (clients connected now that the relay's
	// presence table could not keep, at most N): a server counts it as
	// of each report that says so.
	Current bool `json:"current,omitempty"`
}

// The kinds of LostReports this version knows.
const (
	// LostAcks: outcomes of Namespace the relay's full ack queue dropped.
	LostAcks = "acks"
	// LostUnbound: outcomes of Namespace the relay's data plane dropped
	// as their clients' token bindings, a full table, could not be kept.
	LostUnbound = "unbound"
	// LostPresence: clients the relay's full presence table did not
	// track, of any namespace.
	LostPresence = "presence"
)

// MaxPresenceLost bounds the entries of PresenceReport.Lost: a relay
// with more sums the rest into one LostPresence entry of its own, which
// holds every namespace's rollouts.
const MaxPresenceLost = 1024

// MaxPresenceClients bounds the client ids one presence report names: a
// relay names more over several reports.
const MaxPresenceClients = 8192

// CheckPresenceReport checks what a server needs of a report before it
// records anything of it.
func CheckPresenceReport(r *PresenceReport) error {
	switch {
	case r.RelayID == "" || len(r.RelayID) > MaxClientIDBytes:
		return fmt.Errorf("presence report: relay_id must be 1-%d bytes", MaxClientIDBytes)
	case r.Epoch == "" || len(r.Epoch) > 64:
		return fmt.Errorf("presence report: epoch must be 1-64 bytes")
	case r.Seq < 1:
		return fmt.Errorf("presence report: seq must be at least 1")
	case r.EveryMillis < 1:
		return fmt.Errorf("presence report: every_ms must be at least 1")
	case len(r.Live)+len(r.Stale)+len(r.Gone) > MaxPresenceClients:
		return fmt.Errorf("presence report: %d clients, at most %d", len(r.Live)+len(r.Stale)+len(r.Gone), MaxPresenceClients)
	case len(r.Lost) > MaxPresenceLost:
		return fmt.Errorf("presence report: %d lost entries, at most %d", len(r.Lost), MaxPresenceLost)
	}
	for _, l := range r.Lost {
		switch {
		case ValidateClientID(l.Relay) != nil:
			return fmt.Errorf("presence report: lost: %w", ValidateClientID(l.Relay))
		case len(l.Kind) > 64 || ValidateClientID(l.Kind) != nil:
			return fmt.Errorf("presence report: a lost entry's kind must be 1-64 bytes, no control character")
		case l.Namespace != "" && ValidateNamespace(l.Namespace) != nil:
			return fmt.Errorf("presence report: lost: %w", ValidateNamespace(l.Namespace))
		case l.N < 1:
			return fmt.Errorf("presence report: a lost entry's n must be at least 1")
		}
	}
	for _, ids := range [][]string{r.Live, r.Stale, r.Gone} {
		for _, id := range ids {
			if err := ValidateClientID(id); err != nil {
				return fmt.Errorf("presence report: %w", err)
			}
		}
	}
	return nil
}

// PresenceReporter is an upstream that takes a relay's presence reports
// (transport.CapabilityPresence).
type PresenceReporter interface {
	// ReportPresence sends one encoded PresenceReport.
	ReportPresence(ctx context.Context, report json.RawMessage) error
	// PresenceOffered reports whether the upstream offers presence
	// reports, as far as the source knows now.
	PresenceOffered() bool
}
