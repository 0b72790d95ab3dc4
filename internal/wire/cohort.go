package wire

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"slices"
)

// Limits of one cohort report, checked by both ends (a relay before it
// sends, a server as it reads).
const (
	// MaxCohortSlots bounds a cohort's slots: the clients of one
	// namespace behind one relay. Past it, a relay reports the others'
	// outcomes one by one (RelayAcker).
	MaxCohortSlots = 1 << 20
	// MaxCohortRuns bounds the runs of one report's outcomes: a relay
	// sends more in several reports.
	MaxCohortRuns = 1 << 16
	// MaxCohortMembers bounds the members one report names (client ids
	// of at most MaxClientIDBytes): a relay names more over several
	// reports, each well within a server's 1 MiB body limit.
	MaxCohortMembers = 2048
)

// CohortReport is the body of POST /sdk/ack/cohort.
type CohortReport struct {
	// RelayID names the relay; Epoch its cohorts' numbering: a relay
	// that starts afresh (or forgets its slots) takes a new epoch, and
	// the server folds what the old one said into per-client records.
	RelayID    string            `json:"relay_id"`
	Epoch      string            `json:"epoch"`
	Namespaces []CohortNamespace `json:"namespaces"`
}

// CohortNamespace is a report's part about one namespace.
type CohortNamespace struct {
	Namespace string `json:"ns"`
	// Members names the clients of slots From, From+1, …: those the
	// server has not been told of. From is at most the number of slots
	// the server knows (else transport.CodeCohortUnknown); a report sent
	// again names the same members again, harmlessly. A part names its
	// namespace once in a report, and its outcomes may name the slots
	// of its Members.
	From     int             `json:"from,omitempty"`
	Members  []string        `json:"members,omitempty"`
	Outcomes []CohortOutcome `json:"outcomes,omitempty"`
}

// CohortOutcome is an outcome (AckApplied or AckRejected of a
// revision) that the clients of Runs reported, as an Ack of each
// would.
type CohortOutcome struct {
	Revision int64  `json:"revision"`
	Status   string `json:"status"`
	Error    string `json:"error,omitempty"`
	// SDKVersion is the SDK version the clients of Runs reported with it
	// (Ack.SDKVersion); empty when they did not say.
	SDKVersion string `json:"sdk_version,omitempty"`
	// Runs are pairs of a first slot and a count: [0, 10000] is slots 0
	// to 9999.
	Runs []int `json:"runs"`
}

// Slots calls fn for each slot of o's runs, in order; the runs must be
// valid (CheckCohortReport).
func (o *CohortOutcome) Slots(fn func(slot int)) {
	for i := 0; i+1 < len(o.Runs); i += 2 {
		for s := o.Runs[i]; s < o.Runs[i]+o.Runs[i+1]; s++ {
			fn(s)
		}
	}
}

// CohortAcker is implemented by sources that can send cohort reports (a
// relay's upstream: transport.HTTPSource and transport.FailoverSource).
// AckCohort posts one report as encoded by SendCohort, which checks it
// first; it returns transport.ErrStreamUnsupported when the server does
// not offer transport.CapabilityAckCohort, and transport.ErrCohortUnknown
// when the server does not know the slots the report names.
type CohortAcker interface {
	AckCohort(ctx context.Context, relayID string, report json.RawMessage) error
	// CohortsOffered reports whether the server offers
	// transport.CapabilityAckCohort, as far as the source knows now.
	CohortsOffered() bool
}

// SendCohort checks r (CheckCohortReport) and sends it through src as
// one POST /sdk/ack/cohort. A report that fails the check is not sent:
// the error wraps ErrBadRequest (sending it again cannot help,
// and no endpoint would take it, so a FailoverSource does not move on).
func SendCohort(ctx context.Context, src CohortAcker, r *CohortReport) error {
	if err := CheckCohortReport(r); err != nil {
		return fmt.Errorf("%w: %v", ErrBadRequest, err)
	}
	body, err := json.Marshal(r)
	if err != nil {
		return fmt.Errorf("cohort report: %w", err)
	}
	return src.AckCohort(ctx, r.RelayID, body)
}

