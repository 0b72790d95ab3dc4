package transport

// CapabilityReportsKept says that a server does not need a client to
// repeat its reports (docs/PROTOCOL.md, "When a client reports"): it
// takes a client's liveness from its connection (its presence), and,
// when it is a relay, it keeps each of its clients' last report and tells
// them again to an upstream that is new (its first connection, a
// reconnection, a failover, the upstream's restart). A client of a server
// that lists it reports once per connection and at every change; of one
// that does not, it reports again at every progress event while a
// rollout runs.
const CapabilityReportsKept = "reports-kept"

// ReportsKept reports whether the server last listed
// CapabilityReportsKept.
func (s *HTTPSource) ReportsKept() bool { return s.offers(CapabilityReportsKept) }

// ReportsKept reports whether the current endpoint lists
// CapabilityReportsKept.
func (f *FailoverSource) ReportsKept() bool { return f.srcs[f.current()].ReportsKept() }
