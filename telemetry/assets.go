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