// CheckCohortReport checks r's form (not what the server knows): names,
// each namespace once, member ids as an ack's client_id, revisions not
// negative, statuses, errors of at most MaxAckErrorBytes, runs
// that are sorted pairs of a slot and a positive count below
// MaxCohortSlots, no slot in two outcomes of one status, limits.
// Both ends check: a relay so as not to send what a server refuses, a
// server what it reads.
func CheckCohortReport(r *CohortReport) error {
	if err := ValidateClientID(r.RelayID); err != nil {
		return fmt.Errorf("cohort report's relay id: %w", err)
	}
	if r.Epoch == "" || len(r.Epoch) > 64 {
		return fmt.Errorf("cohort report: an epoch must have 1..64 bytes")
	}
	members, runs := 0, 0
	seen := make(map[string]bool, len(r.Namespaces))
	for i := range r.Namespaces {
		n := &r.Namespaces[i]
		if err := ValidateNamespace(n.Namespace); err != nil {
			return err
		}
		if seen[n.Namespace] {
			return fmt.Errorf("cohort report naming %q twice", n.Namespace)
		}
		seen[n.Namespace] = true
		if n.From < 0 || n.From+len(n.Members) > MaxCohortSlots {
			return fmt.Errorf("cohort of %q: members from slot %d beyond the limit of %d slots", n.Namespace, n.From, MaxCohortSlots)
		}
		for _, m := range n.Members {
			if err := ValidateClientID(m); err != nil {
				return fmt.Errorf("cohort of %q: a member: %w", n.Namespace, err)
			}
		}
		members += len(n.Members)
		for j := range n.Outcomes {
			o := &n.Outcomes[j]
			if o.Revision < 0 {
				return fmt.Errorf("cohort of %q: negative revision %d", n.Namespace, o.Revision)
			}
			if o.Status != AckApplied && o.Status != AckRejected {
				return fmt.Errorf("cohort of %q: status %q (want %q or %q)", n.Namespace, o.Status, AckApplied, AckRejected)
			}
			if len(o.Error) > MaxAckErrorBytes {
				return fmt.Errorf("cohort of %q: an error of more than %d bytes", n.Namespace, MaxAckErrorBytes)
			}
			if !ValidSDKVersion(o.SDKVersion) {
				return fmt.Errorf("cohort of %q: sdk_version %q is not 1..%d letters, digits, '.', '+' or '-' beginning with a letter or digit", n.Namespace, o.SDKVersion, MaxSDKVersionBytes)
			}
			if len(o.Runs)%2 != 0 || len(o.Runs) == 0 {
				return fmt.Errorf("cohort of %q: runs must be pairs of a slot and a count", n.Namespace)
			}
			next := 0
			for k := 0; k < len(o.Runs); k += 2 {
				first, count := o.Runs[k], o.Runs[k+1]
				if first < next || count <= 0 || count > MaxCohortSlots || first > MaxCohortSlots-count {
					return fmt.Errorf("cohort of %q: run [%d, %d] out of order or out of range", n.Namespace, first, count)
				}
				next = first + count
			}
			runs += len(o.Runs) / 2
		}
		if err := checkCohortOverlap(n); err != nil {
			return err
		}
	}
	if members > MaxCohortMembers {
		return fmt.Errorf("cohort report naming %d members (at most %d)", members, MaxCohortMembers)
	}
	if runs > MaxCohortRuns {
		return fmt.Errorf("cohort report of %d runs (at most %d)", runs, MaxCohortRuns)
	}
	return nil
}

// checkCohortOverlap refuses a part whose outcomes of one status name a
// slot twice: a client has one ack and one nack of a namespace at a time,
// and a report repeating its runs would cost the server a record (and,
// expanded, an ack) per slot per repeat. n's runs must be in order.
func checkCohortOverlap(n *CohortNamespace) error {
	for _, status := range []string{AckApplied, AckRejected} {
		var spans [][2]int // first, end
		outcomes := 0
		for j := range n.Outcomes {
			if o := &n.Outcomes[j]; o.Status == status {
				outcomes++
				for k := 0; k+1 < len(o.Runs); k += 2 {
					spans = append(spans, [2]int{o.Runs[k], o.Runs[k] + o.Runs[k+1]})
				}
			}
		}
		if outcomes < 2 {
			continue // one outcome's runs are in order already
		}
		slices.SortFunc(spans, func(x, y [2]int) int { return cmp.Compare(x[0], y[0]) })
		for k := 1; k < len(spans); k++ {
			if spans[k][0] < spans[k-1][1] {
				return fmt.Errorf("cohort of %q: slot %d in two %s outcomes", n.Namespace, spans[k][0], status)
			}
		}
	}
	return nil
}
