package telemetry

import (
	"bytes"
	_ "embed" // the dashboard and the rules ship in the binary
	"strings"
)

//go:embed dashboards/holdfast.json
var dashboard []byte

// Dashboard returns the Grafana dashboard, dashboards/holdfast.json, to
// import as it is (it asks for a Prometheus data source) or to provision.
// Each call returns a fresh copy.
func Dashboard() []byte { return bytes.Clone(dashboard) }

//go:embed alerts/holdfast.rules.yml
var alertRules []byte

// AlertRules returns the Prometheus alerting rules,
// alerts/holdfast.rules.yml, to load as a rule file: a namespace breached
// or failing closed, staleness nearing its MaxStaleness, rejected updates,
// persist errors and reconnect storms. Each call returns a fresh copy.
func AlertRules() []byte { return bytes.Clone(alertRules) }

//go:embed dashboards/holdfast-server.json
var serverDashboard []byte

// ServerDashboard returns the Grafana dashboard of holdfast server and
// holdfast relay, dashboards/holdfast-server.json: requests, publishes
// and their propagation, the store, the watch cache, leadership,
// rollouts and relays. Each call returns a fresh copy.
func ServerDashboard() []byte { return bytes.Clone(serverDashboard) }

//go:embed alerts/holdfast-server.rules.yml
var serverAlertRules []byte

// ServerAlertRules returns the Prometheus alerting rules of holdfast
// server and holdfast relay, alerts/holdfast-server.rules.yml: no leader,
// the store unreachable, the watch cache behind, slow publishes, slow
// propagation, relays behind or cut off. Each call returns a fresh copy.
func ServerAlertRules() []byte { return bytes.Clone(serverAlertRules) }

//go:embed dashboards/holdfast-server.series
var serverSeries string

// ServerSeries returns the Prometheus series holdfast server and holdfast
// relay export besides Go's, the process's and target_info (a
// histogram's as its _bucket, _count and _sum), as
// dashboards/holdfast-server.series lists them: what the server's
// dashboard and alert rules query.
func ServerSeries() []string {
	var out []string
	for _, line := range strings.Split(serverSeries, "\n") {
		if line = strings.TrimSpace(line); line != "" && !strings.HasPrefix(line, "#") {
			out = append(out, line)
		}
	}
	return out
}
