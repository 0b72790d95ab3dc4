package telemetry

import (
	"bytes"
	_ "embed" // the dashboard and the rules ship in the binary
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
